"""The shard reader yields exactly what webdataset's tarfile_to_samples yields, and names broken shards."""

from __future__ import annotations

import io
import tarfile

import pytest
import webdataset as wds

from crossmod.data.tar_reader import ShardFormatError, shard_samples
from tests.fixtures.small import small_synthetic


def _both(urls: list[str]) -> tuple[list[dict], list[dict]]:
    ours = list(wds.DataPipeline(wds.SimpleShardList(urls), shard_samples))
    theirs = list(wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples(handler=wds.reraise_exception)))
    return ours, theirs


def _tar(path, members: list[tuple[str, bytes]], fmt: int, directories: tuple[str, ...] = ()) -> str:
    with tarfile.open(path, "w", format=fmt) as archive:
        for name in directories:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return str(path)


def test_same_samples_as_webdataset_on_written_shards(tmp_path):
    directory, manifest = small_synthetic(tmp_path, num_groups=10, samples_per_shard=7)
    urls = [str(directory / shard["name"]) for shard in manifest["shards"]]
    ours, theirs = _both(urls)
    assert len(ours) == manifest["samples_written"] > 7
    assert ours == theirs


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
def test_long_names_pax_headers_directories_and_metadata_files(tmp_path, fmt):
    deep = "d/" * 60 + "deep"  # > 100 characters: PAX path record, GNU long name or ustar prefix
    members = [
        ("__info__/x.json", b"{}"),  # a metadata folder: webdataset skips it
        (f"{deep}.json", b'{"a": 1}'),
        (f"{deep}.JPG", b"\xff\xd8\xff" + bytes(range(256)) * 3),  # suffixes are lower-cased
        ("k\u00e9y.txt" if fmt != tarfile.USTAR_FORMAT else "key.txt", b""),  # non-ASCII name (PAX/GNU), empty file
        ("k2.a.b", b"x" * 512),  # exactly one block, no padding
    ]
    path = _tar(tmp_path / "a.tar", members, fmt, directories=("d",))
    ours, theirs = _both([path])
    assert ours == theirs
    assert [s["__key__"] for s in ours] == [deep, members[3][0].split(".")[0], "k2"]
    assert ours[0]["jpg"] == members[2][1]


def test_samples_never_span_two_shards(tmp_path):
    first = _tar(tmp_path / "1.tar", [("same.json", b"1")], tarfile.PAX_FORMAT)
    second = _tar(tmp_path / "2.tar", [("same.jpg", b"2")], tarfile.PAX_FORMAT)
    ours, theirs = _both([first, second])
    assert ours == theirs and len(ours) == 2


def test_a_corrupt_header_names_the_shard_and_offset(tmp_path):
    path = _tar(tmp_path / "c.tar", [("a.json", b"1" * 600), ("b.json", b"2")], tarfile.PAX_FORMAT)
    raw = bytearray(open(path, "rb").read())
    raw[1536 + 10] ^= 0x01  # inside the name of the second member's header (after 512 + 1024 bytes)
    open(path, "wb").write(bytes(raw))
    with pytest.raises(ShardFormatError, match=r"c\.tar: tar header checksum mismatch at byte 1536"):
        list(shard_samples([{"url": path}]))


def test_a_truncated_shard_is_an_error_not_a_shorter_epoch(tmp_path):
    path = _tar(tmp_path / "t.tar", [("a.json", b"1" * 600), ("b.json", b"2" * 600)], tarfile.PAX_FORMAT)
    raw = open(path, "rb").read()
    open(path, "wb").write(raw[: 1536 + 512 + 100])  # second member's data cut short
    with pytest.raises(
        ShardFormatError, match=r"t\.tar: truncated at byte 2148, inside its data \(the 600-byte member whose header starts at byte 1536\)"
    ):
        list(shard_samples([{"url": path}]))


def test_the_archive_must_end_with_two_zero_blocks(tmp_path):
    """tarfile stops at the first zero block; a lone one followed by a member would hide that member."""
    first = open(_tar(tmp_path / "1.tar", [("a.json", b"1")], tarfile.PAX_FORMAT), "rb").read()
    second = open(_tar(tmp_path / "2.tar", [("b.json", b"2")], tarfile.PAX_FORMAT), "rb").read()
    path = tmp_path / "lone.tar"
    path.write_bytes(first[:1024] + bytes(512) + second)  # a.json, ONE zero block, then b.json
    with pytest.raises(ShardFormatError, match=r"lone\.tar: a lone zero block at byte 1024 is followed by more data"):
        list(shard_samples([{"url": str(path)}]))
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(ShardFormatError, match=r"empty\.tar: truncated at byte 0"):
        list(shard_samples([{"url": str(empty)}]))

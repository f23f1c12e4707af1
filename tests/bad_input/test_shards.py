"""Issue 15, item 4: a truncated or altered shard is never read as a shorter or different one.

The attacks are files: the project's own shard cut at every byte, a shard with one byte changed
(same size), and a valid tar with one sample fewer put in its place with the manifest's checksum and
size updated to match. The readers that must refuse: the tar reader of the training stream, the
whole-split reader behind evaluate / predict / zero-shot (`read_samples`), `iter_records` (folds,
reports), and the datamodule's `prepare_data` of a run. Each refusal names the shard and, for a cut,
the byte where the file ends.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path

import pytest

from crossmod.data.folds import iter_records
from crossmod.data.memes import MemeDataModule
from crossmod.data.shards import read_manifest, read_samples
from crossmod.data.tar_reader import ShardFormatError, shard_samples
from crossmod.inference.new_memes import read_inputs
from tests.bad_input.shard_tampering import copy_dataset, raw_entries, rewrite_shard, shard_record
from tests.fixtures.small import small_synthetic

SHARD = "train-000000.tar"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    directory, _ = small_synthetic(tmp_path_factory.mktemp("shards"), num_groups=2, samples_per_shard=2)
    return directory


def _archive_end(path: Path) -> tuple[int, int]:
    """Where the archive's two zero blocks end (the writer pads the file with zeros beyond that)."""
    with tarfile.open(path, "r:") as archive:
        members = archive.getmembers()
        return archive.offset + 1024, len(members)


def _without_url(samples) -> list[dict]:
    return [{k: v for k, v in sample.items() if k != "__url__"} for sample in samples]


def _tarfile_members(path: Path) -> int | None:
    """Members tarfile reads from `path`, or None when it raises."""
    try:
        with tarfile.open(path, "r:") as archive:
            return len(archive.getmembers())
    except tarfile.TarError:
        return None


def test_a_shard_cut_at_any_byte_is_an_error_naming_the_shard_and_where_it_ends(dataset, tmp_path):
    full = (dataset / SHARD).read_bytes()
    end, members = _archive_end(dataset / SHARD)
    complete = _without_url(shard_samples([{"url": str(dataset / SHARD)}]))
    record = shard_record(dataset, SHARD)
    cut = tmp_path / SHARD
    cut.write_bytes(full)
    unnamed, read_silently, tarfile_silent = [], [], []
    for size in range(len(full) - 1, -1, -1):  # truncate one byte further each time
        os.truncate(cut, size)
        named = f"shard {cut}"
        # with the manifest's record (read_samples, verify_shards, iter_records): every cut is refused
        try:
            list(shard_samples([{"url": str(cut), **{k: record[k] for k in ("count", "sha256", "bytes")}}]))
            read_silently.append(size)
        except ShardFormatError as error:
            if named not in str(error) or f"truncated at byte {size}" not in str(error):
                unnamed.append((size, str(error)))
        # the raw reader of the training stream: refused unless the cut only drops zero padding after
        # the end-of-archive blocks, block-aligned (then no member is lost and the samples are whole)
        try:
            samples = _without_url(shard_samples([{"url": str(cut)}]))
            if not (size >= end and size % 512 == 0 and samples == complete):
                read_silently.append(size)
        except ShardFormatError as error:
            if named not in str(error) or f"truncated at byte {size}" not in str(error):
                unnamed.append((size, str(error)))
        found = _tarfile_members(cut)
        if found is not None and found < members:
            tarfile_silent.append(size)
    assert not read_silently, f"cuts read without an error: {read_silently[:20]}"
    assert not unnamed, f"errors that do not name the shard and the cut: {unnamed[:5]}"
    # what tarfile guarantees is less: it returns fewer members, no error, at block boundaries and in padding
    assert len(tarfile_silent) > 100 and any(size % 512 == 0 for size in tarfile_silent)


@pytest.fixture
def truncated(dataset, tmp_path) -> tuple[Path, int]:
    """A copy of the dataset whose first shard lost its last sample, cut at a block boundary (tarfile is
    silent there: it reads one sample fewer)."""
    directory = copy_dataset(dataset, tmp_path / "d")
    with tarfile.open(directory / SHARD, "r:") as archive:
        last_json = [m for m in archive.getmembers() if m.name.endswith(".json")][-1]
    size = last_json.offset  # the last record's header starts here
    os.truncate(directory / SHARD, size)
    assert _tarfile_members(directory / SHARD) is not None  # tarfile reads it without complaint
    return directory, size


def test_predict_evaluate_and_zero_shot_refuse_a_truncated_shard(truncated):
    directory, size = truncated
    message = rf"shard {re.escape(str(directory / SHARD))}.*truncated at byte {size}"
    with pytest.raises(ShardFormatError, match=message):
        read_inputs(directory)  # predict.py inputs=<shard dir>
    with pytest.raises(ShardFormatError, match=message):
        read_samples(directory, ["train"])  # evaluate.py / zero-shot read whole splits through it


def test_a_training_run_refuses_a_truncated_shard_before_its_first_epoch(truncated):
    directory, size = truncated
    datamodule = MemeDataModule(heads=read_manifest(directory)["heads"], shard_dir=str(directory))
    with pytest.raises(ShardFormatError, match=rf"shard {re.escape(str(directory / SHARD))}.*truncated at byte {size}"):
        datamodule.prepare_data()


def test_the_raw_stream_refuses_it_too_when_verification_is_off(truncated):
    directory, size = truncated
    with pytest.raises(ShardFormatError, match=rf"truncated at byte {size}"):
        list(shard_samples([{"url": str(directory / SHARD)}]))


def test_one_changed_byte_is_caught_by_every_reader(dataset, tmp_path):
    directory = copy_dataset(dataset, tmp_path / "d")
    with tarfile.open(directory / SHARD, "r:") as archive:
        image = next(m for m in archive.getmembers() if m.name.endswith(".jpg"))
    raw = bytearray((directory / SHARD).read_bytes())
    raw[image.offset_data + image.size // 2] ^= 0xFF  # inside the image: the tar stays well formed
    (directory / SHARD).write_bytes(bytes(raw))
    assert _tarfile_members(directory / SHARD) == 4
    mismatch = rf"shard {re.escape(str(directory / SHARD))} does not match its manifest checksum"
    with pytest.raises(ShardFormatError, match=mismatch):
        read_samples(directory)
    with pytest.raises(ShardFormatError, match=mismatch):
        list(iter_records(directory, [SHARD]))
    with pytest.raises(ShardFormatError, match=mismatch):
        MemeDataModule(heads=read_manifest(directory)["heads"], shard_dir=str(directory)).prepare_data()


def test_a_substituted_shard_with_fewer_samples_is_counted_against_the_manifest(dataset, tmp_path):
    directory = copy_dataset(dataset, tmp_path / "d")
    entries = raw_entries(directory / SHARD)
    rewrite_shard(directory, SHARD, entries[:-1])  # checksum and size in the manifest now match the file
    expected = shard_record(directory, SHARD)["count"]
    short = rf"shard {re.escape(str(directory / SHARD))} holds {expected - 1} samples, but its manifest says {expected}"
    with pytest.raises(ShardFormatError, match=short):
        read_samples(directory)
    with pytest.raises(ShardFormatError, match=short):
        list(iter_records(directory, [SHARD]))
    with pytest.raises(ShardFormatError, match=short):
        MemeDataModule(heads=read_manifest(directory)["heads"], shard_dir=str(directory)).prepare_data()


@pytest.mark.parametrize(
    "tail, reason",
    [
        (b"\0" * 1024 + b"x" * 512, "data after the end of the archive"),  # a second archive appended
        (b"\0" * 100, "truncated at byte"),  # a partial block: not a whole tar
    ],
)
def test_what_follows_the_end_of_the_archive_is_checked(dataset, tmp_path, tail, reason):
    path = tmp_path / SHARD
    path.write_bytes((dataset / SHARD).read_bytes() + tail)
    with pytest.raises(ShardFormatError, match=rf"shard {re.escape(str(path))}.*{reason}"):
        list(shard_samples([{"url": str(path)}]))

"""Samples out of local WebDataset tar shards, read header by header.

webdataset's `tarfile_to_samples` parses every member with Python's `tarfile` (field decoding,
checksums and PAX handling in Python), about 40 µs per member, twice per meme (JSON + image): a
large share of what preparing a small meme for the model costs. The shards are POSIX tars, so this reader takes the 512-byte headers
apart directly (a few µs per member), still checks every header checksum, understands PAX extended
headers and GNU long names, and hands the members to webdataset's own `group_by_keys`, so samples
(keys, suffixes, `__url__`, metadata files skipped, no sample spanning two shards) are exactly what
`tarfile_to_samples` yields.

It is stricter than `tarfile` about the end: a shard must end with the two zero blocks of a complete
archive (then only zero padding), so a file cut at ANY byte is an error naming the shard and the
byte where it ends; `tarfile` takes a cut at a block boundary or inside padding for a normal end and
yields fewer members. A shard item whose url is remote (`crossmod.data.remote`) is read as a resumable
stream, or from a verified cached copy when the item names a `cache_dir`; the checks are the same. A shard item may also carry what its manifest records (`count` samples,
`sha256`, `bytes`), which are then checked in the same pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from webdataset.tariterators import group_by_keys

from crossmod.data.remote import BACKOFF_S, RETRIES, RemoteStream, cached_copy, is_remote

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
REGULAR = (b"0", b"\0", b"7")  # regular file, old-style regular file, contiguous file
METADATA_NAME = re.compile(r"__[^/]*__($|/)")  # webdataset's default `skip_meta`
READ_BUFFER = 1 << 20


class ShardFormatError(ValueError):
    """A shard that is not a complete, readable tar, or not the one its manifest describes; the message
    names the shard and the byte offset."""


class _HashingReader:
    """A file whose every byte read also goes into a digest: the checksum costs no second pass."""

    def __init__(self, stream: Any, digest: Any) -> None:
        self.stream, self.digest = stream, digest

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.digest.update(data)
        return data


def _number(field: bytes) -> int:
    """A numeric header field: octal text, or GNU base-256 (first byte 0x80) for sizes over 8 GiB."""
    if field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    return int(field.rstrip(b"\0 ").lstrip(b" ") or b"0", 8)


def _pax_records(data: bytes) -> dict[str, str]:
    """`<length> <key>=<value>\\n` records of a PAX extended header."""
    records, position = {}, 0
    while position < len(data) and data[position] != 0:
        space = data.index(b" ", position)
        length = int(data[position:space])
        key, _, value = data[space + 1 : position + length - 1].partition(b"=")
        records[key.decode("utf-8")] = value.decode("utf-8", "surrogateescape")
        position += length
    return records


def tar_members(path: str, *, sha256: str | None = None, size: int | None = None) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every regular file in the local tar at `path`, in archive order.

    Raises ShardFormatError naming the shard and offset for a bad header, a file that ends anywhere
    before the end of the archive, or (given the manifest's `size` in bytes and `sha256`) a shard
    that is not the one the manifest describes.
    """
    with open(path, "rb", buffering=READ_BUFFER) as file:
        file_size = os.fstat(file.fileno()).st_size
        if size is not None and file_size != size:
            cut = f"truncated at byte {file_size}" if file_size < size else f"{file_size - size} bytes too long"
            raise ShardFormatError(
                f"shard {path} does not match its manifest checksum (corrupt or rewritten): "
                f"{file_size} bytes where the manifest records {size}, {cut}"
            )
        yield from stream_members(file, path, file_size, sha256)


def stream_members(file: Any, path: str, file_size: int | None, sha256: str | None = None) -> Iterator[tuple[str, bytes]]:
    """`tar_members` over an open stream (a local file, or a remote one whose size is the manifest's,
    or unknown: then a cut shows as a short read)."""
    long_name: str | None = None
    pax: dict[str, str] = {}
    offset = 0
    digest = hashlib.sha256() if sha256 is not None else None
    stream = file if digest is None else _HashingReader(file, digest)
    while True:
        header = stream.read(BLOCK)
        if len(header) < BLOCK:
            raise ShardFormatError(_cut(path, offset + len(header) if file_size is None else file_size, offset, "a tar header"))
        if header == ZERO_BLOCK:
            _end_of_archive(path, stream, file_size, offset)
            if digest is not None and digest.hexdigest() != sha256:
                raise ShardFormatError(f"shard {path} does not match its manifest checksum (corrupt or rewritten)")
            return
        try:
            stored = _number(header[148:156])
            size_field = _number(header[124:136])
        except ValueError as error:
            raise ShardFormatError(f"shard {path}: unreadable tar header at byte {offset} ({error})") from error
        if not _checksum_matches(header, stored):
            raise ShardFormatError(f"shard {path}: tar header checksum mismatch at byte {offset} (corrupt shard)")
        kind = header[156:157]
        member_size = int(pax.get("size", size_field)) if kind in REGULAR else size_field
        padding = -member_size % BLOCK
        what = f"the {member_size}-byte member whose header starts"
        if file_size is not None and offset + BLOCK + member_size + padding > file_size:
            raise ShardFormatError(_cut(path, file_size, offset, what, member_size))
        data = stream.read(member_size)
        skipped = stream.read(padding) if padding else b""
        if len(data) < member_size or len(skipped) < padding:
            raise ShardFormatError(_cut(path, offset + BLOCK + len(data) + len(skipped), offset, what, member_size))
        offset += BLOCK + member_size + padding
        if kind == b"x":
            pax = _pax_records(data)
        elif kind == b"L":
            long_name = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
        elif kind in REGULAR:
            name = pax.get("path") or long_name or _ustar_name(header)
            long_name, pax = None, {}
            yield name, data
        elif kind != b"g":  # directories, links, devices: no sample content (webdataset skips them too)
            long_name, pax = None, {}


def _cut(path: str, file_size: int, offset: int, what: str, member_size: int = 0) -> str:
    """The message for a file that ends before the archive does: where it ends, and inside what."""
    if file_size == offset:
        return f"shard {path}: truncated at byte {file_size}: the file ends before the tar end-of-archive blocks"
    if file_size < offset + BLOCK or not member_size:
        return f"shard {path}: truncated at byte {file_size}, inside {what} at byte {offset}"
    part = "its data" if file_size < offset + BLOCK + member_size else "its padding"
    return f"shard {path}: truncated at byte {file_size}, inside {part} ({what} at byte {offset})"


def _end_of_archive(path: str, stream: Any, file_size: int | None, offset: int) -> None:
    """After the first zero block: a second one, then nothing but zero padding up to a whole block."""
    second = stream.read(BLOCK)
    if len(second) < BLOCK:
        end = offset + BLOCK + len(second) if file_size is None else file_size
        raise ShardFormatError(_cut(path, end, offset, "the end-of-archive blocks"))
    if second != ZERO_BLOCK:
        raise ShardFormatError(f"shard {path}: a lone zero block at byte {offset} is followed by more data (not a complete tar)")
    end = offset + 2 * BLOCK
    rest_bytes = 0
    while rest := stream.read(READ_BUFFER):
        rest_bytes += len(rest)
        if rest.count(0) != len(rest):
            raise ShardFormatError(f"shard {path}: data after the end of the archive at byte {end} (a second archive appended?)")
    total = end + rest_bytes if file_size is None else file_size
    if (total - end) % BLOCK:
        raise ShardFormatError(
            f"shard {path}: truncated at byte {total}: a partial block after the end of the archive at byte {end} "
            "(a tar file is whole 512-byte blocks)"
        )


def _checksum_matches(header: bytes, stored: int) -> bool:
    """POSIX sums the header bytes unsigned, with the checksum field as spaces; some old tars sum signed."""
    rest = header[:148] + header[156:]
    unsigned = sum(rest) + 8 * 32
    return stored == unsigned or stored == unsigned - 256 * sum(byte > 127 for byte in rest)


def _ustar_name(header: bytes) -> str:
    name = header[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        if prefix:
            return f"{prefix}/{name}"
    return name


def _members(shard: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """A shard item's members: a local file, a verified cached copy of a remote one, or a remote stream."""
    url = shard["url"]
    if not is_remote(url):
        yield from tar_members(url, sha256=shard.get("sha256"), size=shard.get("bytes"))
    elif shard.get("cache_dir"):
        # cached_copy has just checked the whole file's sha256: hashing it again while reading would be the same work twice
        yield from tar_members(str(cached_copy(shard, Path(shard["cache_dir"]))), size=shard.get("bytes"))
    else:
        stream = RemoteStream(url, shard.get("bytes"), shard.get("retries", RETRIES), shard.get("backoff", BACKOFF_S))
        try:
            members = stream_members(stream, url, shard.get("bytes"), shard.get("sha256"))
            for name, data in members:
                if shard.get("sha256") and name.endswith(".json") and not _parses(data):
                    # A streamed shard's checksum is known only at its end: read the rest first, so a byte flipped in
                    # transit or on the server is reported as the checksum mismatch it is, not as the writer's bad record.
                    rest = list(members)
                    yield name, data
                    yield from rest
                    break
                yield name, data
            stream.report()
        finally:
            stream.close()


def _parses(record: bytes) -> bool:
    try:
        json.loads(record)
    except ValueError:  # UnicodeDecodeError is a ValueError
        return False
    return True


def _files(shard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    url = shard["url"]
    for name, data in _members(shard):
        if METADATA_NAME.match(name) or ("/" not in name and name.startswith("__") and name.endswith("__")):
            continue
        yield {"fname": name, "data": data, "__url__": url}


def shard_samples(shards: Iterable[dict[str, Any]], records: dict[str, dict[str, Any]] | None = None) -> Iterator[dict[str, Any]]:
    """Pipeline stage: `{"url": path}` items (SimpleShardList, ResampledShards) → WebDataset samples.

    Samples are grouped shard by shard (none spans two). An item that also carries its manifest's
    `count` (samples), `sha256` and `bytes` is checked against them; a mismatch raises once the
    shard has been read. `records` (url → those fields and remote reading settings) completes items
    that carry only a url, as the shard lists of webdataset yield them.
    """
    for shard in shards:
        if records:
            shard = {**records.get(shard["url"], {}), **shard}
        expected = shard.get("count")
        if expected is None:
            yield from group_by_keys(_files(shard))
            continue
        found = 0
        for sample in group_by_keys(_files(shard)):
            found += 1
            yield sample
        if found != expected:
            raise ShardFormatError(f"shard {shard['url']} holds {found} samples, but its manifest says {expected}")

"""Samples out of local WebDataset tar shards, read header by header.

webdataset's `tarfile_to_samples` parses every member with Python's `tarfile` (field decoding,
checksums and PAX handling in Python), about 40 µs per member, twice per meme (JSON + image): a
large share of what preparing a small meme for the model costs. The shards are POSIX tars, so this reader takes the 512-byte headers
apart directly (a few µs per member), still checks every header checksum, understands PAX extended
headers and GNU long names, and hands the members to webdataset's own `group_by_keys`, so samples
(keys, suffixes, `__url__`, metadata files skipped, no sample spanning two shards) are exactly what
`tarfile_to_samples` yields. Only local files: crossmod's shards live under `shard_root`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from webdataset.tariterators import group_by_keys

BLOCK = 512
REGULAR = (b"0", b"\0", b"7")  # regular file, old-style regular file, contiguous file
METADATA_NAME = re.compile(r"__[^/]*__($|/)")  # webdataset's default `skip_meta`
READ_BUFFER = 1 << 20


class ShardFormatError(ValueError):
    """A shard that is not a readable tar; the message names the shard and the byte offset."""


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


def tar_members(path: str) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every regular file in the tar at `path`, in archive order.

    Raises ShardFormatError naming the shard and offset for a bad checksum or a truncated member.
    """
    long_name: str | None = None
    pax: dict[str, str] = {}
    offset = 0
    with open(path, "rb", buffering=READ_BUFFER) as stream:
        while True:
            header = stream.read(BLOCK)
            if not header or header.count(0) == BLOCK:  # end of archive (zero block) or of the file
                return
            if len(header) < BLOCK:
                raise ShardFormatError(f"shard {path}: truncated tar header at byte {offset}")
            try:
                stored = _number(header[148:156])
                size = _number(header[124:136])
            except ValueError as error:
                raise ShardFormatError(f"shard {path}: unreadable tar header at byte {offset} ({error})") from error
            if not _checksum_matches(header, stored):
                raise ShardFormatError(f"shard {path}: tar header checksum mismatch at byte {offset} (corrupt shard)")
            kind = header[156:157]
            size = int(pax.get("size", size)) if kind in REGULAR else size
            data = stream.read(size)
            if len(data) < size:
                raise ShardFormatError(f"shard {path}: member at byte {offset} is truncated ({len(data)} of {size} bytes)")
            padding = -size % BLOCK
            if padding:
                stream.read(padding)
            offset += BLOCK + size + padding
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


def _files(shards: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for shard in shards:
        url = shard["url"]
        for name, data in tar_members(url):
            if METADATA_NAME.match(name) or ("/" not in name and name.startswith("__") and name.endswith("__")):
                continue
            yield {"fname": name, "data": data, "__url__": url}
        yield {}  # end-of-shard marker: group_by_keys never joins members of two shards


def shard_samples(shards: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Pipeline stage: `{"url": path}` items (SimpleShardList, ResampledShards) → WebDataset samples."""
    return group_by_keys(_files(shards))

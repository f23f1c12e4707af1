"""Read an offline W&B run (`offline-run-*/run-*.wandb`) back: run info, config, history, summary.

Offline runs are a W&B transaction log: a 7-byte header (`:W&B`, magic 0xBEE1, version 0), then
LevelDB-style log blocks of 32 KiB whose chunks (crc32, length, type) carry serialized
`wandb.proto.wandb_internal_pb2.Record` messages. Recent wandb releases only read it from their Go
core (`wandb sync`), so this parses the framing and decodes every record with wandb's own protobuf
classes: what a cluster without network logged can be checked before syncing.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

HEADER = struct.Struct("<4sHB")
CHUNK = struct.Struct("<IHB")
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    """What a run logged: run fields (project, group, job_type, ...), config, history rows, summary."""

    run: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


def _chunks(data: bytes, path: Path):
    ident, magic, version = HEADER.unpack_from(data)
    if ident != b":W&B" or magic != 0xBEE1 or version != 0:
        raise ValueError(f"{path}: not a W&B transaction log (header {data[:7]!r})")
    position, pending = HEADER.size, b""
    while position + CHUNK.size <= len(data):
        left = BLOCK - position % BLOCK
        if left < CHUNK.size:  # block trailer padding
            position += left
            continue
        checksum, length, kind = CHUNK.unpack_from(data, position)
        if length == 0 and kind == 0:  # zero padding up to the end of the block
            position += left
            continue
        payload = data[position + CHUNK.size : position + CHUNK.size + length]
        if zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            raise ValueError(f"{path}: checksum mismatch at byte {position}")
        position += CHUNK.size + length
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            yield pending + payload
            pending = b""


def _key(item: Any) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def read_offline_run(path: str | Path) -> OfflineRun:
    """Decode one `.wandb` file, or the only one inside an `offline-run-*` directory."""
    path = Path(path)
    if path.is_dir():
        found = sorted(path.glob("*.wandb"))
        if len(found) != 1:
            raise FileNotFoundError(f"{path}: expected one .wandb file, found {len(found)}")
        path = found[0]
    result = OfflineRun()
    for payload in _chunks(path.read_bytes(), path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            result.run = {
                "id": run.run_id,
                "project": run.project,
                "group": run.run_group,
                "job_type": run.job_type,
                "name": run.display_name,
            }
            result.config.update({u.key: json.loads(u.value_json) for u in run.config.update})
        elif kind == "config":
            result.config.update({_key(u): json.loads(u.value_json) for u in record.config.update})
        elif kind == "history":
            result.history.append({_key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "summary":
            result.summary.update({_key(u): json.loads(u.value_json) for u in record.summary.update})
        elif kind == "files":
            result.files.extend(f.path for f in record.files.files)
    return result

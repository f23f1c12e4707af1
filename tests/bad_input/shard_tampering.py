"""Shared by the bad-input suite: a small dataset written by the project's own shard writer, copied
for each attack so that attacks never leak into each other."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import webdataset as wds

from crossmod.data.tar_reader import shard_samples


def copy_dataset(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination)
    return destination


def edit_manifest(directory: Path, edit) -> dict[str, Any]:
    """Apply `edit(manifest)` to the manifest on disk, as a hand (or a bad download) would."""
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    return manifest


def shard_record(directory: Path, name: str) -> dict[str, Any]:
    return next(s for s in json.loads((directory / "manifest.json").read_text())["shards"] if s["name"] == name)


def rewrite_shard(directory: Path, name: str, entries: list[dict[str, Any]], consistent_manifest: bool = True) -> None:
    """Replace a shard by a valid tar of `entries`; with `consistent_manifest` also put the new file's
    sha256 and size into the manifest (an attacker covering their tracks), leaving its count alone."""
    path = directory / name
    with wds.TarWriter(str(path), mtime=0) as writer:
        for entry in entries:
            writer.write(entry)
    if consistent_manifest:
        data = path.read_bytes()

        def cover(manifest: dict[str, Any]) -> None:
            record = next(s for s in manifest["shards"] if s["name"] == name)
            record["sha256"], record["bytes"] = hashlib.sha256(data).hexdigest(), len(data)

        edit_manifest(directory, cover)


def raw_entries(path: Path) -> list[dict[str, Any]]:
    """A shard's samples as TarWriter entries (key and member bytes)."""
    return [{k: v for k, v in s.items() if k != "__url__"} for s in shard_samples([{"url": str(path)}])]

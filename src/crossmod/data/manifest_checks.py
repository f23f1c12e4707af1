"""What a manifest must hold, and agree with, before any shard is read.

Epoch lengths, fold sizes and the per-shard checks of the tar reader all come from `manifest.json`,
and manifests are shared and downloaded: one that is not JSON, lacks a field, or whose counts
disagree with its own shard list (`counts.split.train` = 4000 over shards that hold 8 samples) stops
with one message naming the manifest and the field, instead of a traceback or a wrong epoch.
What the shards themselves hold is checked against the per-shard records when they are read
(`crossmod.data.tar_reader`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from crossmod.data.heads import parse_heads

SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """A manifest that cannot be trusted as it is; the message names the file, the field and the fix."""


def parse_manifest(path: Path | str, data: bytes | None = None) -> dict[str, Any]:
    """The manifest at `path` (or its bytes `data`, fetched from a URL) as a dict, or ManifestError naming
    the file and where the JSON breaks."""
    try:
        manifest = json.loads((Path(path).read_bytes() if data is None else data).decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ManifestError(f"{path}: not a manifest (not UTF-8 text at byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise ManifestError(f"{path}: not a manifest (invalid JSON at line {error.lineno}, column {error.colno}: {error.msg})") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path}: not a manifest (a JSON {type(manifest).__name__}, not an object)")
    return manifest


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _require(manifest: dict[str, Any], path: Path, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if key not in manifest:
        raise ManifestError(f"{path}: lacks {key!r} ({what}); rewrite it by converting the dataset again")
    value = manifest[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"{path}: {key!r} must be {what}, got {value!r}")
    return value


def _check_heads(heads: dict[str, Any], path: Path) -> None:
    """Every declared head must parse as a `Head` (known kind; classes where the kind needs them)."""
    try:
        parse_heads(heads)
    except ValueError as error:
        raise ManifestError(f"{path}: {error}") from None


def _check_shard_records(shards: list[Any], path: Path) -> dict[str, int]:
    """Each shard record's fields; returns the samples per split that the records add up to."""
    per_split: dict[str, int] = {}
    seen: set[str] = set()
    for index, shard in enumerate(shards):
        if not isinstance(shard, dict):
            raise ManifestError(f"{path}: shards[{index}] is {shard!r}, not a shard record")
        where = f"shards[{index}] ({shard.get('name')})"
        for key in ("name", "split", "count", "sha256"):
            if key not in shard:
                raise ManifestError(f"{path}: {where} lacks {key!r}; every shard needs name, split, count and sha256")
        if not isinstance(shard["name"], str) or not isinstance(shard["split"], str):
            raise ManifestError(f"{path}: {where}: name and split must be text")
        if shard["name"] in seen:
            raise ManifestError(f"{path}: {where} is listed twice")
        seen.add(shard["name"])
        if not _is_count(shard["count"]):
            raise ManifestError(f"{path}: {where}: count must be a whole number ≥ 0, got {shard['count']!r}")
        if not isinstance(shard["sha256"], str) or not SHA256.fullmatch(shard["sha256"]):
            raise ManifestError(f"{path}: {where}: sha256 must be 64 lowercase hex digits, got {shard['sha256']!r}")
        if "bytes" in shard and not _is_count(shard["bytes"]):
            raise ManifestError(f"{path}: {where}: bytes must be a whole number ≥ 0, got {shard['bytes']!r}")
        per_split[shard["split"]] = per_split.get(shard["split"], 0) + shard["count"]
    return per_split


def _check_totals(manifest: dict[str, Any], path: Path, per_split: dict[str, int]) -> None:
    """`counts`, `samples_written` and `inputs_read` must add up to what the shard records hold."""
    counts = _require(manifest, path, "counts", dict, "an object of counts by split, lang and label")
    by_split = counts.get("split")
    if not isinstance(by_split, dict) or not all(_is_count(v) for v in by_split.values()):
        raise ManifestError(f"{path}: counts.split must map each split to a whole number of samples, got {by_split!r}")
    for split in sorted(set(by_split) | set(per_split)):
        stated, held = by_split.get(split, 0), per_split.get(split, 0)
        if stated != held:
            raise ManifestError(
                f"{path}: counts.split.{split} says {stated} samples, but the shards of split {split} hold {held} by their records: "
                "the manifest does not describe these shards (convert the dataset again)"
            )
    total = sum(per_split.values())
    written = _require(manifest, path, "samples_written", int, "the number of samples in the shards")
    if written != total:
        raise ManifestError(f"{path}: samples_written says {written}, but the shard records add up to {total}")
    skipped = manifest.get("skipped", [])
    if "inputs_read" in manifest and (not isinstance(skipped, list) or manifest["inputs_read"] != written + len(skipped)):
        raise ManifestError(f"{path}: inputs_read ({manifest['inputs_read']}) is not samples_written ({written}) + skipped inputs")
    tallies = [("counts.lang", counts.get("lang"))]
    tallies += [(f"counts.label.{head}", values) for head, values in (counts.get("label") or {}).items()]
    for field, values in tallies:
        if values is not None and (not isinstance(values, dict) or sum(values.values()) != total):
            raise ManifestError(f"{path}: {field} does not add up to the {total} samples of the shards")


def _check_folds(manifest: dict[str, Any], path: Path) -> None:
    """Fold sizes set fold runs' epoch lengths: they must add up to the samples of the splits they divide."""
    by_split = manifest["counts"]["split"]
    for index, entry in enumerate(manifest.get("folds") or []):
        sizes = entry.get("samples_per_fold") if isinstance(entry, dict) else None
        splits = entry.get("splits") if isinstance(entry, dict) else None
        if not isinstance(sizes, list) or not all(_is_count(n) for n in sizes) or not isinstance(splits, list):
            raise ManifestError(f"{path}: folds[{index}] needs samples_per_fold (whole numbers) and splits")
        if len(sizes) != entry.get("num_folds"):
            raise ManifestError(f"{path}: folds[{index}] lists {len(sizes)} fold sizes for num_folds={entry.get('num_folds')}")
        expected = sum(by_split.get(split, 0) for split in splits)
        if sum(sizes) != expected:
            raise ManifestError(f"{path}: folds[{index}] divides {sum(sizes)} samples, but splits {splits} hold {expected}")


def _check_split_roles(manifest: dict[str, Any], path: Path) -> None:
    """`split_roles` (optional: older manifests lack it) maps train / val / test / folds to lists of split names."""
    roles = manifest.get("split_roles")
    if roles is None:
        return
    if not isinstance(roles, dict) or set(roles) != {"train", "val", "test", "folds"}:
        raise ManifestError(f"{path}: split_roles must map train, val, test and folds to lists of splits, got {roles!r}")
    for role, splits in roles.items():
        if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
            raise ManifestError(f"{path}: split_roles.{role} must be a list of split names, got {splits!r}")


def check_manifest(manifest: dict[str, Any], path: Path) -> None:
    """Raise ManifestError unless the manifest has every field readers use and its counts agree."""
    _require(manifest, path, "dataset", str, "the dataset name")
    _check_heads(_require(manifest, path, "heads", dict, "an object of label heads"), path)
    per_split = _check_shard_records(_require(manifest, path, "shards", list, "a list of shard records"), path)
    _check_totals(manifest, path, per_split)
    _check_folds(manifest, path)
    _check_split_roles(manifest, path)

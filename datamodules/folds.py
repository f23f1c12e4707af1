"""Grouped, stratified k-fold assignment, stored in the manifest so every rank and rerun agrees."""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.model_selection import StratifiedGroupKFold

from datamodules.shards import read_manifest, write_json_atomic


def assign_folds(groups: list[str], strata: list[str], num_folds: int, seed: int) -> dict[str, int]:
    """Map each group to a fold: groups never span folds; label mixes stay close to the whole's."""
    unique_groups = sorted(set(groups))
    if len(unique_groups) < num_folds:
        raise ValueError(f"cannot split {len(unique_groups)} groups into {num_folds} folds")
    splitter = StratifiedGroupKFold(n_splits=num_folds, shuffle=True, random_state=seed)
    placeholder = np.zeros(len(groups))
    assignment: dict[str, int] = {}
    for fold, (_, held_out) in enumerate(splitter.split(placeholder, strata, groups)):
        for index in held_out:
            assignment[groups[index]] = fold
    return dict(sorted(assignment.items()))


def iter_records(directory: Path, shard_names: list[str]) -> Iterator[dict[str, Any]]:
    """Read only the JSON members of shards: enough for folds and checks, no image decoding."""
    for name in shard_names:
        with tarfile.open(directory / name) as tar:
            for member in tar:
                if member.name.endswith(".json"):
                    yield json.loads(tar.extractfile(member).read())


def stratum(labels: dict[str, Any], heads: list[str]) -> str:
    return "|".join(json.dumps(labels.get(head)) for head in heads)


def find_folds(manifest: dict[str, Any], num_folds: int, seed: int, splits: list[str]) -> dict[str, Any] | None:
    for entry in manifest.get("folds", []):
        if entry["num_folds"] == num_folds and entry["seed"] == seed and entry["splits"] == sorted(splits):
            return entry
    return None


def ensure_folds(directory: str | Path, num_folds: int, seed: int, splits: list[str]) -> dict[str, Any]:
    """Return the fold entry for (num_folds, seed) over `splits`, computing and storing it if new.

    Call under the dataset's lock: the manifest is rewritten atomically with the new entry.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    existing = find_folds(manifest, num_folds, seed, splits)
    if existing is not None:
        return existing
    shard_names = [s["name"] for s in manifest["shards"] if s["split"] in splits]
    if not shard_names:
        raise ValueError(f"{directory}: no shards in splits {splits} to divide into folds")
    heads = list(manifest["heads"])
    groups, strata = [], []
    for record in iter_records(directory, shard_names):
        groups.append(record["group"])
        strata.append(stratum(record["labels"], heads))
    assignment = assign_folds(groups, strata, num_folds, seed)
    sizes = Counter(assignment[g] for g in groups)
    entry = {
        "num_folds": num_folds,
        "seed": seed,
        "splits": sorted(splits),
        "samples_per_fold": [sizes[k] for k in range(num_folds)],
        "assignment": assignment,
    }
    manifest.setdefault("folds", []).append(entry)
    write_json_atomic(directory / "manifest.json", manifest)
    return entry

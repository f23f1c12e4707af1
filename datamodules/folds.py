"""Grouped, stratified k-fold assignment, stored in the manifest so every rank and rerun agrees.

A fold run (`fold=k`) gives every group one role: `test` (the held-out fold k, scored once at the
end), `val` (what checkpointing and early stopping may look at) or `train`. Under the `inner` rule
the `val` groups are carved from the training folds by a second grouped, stratified split, stored
beside the outer assignment; no group of fold k ever gets a role other than `test`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.sample import decode_shard_entry
from datamodules.shards import read_manifest, shard_items, write_json_atomic
from datamodules.tar_reader import shard_samples


def assign_folds(groups: list[str], strata: list[str], num_folds: int, seed: int) -> dict[str, int]:
    """Map each group to a fold: groups never span folds; label mixes stay close to the whole's."""
    unique_groups = sorted(set(groups))
    if len(unique_groups) < num_folds:
        raise ValueError(f"cannot split {len(unique_groups)} groups into {num_folds} folds")
    # Imported here: folds are assigned once per dataset, and scikit-learn costs every training process
    # ~12 MiB of resident memory (measured with VmRSS) that a run reading existing folds never uses.
    from sklearn.model_selection import StratifiedGroupKFold

    splitter = StratifiedGroupKFold(n_splits=num_folds, shuffle=True, random_state=seed)
    placeholder = np.zeros(len(groups))
    assignment: dict[str, int] = {}
    for fold, (_, held_out) in enumerate(splitter.split(placeholder, strata, groups)):
        for index in held_out:
            assignment[groups[index]] = fold
    return dict(sorted(assignment.items()))


def iter_records(directory: str | Path, shard_names: list[str], remote: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """The JSON record of every sample in the named shards (no image decoding), each shard checked
    against its manifest record (complete tar, checksum, size, sample count) as it is read."""
    manifest = read_manifest(directory)
    items = {shard["name"]: item for shard, item in zip(manifest["shards"], shard_items(directory, manifest, None, remote))}
    unknown = [name for name in shard_names if name not in items]
    if unknown:
        raise ValueError(f"{directory}: shards {unknown} are not in its manifest")
    for entry in shard_samples(items[name] for name in shard_names):
        record = decode_shard_entry(entry)
        record.pop("image")
        yield record


def stratum(labels: dict[str, Any], heads: list[str]) -> str:
    return "|".join(json.dumps(labels.get(head)) for head in heads)


def find_folds(manifest: dict[str, Any], num_folds: int, seed: int, splits: list[str]) -> dict[str, Any] | None:
    for entry in manifest.get("folds", []):
        if entry["num_folds"] == num_folds and entry["seed"] == seed and entry["splits"] == sorted(splits):
            return entry
    return None


def find_inner_validation(entry: dict[str, Any], fold: int, share: float) -> dict[str, Any] | None:
    for inner in entry.get("inner", []):
        if inner["fold"] == fold and inner["share"] == share:
            return inner
    return None


def inner_validation(entry: dict[str, Any], fold: int, share: float) -> dict[str, Any]:
    """The stored inner validation split of outer fold `fold` (see `ensure_inner_validation`)."""
    inner = find_inner_validation(entry, fold, share)
    if inner is None:
        raise RuntimeError(f"no inner validation split for fold {fold} (share {share}) in the manifest; run prepare_data first")
    return inner


def ensure_inner_validation(directory: str | Path, entry: dict[str, Any], fold: int, share: float) -> dict[str, Any]:
    """Carve a grouped, stratified validation split (≈ `share` of the groups) from the folds other than `fold`.

    Stored in the manifest inside the outer fold entry, so every rank and rerun selects on the same
    memes. Call under the dataset's lock.
    """
    if not 0 < share < 0.5:
        raise ValueError(f"cv.inner_share must be in (0, 0.5), got {share}")
    existing = find_inner_validation(entry, fold, share)
    if existing is not None:
        return existing
    directory = Path(directory)
    manifest = read_manifest(directory)
    stored = find_folds(manifest, entry["num_folds"], entry["seed"], entry["splits"])
    heads = list(manifest["heads"])
    assignment = stored["assignment"]
    groups, strata = [], []
    shard_names = [s["name"] for s in manifest["shards"] if s["split"] in stored["splits"]]
    for record in iter_records(directory, shard_names):
        if assignment[record["group"]] != fold:
            groups.append(record["group"])
            strata.append(stratum(record["labels"], heads))
    unique = len(set(groups))
    if unique < 2:
        raise ValueError(f"{directory}: fold {fold} leaves {unique} group(s) for training; an inner validation split needs at least 2")
    parts = max(2, min(round(1 / share), unique))  # tiny data: at least one group per part
    held = assign_folds(groups, strata, parts, seed=stored["seed"] + 1 + fold)
    val_groups = sorted(g for g, part in held.items() if part == 0)
    chosen = set(val_groups)
    inner = {"fold": fold, "share": share, "groups": val_groups, "samples": sum(1 for g in groups if g in chosen)}
    stored.setdefault("inner", []).append(inner)
    write_json_atomic(directory / "manifest.json", manifest)
    entry.setdefault("inner", []).append(inner)
    return inner


def fold_roles(entry: dict[str, Any], fold: int, val_groups: list[str] | None) -> dict[str, str]:
    """Group → `test` (held-out fold), `val` (selection, when an inner split is used) or `train`."""
    val = set(val_groups or ())
    return {g: "test" if k == fold else "val" if g in val else "train" for g, k in entry["assignment"].items()}


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

"""Grouped, stratified k-fold assignment, stored in the manifest so every rank and rerun agrees.

A fold run (`fold=k`) gives every group one role: `test` (the held-out fold k, scored once at the
end), `val` (what checkpointing and early stopping may look at) or `train`. Under the `inner` rule
the `val` groups are carved from the training folds by a second grouped, stratified split, stored
beside the outer assignment; no group of fold k ever gets a role other than `test`.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from crossmod.data.paths import override_value
from crossmod.data.sample import decode_shard_entry
from crossmod.data.shards import read_manifest, shard_items, write_json_atomic
from crossmod.data.tar_reader import shard_samples

INNER_SHARE = 0.15  # cv.inner_share's default: prepare.py stores inner splits of this share unless told otherwise


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


def _describe(entry: dict[str, Any]) -> str:
    """One stored fold assignment as a reader of an error needs it: its key and which inner splits it holds."""
    shares: dict[float, list[int]] = {}
    for inner in entry.get("inner", []):
        shares.setdefault(inner["share"], []).append(inner["fold"])
    inner = "".join(f" with inner validation share {share} for folds {sorted(folds)}" for share, folds in sorted(shares.items()))
    return f"num_folds={entry['num_folds']}, seed={entry['seed']} over {entry['splits']}{inner}"


def _listing(splits: list[str]) -> str:
    return "[" + ",".join(splits) + "]"


def _prepare_command(manifest: dict[str, Any], num_folds: int, seed: int, splits: list[str], inner_share: float | None) -> str:
    """The conversion call that stores these folds (and their inner splits) in the dataset's folder."""
    recorded = manifest.get("split_roles")
    sets = [f"fold_seed={seed}"] if seed != 0 else []
    if recorded is None or recorded["folds"] != splits:
        sets.append(f"train_splits={_listing(splits)}")
    if inner_share is not None and inner_share != INNER_SHARE:
        sets.append(f"inner_share={inner_share}")
    params = manifest.get("params") or {}
    words = ["crossmod", "prepare", f"data={manifest['dataset']}"]
    if "raw_dir" in params:  # a generated dataset (synthetic) needs no folder
        words.append(f"data.raw_dir={override_value(str(params['raw_dir']))}")
    words += ["data.on_error=skip"] if params.get("on_error") == "skip" else []
    words += [f"folds={num_folds}", *(f"data.{value}" for value in sets)]
    return shlex.join(words)


def missing_folds(
    location: str, manifest: dict[str, Any], num_folds: int, seed: int, splits: list[str], fold: int, inner_share: float | None
) -> str:
    """Why a read-only (remote) dataset cannot run `fold`, what its manifest holds instead, and the step that fixes it:
    a `data.train_splits` override when it has these folds over other splits, else the `crossmod prepare` command that stores them.

    `inner_share` is None when the run needs no inner validation split.
    """
    splits, present = sorted(splits), sorted(manifest["counts"]["split"])
    recorded = manifest.get("split_roles")
    target = splits if set(splits) <= set(present) else recorded["folds"] if recorded else ["all"] if "all" in present else splits
    wanted = f"num_folds={num_folds}, seed={seed} over split(s) {splits}"
    wanted += f" with an inner validation share {inner_share} for fold {fold}" if inner_share is not None else ""
    held = "; ".join(_describe(entry) for entry in manifest.get("folds") or []) or "no fold assignments"
    message = f"{location}: the manifest has no fold assignment for {wanted}, and a remote dataset is read-only. It has {held}"
    message += f" (samples per split: {dict(sorted(manifest['counts']['split'].items()))}"
    message += "; no split_roles record: it predates them, so data=shards reads splits train/val/test)" if recorded is None else ")"
    override = f"`data.train_splits={_listing(target)}`"
    entry = find_folds(manifest, num_folds, seed, target)
    if target != splits and entry is not None and (inner_share is None or find_inner_validation(entry, fold, inner_share)):
        return f"{message}. Fix: train on the splits those folds divide: {override}"
    name = f"{manifest['dataset']}-{manifest.get('fingerprint')}"
    then = f", then train with {override}" if target != splits else ""
    return (
        f"{message}. Fix: where {name} was prepared, run `{_prepare_command(manifest, num_folds, seed, target, inner_share)}` "
        f"(with --out <its shard root> unless that was the default) and upload {name} again{then}"
    )

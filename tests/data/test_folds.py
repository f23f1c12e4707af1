"""Grouped, stratified folds: groups never span folds, assignment is deterministic and stored."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from crossmod.data.folds import assign_folds, ensure_folds, iter_records
from crossmod.data.shards import read_manifest
from tests.fixtures.small import small_synthetic


def test_no_group_spans_two_folds_and_strata_are_balanced():
    groups = [f"g{i // 3}" for i in range(600)]
    strata = [str(int(i % 7 == 0)) for i in range(600)]
    assignment = assign_folds(groups, strata, num_folds=5, seed=3)
    assert set(assignment) == set(groups)
    assert set(assignment.values()) == set(range(5))
    positives = Counter(assignment[g] for g, s in zip(groups, strata) if s == "1")
    assert max(positives.values()) - min(positives.values()) <= 6


def test_assignment_is_deterministic_per_seed():
    groups = [f"g{i // 2}" for i in range(200)]
    strata = [str(i % 2) for i in range(200)]
    assert assign_folds(groups, strata, 3, 0) == assign_folds(groups, strata, 3, 0)
    assert assign_folds(groups, strata, 3, 0) != assign_folds(groups, strata, 3, 1)


def test_too_few_groups_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot split 2 groups into 3 folds"):
        assign_folds(["a", "a", "b"], ["0", "1", "0"], 3, 0)


def test_folds_are_stored_in_the_manifest_and_respect_groups(tmp_path):
    directory, manifest = small_synthetic(tmp_path, num_groups=30)
    entry = ensure_folds(directory, num_folds=3, seed=0, splits=["train", "val"])
    stored = read_manifest(directory)["folds"]
    assert stored == [entry]
    assert ensure_folds(directory, num_folds=3, seed=0, splits=["val", "train"]) == entry  # reused, not recomputed
    folds_of_group = defaultdict(set)
    ids_per_fold = Counter()
    names = [s["name"] for s in manifest["shards"] if s["split"] in ("train", "val")]
    for record in iter_records(directory, names):
        fold = entry["assignment"][record["group"]]
        folds_of_group[record["group"]].add(fold)
        ids_per_fold[fold] += 1
    assert all(len(folds) == 1 for folds in folds_of_group.values())
    assert [ids_per_fold[k] for k in range(3)] == entry["samples_per_fold"]

"""Which samples each stage (train / val / test) of a run reads, and the rule that chose the weights its test
stage is scored with.

Without a fold the dataset's own splits are the stages. In a fold run (`fold=k`) every group has one role:
`test` (the held-out fold k, scored once at the end), `val` (what checkpointing and early stopping may look
at) or `train`; the training stream and the validation set are drawn from the other folds only
(`selection`: `inner` carves a validation split from them, or uses the dataset's own validation split when
it has one; `last` has no validation set, the final weights are scored). Without a fold, `last` is the
same fixed-schedule protocol on the dataset's own splits (`dataset_last`: no validation split is read).
"""

from __future__ import annotations

from typing import Any

from crossmod.data.folds import fold_roles, inner_validation

SELECTIONS = ("inner", "last")
# What chose the weights that score a run's test stage (recorded in metrics.json, fold_result.json, CV reports).
RULES = {
    "dataset_val": "best checkpoint on the dataset's own validation split; test = the dataset's test split",
    "dataset_last": "final weights after the configured schedule, no selection, no validation split needed; test = the dataset's test split",
    "val_split": "best checkpoint on the dataset's own validation split; the held-out fold is scored once by it",
    "inner": "best checkpoint on an inner validation split carved from the training folds; the held-out fold is scored once by it",
    "last": "final weights after the configured schedule, no selection; the held-out fold is scored once by them",
}
NO_SELECTION = ("last", "dataset_last")  # the rules with no validation set: nothing is ranked, the final weights are scored


def check_selection(selection: str) -> None:
    if selection not in SELECTIONS:
        raise ValueError(f"cv.selection must be one of {SELECTIONS}, got {selection!r} (the held-out fold is never a selection set)")


def fold_splits(train_splits: list[str]) -> list[str]:
    """The splits folds divide: the training splits (a dataset's own validation split stays a validation split)."""
    return sorted(set(train_splits))


def rule_for(fold: int | None, selection: str, manifest: dict[str, Any], val_splits: list[str]) -> str:
    """The key of RULES that applies to a run with this fold and selection on this dataset."""
    if fold is None:
        return "dataset_last" if selection == "last" else "dataset_val"
    if selection == "last":
        return "last"
    own_validation = bool(set(manifest["counts"]["split"]) & set(val_splits))
    return "val_split" if own_validation else "inner"


class RoleFilter:
    """Keep samples whose group has the given role (`train`, `val`, `test`) in this fold run."""

    def __init__(self, roles: dict[str, str], role: str) -> None:
        self.roles, self.role = roles, role

    def __call__(self, sample: dict[str, Any]) -> bool:
        group = sample["group"]
        if group not in self.roles:
            raise KeyError(f"sample {sample['id']}: group {group} has no fold in the manifest (stale shards?)")
        return self.roles[group] == self.role


class StagePlan:
    """What each stage of one run reads: splits, and in a fold run the role its samples must have.

    `splits` names each stage's splits (`train`, `val`, `test`); `folds` is the manifest's fold entry of a
    fold run (None otherwise), whose inner validation split is used under the `inner` rule.
    """

    def __init__(
        self,
        splits: dict[str, list[str]],
        split_counts: dict[str, int],
        rule: str,
        fold: int | None = None,
        folds: dict[str, Any] | None = None,
        inner_share: float = 0.15,
    ) -> None:
        if (fold is None) != (folds is None):
            raise ValueError("a fold run needs its fold entry, and only a fold run has one")
        self.splits, self.split_counts, self.rule, self.fold, self.folds = splits, split_counts, rule, fold, folds
        self.inner = inner_validation(folds, fold, inner_share) if rule == "inner" else None
        self.roles = fold_roles(folds, fold, self.inner["groups"] if self.inner else None) if folds is not None else None

    def reads(self, stage: str) -> tuple[list[str], str | None]:
        """(splits to read, role to keep) of a stage; role None = the whole splits."""
        if self.roles is None:
            return self.splits[stage], None
        if stage == "val" and self.rule == "val_split":
            return self.splits["val"], None
        return fold_splits(self.splits["train"]), stage

    def num_samples(self, stage: str) -> int:
        """Samples a stage reads (the training stream's samples per pass)."""
        if self.folds is None or (stage == "val" and self.rule == "val_split"):
            return sum(self.split_counts.get(split, 0) for split in self.splits[stage])
        per_fold = self.folds["samples_per_fold"]
        inner = self.inner["samples"] if self.inner else 0
        if stage == "test":
            return per_fold[self.fold]
        if stage == "val":
            return inner
        return sum(per_fold) - per_fold[self.fold] - inner

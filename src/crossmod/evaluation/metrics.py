"""Per-head AUROC / accuracy / F1 over the whole gathered evaluation set.

`HeadMetrics.update` only appends device tensors (no host syncs per step); everything is
computed once at epoch end, after torchmetrics has gathered the states from every rank.
States are kept flat (1-D) so that a rank that saw no sample still concatenates cleanly.

Scores equal scikit-learn's on the same predictions: AUROC is `roc_auc_score` (multiclass:
one-vs-rest, macro; multilabel: macro), accuracy is `accuracy_score` of the arg-max or of p ≥ 0.5
(multilabel: `1 - hamming_loss`, the share of correct label decisions), F1 is `f1_score` (binary;
macro over classes or labels). Where scikit-learn calls AUROC undefined (a class, or a label value,
absent from the annotated items) it is NaN for every head kind, never 0, and the macro mean over
heads leaves it out; `HeadMetrics.undefined` says which heads and why, for a warning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torchmetrics import Metric
from torchmetrics.functional.classification import (
    binary_accuracy,
    binary_auroc,
    binary_f1_score,
    multiclass_accuracy,
    multiclass_auroc,
    multiclass_f1_score,
    multilabel_accuracy,
    multilabel_auroc,
    multilabel_f1_score,
)
from torchmetrics.utilities import dim_zero_cat

from crossmod.data.heads import Head, label_mask

# majority: the accuracy of always answering the most frequent class on the same items, what accuracy must beat to
# carry information (a culture that calls 93 % of the memes hateful gives acc 0.93 to a model that always says so)
METRICS = ("auroc", "acc", "f1", "majority")

# how reports name them (the console table, src/crossmod/results/culture_table.py): a metric added above gets its columns there
METRIC_LABELS = {"auroc": "AUROC", "acc": "acc", "f1": "F1", "majority": "majority"}
REFERENCE_METRICS = ("majority",)  # facts about the labels, not the model: shown for the test memes only


def majority_rate(target: torch.Tensor, head: Head) -> float:
    """Share of the most frequent class among annotated items (per label, averaged, for multilabel heads)."""
    if head.kind == "multilabel":
        positive = target.float().mean(0)
        return float(torch.maximum(positive, 1 - positive).mean())
    counts = torch.bincount(target.long().reshape(-1), minlength=2 if head.is_binary else head.width)
    return float(counts.max() / counts.sum())


def culture_auroc(labels: Sequence[int], scores: Sequence[float]) -> float:
    """AUROC of one culture's 0/1 labels against scores, outside training (alignment cells, Table 11,
    zero-shot prompts, ROC legends): scikit-learn's `roc_auc_score`, NaN where only one class is present."""
    from sklearn.metrics import roc_auc_score  # here: scikit-learn adds ~14 MiB to every training process

    return float(roc_auc_score(labels, scores)) if len(set(labels)) == 2 else math.nan


def auroc_undefined(target: torch.Tensor, head: Head) -> str | None:
    """Why AUROC cannot be computed on these annotated labels (scikit-learn returns NaN), or None."""
    count = target.shape[0]
    if count == 0:
        return "no annotated items"
    if head.is_binary:
        positives = int((target == 1).sum())
        return f"one class only: all {count} annotated items are {int(positives > 0)}" if positives in (0, count) else None
    classes = head.classes
    if head.kind == "multiclass":
        present = torch.bincount(target.long(), minlength=len(classes))
        missing = [classes[i] for i in range(len(classes)) if present[i] == 0]
        return f"class {', '.join(map(repr, missing))} absent from the {count} annotated items" if missing else None
    ones = target.sum(0).tolist()
    constant = [f"{classes[i]!r} is {int(ones[i] > 0)}" for i in range(len(classes)) if ones[i] in (0, count)]
    return f"label {', '.join(constant)} in all {count} annotated items" if constant else None


def head_scores(probs: torch.Tensor, target: torch.Tensor, head: Head) -> dict[str, float]:
    """AUROC, accuracy and F1 of one head on annotated items; NaN where a metric is undefined."""
    mask = label_mask(target)
    probs, target = probs[mask], target[mask]
    if target.numel() == 0:
        return {name: math.nan for name in METRICS}
    defined = auroc_undefined(target, head) is None
    majority = majority_rate(target, head)
    if head.is_binary:
        target = target.long()
        auroc = float(binary_auroc(probs, target)) if defined else math.nan
        acc, f1 = float(binary_accuracy(probs, target)), float(binary_f1_score(probs, target))
        return {"auroc": auroc, "acc": acc, "f1": f1, "majority": majority}
    n = head.width
    if head.kind == "multiclass":
        target = target.long()
        return {
            "auroc": float(multiclass_auroc(probs, target, num_classes=n)) if defined else math.nan,
            "acc": float(multiclass_accuracy(probs, target, num_classes=n, average="micro")),
            "f1": float(multiclass_f1_score(probs, target, num_classes=n, average="macro")),
            "majority": majority,
        }
    target = target.long()
    return {
        "auroc": float(multilabel_auroc(probs, target, num_labels=n)) if defined else math.nan,
        "acc": float(multilabel_accuracy(probs, target, num_labels=n)),
        "f1": float(multilabel_f1_score(probs, target, num_labels=n)),
        "majority": majority,
    }


def macro_mean(per_head: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean over heads of each metric, ignoring heads where it is undefined."""
    means = {}
    for name in METRICS:
        values = [scores[name] for scores in per_head.values() if not math.isnan(scores[name])]
        means[name] = sum(values) / len(values) if values else math.nan
    return means


def _cat(state: list[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    if isinstance(state, torch.Tensor):
        return state
    return dim_zero_cat(state) if state else torch.zeros(0)


class HeadMetrics(Metric):
    """Collects probabilities and targets per head; `compute` returns `{head}/{metric}` and `mean/{metric}`,
    and leaves in `undefined` (head → reason) the heads whose scores it had to leave out of the mean."""

    full_state_update = False

    def __init__(self, heads: dict[str, Head], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.heads = dict(heads)
        for name in self.heads:
            self.add_state(f"probs_{name}", default=[], dist_reduce_fx="cat")
            self.add_state(f"target_{name}", default=[], dist_reduce_fx="cat")
        self.undefined: dict[str, str] = {}

    def update(self, logits: dict[str, torch.Tensor], labels: dict[str, torch.Tensor]) -> None:
        for name, head in self.heads.items():
            probs = head.probabilities(logits[name].detach().float())
            getattr(self, f"probs_{name}").append(probs.reshape(-1))
            getattr(self, f"target_{name}").append(labels[name].float().reshape(-1))

    def gathered(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Probabilities and targets of one head, reshaped back from the flat states."""
        head = self.heads[name]
        probs, target = (_cat(getattr(self, f"{kind}_{name}")) for kind in ("probs", "target"))
        if head.is_binary:
            return probs, target
        probs = probs.reshape(-1, head.width)
        target = target.reshape(-1, head.width) if head.kind == "multilabel" else target
        return probs, target

    def compute(self) -> dict[str, float]:
        per_head, self.undefined = {}, {}
        for name, head in self.heads.items():
            probs, target = self.gathered(name)  # gathered from every rank: compute syncs states first
            per_head[name] = head_scores(probs, target, head)
            reason = auroc_undefined(target[label_mask(target)], head)
            if reason is not None:
                undefined = ", ".join(metric for metric, value in per_head[name].items() if math.isnan(value))
                self.undefined[name] = f"{undefined} undefined ({reason})"
        flat = {f"{head}/{metric}": value for head, scores in per_head.items() for metric, value in scores.items()}
        flat.update({f"mean/{metric}": value for metric, value in macro_mean(per_head).items()})
        return flat

"""A decision threshold chosen on the selection split, then applied once to the held-out memes.

Accuracy at 0.5 carries no information when a model puts most memes on one side of 0.5 (at the defaults, 93–100 %
of a culture's held-out memes got P >= .5). Macro-F1 at a threshold chosen on the validation split (the split
the run selected its weights on, never the held-out memes) says how well the scores separate the classes at an
operating point a user could have picked in advance. Scores are scikit-learn's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import f1_score

from crossmod.evaluation.alignment import read_predictions


def macro_f1(labels: np.ndarray, probs: np.ndarray, threshold: float) -> float:
    return float(f1_score(labels, (probs >= threshold).astype(int), average="macro", labels=[0, 1], zero_division=0))


def macro_f1_sweep(labels: np.ndarray, probs: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Macro-F1 of `probs >= t` for every t at once: scikit-learn's formula (per class 2·tp / (true + predicted), 0 where
    both are 0, then their mean) on counts from sorted scores. One f1_score call per threshold took 25–70 s on a
    validation split of 1,350 memes (thousands of distinct scores per head); this is one sort."""
    labels, probs = np.asarray(labels, dtype=int), np.asarray(probs, dtype=float)
    pos, neg = np.sort(probs[labels == 1]), np.sort(probs[labels == 0])
    tp = (len(pos) - np.searchsorted(pos, thresholds, side="left")).astype(float)  # positives scored >= t
    fp = (len(neg) - np.searchsorted(neg, thresholds, side="left")).astype(float)
    fn, tn = len(pos) - tp, len(neg) - fp

    def f1(hits: np.ndarray, true: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        denom = 1.0 * true + predicted
        return np.divide(2.0 * hits, denom, out=np.zeros_like(denom), where=denom != 0)

    return (f1(tn, tn + fp, tn + fn) + f1(tp, tp + fn, tp + fp)) / 2


def best_threshold(labels: np.ndarray, probs: np.ndarray) -> float | None:
    """The threshold maximising macro-F1 on these memes (the midpoint between neighbouring distinct scores, the lowest
    among ties); None when they hold one class only (nothing to separate)."""
    labels, probs = np.asarray(labels, dtype=int), np.asarray(probs, dtype=float)
    if len(np.unique(labels)) < 2:
        return None
    values = np.unique(probs)
    candidates = np.concatenate([[values[0]], (values[:-1] + values[1:]) / 2, [np.nextafter(values[-1], np.inf)]])
    return float(candidates[int(np.argmax(macro_f1_sweep(labels, probs, candidates)))])


def selection_threshold_scores(
    selection: tuple[Mapping[str, Mapping[str, float]], Mapping[str, Mapping[str, int]]],
    held_out: tuple[Mapping[str, Mapping[str, float]], Mapping[str, Mapping[str, int]]],
) -> dict[str, dict[str, float]]:
    """Per binary head: the threshold chosen on the selection predictions, and macro-F1 (and accuracy) at it on the
    held-out predictions; heads whose selection labels have one class are left out."""
    (sel_probs, sel_labels), (out_probs, out_labels) = selection, held_out
    scores: dict[str, dict[str, float]] = {}
    for head, labelled in sel_labels.items():
        if head not in out_labels or not out_labels[head]:
            continue
        ids = sorted(labelled)
        threshold = best_threshold(np.array([labelled[i] for i in ids]), np.array([sel_probs[head][i] for i in ids]))
        if threshold is None:
            continue
        held = sorted(out_labels[head])
        y, p = np.array([out_labels[head][i] for i in held]), np.array([out_probs[head][i] for i in held])
        scores[head] = {
            "val_threshold": threshold,
            "macro_f1_at_val_threshold": macro_f1(y, p, threshold),
            "acc_at_val_threshold": float(np.mean((p >= threshold).astype(int) == y)),
        }
    return scores


def threshold_on_selection(predictions: Path) -> dict[str, Any] | None:
    """Per binary head (and their mean), macro-F1 and accuracy on a run's test stage at the threshold that maximised
    macro-F1 on its validation stage (`predictions/val.csv`, the selection split, never the held-out memes) and
    test stage (`test.csv`); None without both files or without a head with two classes on val."""
    val, test = predictions / "val.csv", predictions / "test.csv"
    if not (val.is_file() and test.is_file()):
        return None
    per_head = selection_threshold_scores(read_predictions(val), read_predictions(test))
    if not per_head:
        return None
    names = next(iter(per_head.values())).keys()
    mean = {name: sum(scores[name] for scores in per_head.values()) / len(per_head) for name in names if name != "val_threshold"}
    return {
        "rule": "threshold maximising macro-F1 on the validation (selection) split, applied once to the test stage",
        "heads": per_head,
        "mean": mean,
    }


def calibration_on_selection(predictions: Path, method: str = "temperature") -> dict[str, Any] | None:
    """Per binary head (and their mean), the held-out memes' ECE, Brier score and log-loss before and after the
    `method`'s map (calibration=temperature | platt | isotonic) fitted on the validation (selection) stage:
    `predictions/val.csv` and `test.csv`, as for the threshold
    above; None without both files or without a head with two classes on val."""
    from crossmod.evaluation.calibration import METHODS, temperature_on_selection
    from crossmod.evaluation.predictions import labelled_pairs

    val, test = predictions / "val.csv", predictions / "test.csv"
    if not (val.is_file() and test.is_file()):
        return None
    per_head = temperature_on_selection(labelled_pairs(*read_predictions(val)), labelled_pairs(*read_predictions(test)), method=method)
    if not per_head:
        return None
    mean = {
        when: {name: float(np.mean([h[when][name] for h in per_head.values()])) for name in ("ece", "brier", "log_loss")}
        for when in ("before", "after")
    }
    mean["compared"] = {  # every map, fitted on the same memes, beside the chosen one
        m: {name: float(np.mean([h["compared"][m][name] for h in per_head.values()])) for name in ("ece", "brier", "log_loss")}
        for m in METHODS
    }
    fitted = {
        "temperature": "temperature fitted per head on the validation (selection) split by log-loss",
        "platt": "Platt scaling (slope and intercept on the logit) fitted per head on the validation (selection) split by log-loss",
        "isotonic": "isotonic regression fitted per head on the validation (selection) split",
    }[method]
    others = [m for m in ("temperature", "platt", "isotonic") if m != method]
    return {
        "method": method,
        "rule": f"{fitted}, applied once to the test stage ({' and '.join(others)}, fitted on the same memes, reported beside it)",
        "bins": next(iter(per_head.values()))["before"]["bins"],
        "heads": per_head,
        "mean": mean,
    }


def policy_on_selection(predictions: Path, policy: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per binary head: each action's threshold chosen on the validation (selection) stage, with its counts and
    interval there, and the test stage's precision and recall at it, applied once; a target val cannot meet is said
    (`unreachable`). None without both files."""
    from dataclasses import asdict

    from crossmod.evaluation.policies import Threshold, choose_thresholds, held_out_rates
    from crossmod.evaluation.predictions import labelled_pairs

    val, test = predictions / "val.csv", predictions / "test.csv"
    if not (val.is_file() and test.is_file()):
        return None
    targets = {action: dict(target) for action, target in policy.items() if action != "name"}
    selection, held_out = labelled_pairs(*read_predictions(val)), labelled_pairs(*read_predictions(test))
    heads: dict[str, dict[str, Any]] = {}
    for head, (y, p) in selection.items():
        if head not in held_out:
            continue
        heads[head] = {}
        for action, chosen in choose_thresholds(y, p, targets).items():
            record = asdict(chosen)
            if isinstance(chosen, Threshold):
                record["test"] = held_out_rates(*held_out[head], chosen)
            heads[head][action] = record
    return {
        "name": str(policy.get("name") or "unnamed"),
        "targets": targets,
        "rule": "per culture, each action's threshold chosen on the validation (selection) split, applied once to the test stage",
        "heads": heads,
    }

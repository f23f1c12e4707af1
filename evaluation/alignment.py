"""Culture alignment: how well each head's (or model's) scores match each culture's labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from evaluation.predictions import binary_scores, read_prediction_columns


def read_predictions(path: str | Path) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """Binary-head predictions CSV → (probabilities head → id → p, labels head → id → y)."""
    return binary_scores(read_prediction_columns(path))


def alignment_matrix(probs: dict[str, dict[str, float]], labels: dict[str, dict[str, int]]) -> dict[str, dict[str, float]]:
    """AUROC of every head's scores against every culture's labels, over the ids both cover."""
    matrix: dict[str, dict[str, float]] = {}
    for head, scores in probs.items():
        matrix[head] = {}
        for culture, truth in labels.items():
            ids = sorted(set(scores) & set(truth))
            y = np.array([truth[i] for i in ids])
            matrix[head][culture] = float(roc_auc_score(y, [scores[i] for i in ids])) if len(set(y)) == 2 else float("nan")
    return matrix

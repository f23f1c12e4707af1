"""Culture alignment: how well each head's (or model's) scores match each culture's labels.

A matrix `matrix[head][culture]` holds the AUROC of the head's scores against that culture's labels;
over several runs (seeds, folds) the matrices are averaged and the best culture of each head is
tested against the others; the markdown table marks each head's best culture.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from scipy.stats import ranksums

from evaluation.metrics import culture_auroc
from evaluation.predictions import binary_scores, read_prediction_columns

Matrix = dict[str, dict[str, float]]


def read_predictions(path: str | Path) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """Binary-head predictions CSV → (probabilities head → id → p, labels head → id → y)."""
    return binary_scores(read_prediction_columns(path))


def alignment_matrix(probs: dict[str, dict[str, float]], labels: dict[str, dict[str, int]]) -> Matrix:
    """AUROC of every head's scores against every culture's labels, over the ids both cover."""
    matrix: Matrix = {}
    for head, scores in probs.items():
        matrix[head] = {}
        for culture, truth in labels.items():
            ids = sorted(set(scores) & set(truth))
            y = np.array([truth[i] for i in ids])
            matrix[head][culture] = culture_auroc(y.tolist(), [scores[i] for i in ids])
    return matrix


def _with_head(matrices: list[Matrix], head: str) -> list[Matrix]:
    return [m for m in matrices if head in m]


def mean_alignment(matrices: list[Matrix]) -> Matrix:
    """Cell-wise mean over the runs that have the head (NaN cells ignored): runs of one model per culture
    (FT-US, FT-DE …) each contribute their own row."""
    heads = list(dict.fromkeys(h for m in matrices for h in m))
    mean = {}
    for head in heads:
        runs = _with_head(matrices, head)
        mean[head] = {c: float(np.nanmean([m[head][c] for m in runs])) for c in runs[0][head]}
    return mean


def markers(matrices: list[Matrix], alpha: float = 0.05) -> dict[str, str]:
    """Per model head: `*` if its best culture beats the lowest over runs (one-sided rank-sum, p < alpha),
    `**` if it also beats the second best; needs several runs (seeds or folds) with the head, else no mark."""
    if len(matrices) < 2:
        return {}
    result = {}
    for head in dict.fromkeys(h for m in matrices for h in m):
        runs = _with_head(matrices, head)
        if len(runs) < 2:
            result[head] = ""
            continue
        values = {c: np.array([m[head][c] for m in runs]) for c in runs[0][head]}
        ranked = sorted(values, key=lambda c: -np.nanmean(values[c]))
        best, second, lowest = ranked[0], ranked[1], ranked[-1]
        p_low = ranksums(values[best], values[lowest], alternative="greater").pvalue
        p_second = ranksums(values[best], values[second], alternative="greater").pvalue
        result[head] = "**" if p_low < alpha and p_second < alpha else "*" if p_low < alpha else ""
    return result


def best_culture(row: Mapping[str, float]) -> str:
    """The culture with the highest AUROC of a matrix row (NaN never best unless all are NaN: then the first)."""
    return max(row, key=lambda c: -1 if math.isnan(row[c]) else row[c])


def alignment_table(matrix: Matrix, best_marks: Mapping[str, str]) -> list[str]:
    """Markdown rows (heads) × columns (cultures' labels), AUROC to 3 decimals; `best_marks[head]` follows the best cell."""
    cultures = list(next(iter(matrix.values())))
    lines = ["| head \\ labels | " + " | ".join(cultures) + " |", "|---|" + "---|" * len(cultures)]
    for head, row in matrix.items():
        best = best_culture(row)
        lines.append(f"| {head} | " + " | ".join(f"{row[c]:.3f}" + (best_marks[head] if c == best else "") for c in cultures) + " |")
    return lines

"""Culture alignment: how well each head's (or model's) scores match each culture's labels.

A matrix `matrix[head][culture]` holds the AUROC of the head's scores against that culture's labels;
over several runs (seeds, folds) the matrices are averaged and the best culture of each head is
tested against the others (the exact one-sided Wilcoxon rank-sum test of `crossmod.evaluation.rank_sum`: with a handful
of folds the normal approximation overstates the evidence); the markdown table marks each head's best culture.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from crossmod.evaluation.metrics import culture_auroc
from crossmod.evaluation.predictions import binary_scores, read_prediction_columns
from crossmod.evaluation.rank_sum import describe, rank_sum, unreachable_note

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


def _ranked_runs(matrices: list[Matrix], head: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """The head's finite AUROCs per culture over its runs (an undefined cell is left out, as in the mean), and
    the cultures ranked by mean, best first (cultures with no defined cell last)."""
    runs = _with_head(matrices, head)
    values = {}
    for culture in runs[0][head]:
        column = np.array([m[head][culture] for m in runs], dtype=float)
        values[culture] = column[np.isfinite(column)]
    ranked = sorted(values, key=lambda c: -values[c].mean() if values[c].size else math.inf)
    return values, ranked


def markers(matrices: list[Matrix], alpha: float = 0.05) -> dict[str, str]:
    """Per model head: `*` if its best culture beats the lowest over runs, `**` if it also beats the second best.

    The test is the exact one-sided Wilcoxon rank-sum (`crossmod.evaluation.rank_sum.rank_sum`: a permutation over all
    splits of the two cultures' AUROCs, p < alpha). With 3 runs it cannot go below p = 1/20 = .05, so a head needs
    4 or more runs for a marker; :func:`marker_test` names the test and says when none can be earned. A head with
    fewer than 2 runs gets no mark (and no test)."""
    if len(matrices) < 2:
        return {}
    result = {}
    for head in dict.fromkeys(h for m in matrices for h in m):
        if len(_with_head(matrices, head)) < 2:
            result[head] = ""
            continue
        values, ranked = _ranked_runs(matrices, head)
        best, second, lowest = ranked[0], ranked[1], ranked[-1]
        p_low = rank_sum(values[best], values[lowest], alternative="greater").pvalue
        p_second = rank_sum(values[best], values[second], alternative="greater").pvalue
        result[head] = "**" if p_low < alpha and p_second < alpha else "*" if p_low < alpha else ""
    return result


def marker_test(matrices: list[Matrix], alpha: float = 0.05) -> dict[str, str | float | None]:
    """What the report says about :func:`markers`: the test's name, alpha, and a note naming the heads whose runs
    are too few for any marker (None when every head can earn one)."""
    sizes = {}
    for head in dict.fromkeys(h for m in matrices for h in m):
        values, ranked = _ranked_runs(matrices, head)
        sizes[head] = (values[ranked[0]].size, values[ranked[-1]].size) if len(ranked) >= 2 else (0, 0)
    tested = [nm for nm in sizes.values() if min(nm) > 0]
    return {"test": describe(tested or [(len(matrices), len(matrices))]), "alpha": alpha, "note": unreachable_note(sizes, alpha)}


# One meaning per mark in every report crossmod writes: BEST follows the highest value of a row or column; `*`/`**`
# only ever mean a significance test passed (alignment_markers, zeroshot_stats).
BEST = "†"


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

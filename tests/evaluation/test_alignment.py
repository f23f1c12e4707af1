"""The culture alignment matrix, its mean over runs, the rank-sum markers and the markdown table, by hand."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from evaluation.alignment import alignment_matrix, alignment_table, best_culture, markers, mean_alignment


def test_matrix_scores_each_head_against_each_culture_on_the_ids_both_cover():
    probs = {"US": {"a": 0.9, "b": 0.2, "c": 0.6, "z": 0.5}}
    labels = {"US": {"a": 1, "b": 0, "c": 0}, "DE": {"a": 0, "b": 1}, "MX": {"a": 1, "c": 1}}
    matrix = alignment_matrix(probs, labels)
    # US: positive .9 beats .2 and .6 → 1; DE: positive .2 below negative .9 → 0; MX: one class → undefined
    assert matrix["US"]["US"] == 1.0 and matrix["US"]["DE"] == 0.0 and math.isnan(matrix["US"]["MX"])


def test_mean_over_runs_ignores_undefined_cells():
    runs = [{"US": {"US": 0.8, "DE": math.nan}}, {"US": {"US": 0.6, "DE": 0.5}}]
    assert mean_alignment(runs) == {"US": {"US": pytest.approx(0.7), "DE": 0.5}}


def _runs(us: list[float], de: list[float], mx: list[float]) -> list[dict[str, dict[str, float]]]:
    return [{"US": {"US": u, "DE": d, "MX": m}} for u, d, m in zip(us, de, mx)]


def test_markers_by_the_one_sided_rank_sum_normal_approximation():
    # 3 vs 3 runs, all best values above all others: rank sum 15, expected 10.5, sd sqrt(3·3·7/12) → z = 1.964, p = .0248
    p_separated = norm.sf((15 - 10.5) / math.sqrt(3 * 3 * 7 / 12))
    assert p_separated == pytest.approx(0.0248, abs=1e-4)
    assert markers(_runs([0.90, 0.91, 0.92], [0.70, 0.71, 0.72], [0.50, 0.51, 0.52])) == {"US": "**"}
    # best and second interleave (rank sum 12: z = 0.655, p = .26): only best > lowest holds
    assert markers(_runs([0.90, 0.80, 0.92], [0.91, 0.81, 0.79], [0.50, 0.51, 0.52])) == {"US": "*"}
    # best (mean .733) against lowest (.633) interleaves the same way (rank sum 12): no marker
    assert markers(_runs([0.9, 0.55, 0.75], [0.6, 0.8, 0.5], [0.7, 0.65, 0.78])) == {"US": ""}
    assert markers(_runs([0.9], [0.5], [0.1])) == {}  # one run: nothing to test


def test_table_marks_the_best_culture_of_each_row_and_skips_undefined_cells():
    matrix = {"US": {"US": 0.812, "DE": math.nan, "MX": 0.6}, "DE": {"US": 0.5, "DE": 0.7, "MX": 0.7}}
    assert best_culture(matrix["US"]) == "US" and best_culture(matrix["DE"]) == "DE"  # ties: the first
    assert alignment_table(matrix, {"US": "*", "DE": "†"}) == [
        "| head \\ labels | US | DE | MX |",
        "|---|---|---|---|",
        "| US | 0.812* | nan | 0.600 |",
        "| DE | 0.500 | 0.700† | 0.700 |",
    ]


def test_culture_auroc_by_hand() -> None:
    from evaluation.metrics import culture_auroc

    # pairs (positive, negative) ranked correctly: (0.35>0.1), (0.8>0.1), (0.8>0.4); wrong: (0.35<0.4) → 3/4
    assert culture_auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
    assert culture_auroc([0, 1], [0.5, 0.5]) == 0.5  # a tie counts half
    assert math.isnan(culture_auroc([1, 1, 1], [0.2, 0.3, 0.9]))


def test_mean_alignment_of_one_model_per_culture_keeps_each_row() -> None:
    from evaluation.alignment import markers, mean_alignment

    us = {"US": {"US": 0.8, "DE": 0.6}}
    de = [{"DE": {"US": 0.5, "DE": 0.9}}, {"DE": {"US": 0.7, "DE": float("nan")}}]
    mean = mean_alignment([us, *de])
    assert mean == {"US": {"US": 0.8, "DE": 0.6}, "DE": {"US": 0.6, "DE": 0.9}}
    assert markers([us, *de])["US"] == ""  # one run: no test

"""The culture alignment matrix, its mean over runs, the exact rank-sum markers and the markdown table, by hand."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from crossmod.evaluation.alignment import alignment_matrix, alignment_table, best_culture, marker_test, markers, mean_alignment


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


def test_markers_by_the_exact_one_sided_rank_sum_test():
    # 4 vs 4 runs, all best values above all others: 1 split of C(8, 4) = 70 → p = .014 against both
    assert markers(_runs([0.90, 0.91, 0.92, 0.93], [0.70, 0.71, 0.72, 0.73], [0.50, 0.51, 0.52, 0.53])) == {"US": "**"}
    # best and second interleave (US ranks 8, 6, 4, 2 of 8 → sum 20, reached in 24 of 70 splits): only best > lowest holds
    assert markers(_runs([0.90, 0.80, 0.70, 0.60], [0.85, 0.75, 0.65, 0.55], [0.50, 0.51, 0.52, 0.53])) == {"US": "*"}
    # best (mean .75) against lowest (.6125) interleaved: US ranks 8, 6, 5, 3 → sum 22; the other four sum ≤ 14 in
    # 1 + 1 + 2 + 3 + 5 = 12 of 70 splits (sums 10 … 14) → p = .17: no marker
    assert markers(_runs([0.9, 0.8, 0.7, 0.6], [0.7, 0.7, 0.7, 0.7], [0.85, 0.65, 0.5, 0.45])) == {"US": ""}
    assert markers(_runs([0.9], [0.5], [0.1])) == {}  # one run: nothing to test


def test_three_runs_cannot_earn_a_marker_and_the_report_says_so():
    # 3 vs 3, complete separation: scipy's normal approximation gives p = .0248 (crossmod marked this `**`);
    # the exact test: 1 split of C(6, 3) = 20 → p = .05, not below .05
    p_normal = norm.sf((15 - 10.5) / math.sqrt(3 * 3 * 7 / 12))
    assert p_normal == pytest.approx(0.0248, abs=1e-4)
    runs = _runs([0.90, 0.91, 0.92], [0.70, 0.71, 0.72], [0.50, 0.51, 0.52])
    assert markers(runs) == {"US": ""}
    assert marker_test(runs) == {
        "test": "exact one-sided Wilcoxon rank-sum (permutation over all splits)",
        "alpha": 0.05,
        "note": "No marker can be earned for US: with 3 runs the exact one-sided rank-sum test cannot go below p = 0.05 "
        "(markers need ≥ 4 runs per group for p < 0.05).",
    }
    assert marker_test(_runs([0.9] * 4, [0.7] * 4, [0.5] * 4))["note"] is None


def test_ties_between_runs_count_splits_exactly():
    # US .8 .8 .8 .7 against MX .7 .7 .6 .6 (DE in between): midranks .6 → 1.5, .7 → 4, .8 → 7; US's sum 25: the other
    # four sum ≤ 11 only as {1.5, 1.5, 4, 4}, 3 ways → p = 3/70 = .043 (scipy's no-tie "exact" U gives 2/70): `*`.
    # Against DE (.75 four times): midranks .7 → 1, .75 → 3.5, .8 → 7; US's sum 22, the other four sum ≤ 14 as
    # {1, 3.5, 3.5, 3.5} (4 ways) or {3.5 × 4} (1) → p = 5/70 = .071: not `**`
    assert markers(_runs([0.8, 0.8, 0.8, 0.7], [0.75, 0.75, 0.75, 0.75], [0.7, 0.7, 0.6, 0.6])) == {"US": "*"}
    # one more MX run tied with US's lowest: US .8 .8 .8 .7 vs MX .7 .7 .7 .6. Midranks .6 → 1, .7 → 3.5, .8 → 7;
    # US's sum 24.5, the other four sum ≤ 11.5 only as {1, 3.5, 3.5, 3.5}, 4 ways → p = 4/70 = .057: no marker
    assert markers(_runs([0.8, 0.8, 0.8, 0.7], [0.75, 0.75, 0.75, 0.75], [0.7, 0.7, 0.7, 0.6])) == {"US": ""}


def test_undefined_cells_are_left_out_of_the_test():
    # a run where the lowest culture's AUROC is undefined: 4 vs 3 values, complete separation → 1/35
    runs = _runs([0.90, 0.91, 0.92, 0.93], [0.70, 0.71, 0.72, 0.73], [0.50, math.nan, 0.52, 0.53])
    assert markers(runs) == {"US": "**"}
    assert marker_test(runs)["note"] is None


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
    from crossmod.evaluation.metrics import culture_auroc

    # pairs (positive, negative) ranked correctly: (0.35>0.1), (0.8>0.1), (0.8>0.4); wrong: (0.35<0.4) → 3/4
    assert culture_auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
    assert culture_auroc([0, 1], [0.5, 0.5]) == 0.5  # a tie counts half
    assert math.isnan(culture_auroc([1, 1, 1], [0.2, 0.3, 0.9]))


def test_mean_alignment_of_one_model_per_culture_keeps_each_row() -> None:
    from crossmod.evaluation.alignment import markers, mean_alignment

    us = {"US": {"US": 0.8, "DE": 0.6}}
    de = [{"DE": {"US": 0.5, "DE": 0.9}}, {"DE": {"US": 0.7, "DE": float("nan")}}]
    mean = mean_alignment([us, *de])
    assert mean == {"US": {"US": 0.8, "DE": 0.6}, "DE": {"US": 0.6, "DE": 0.9}}
    assert markers([us, *de])["US"] == ""  # one run: no test

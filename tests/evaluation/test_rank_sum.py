"""The exact rank-sum test behind every marker: hand-computed p-values, scipy where its exact method applies, the
floor of reachable p-values and the report's note."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, rankdata, ranksums

from crossmod.evaluation.rank_sum import (
    EXACT_MAX_SPLITS,
    describe,
    needed_per_group,
    rank_sum,
    rank_sum_name,
    smallest_p,
    unreachable_note,
)

EXACT = "exact one-sided Wilcoxon rank-sum (permutation over all splits)"


def enumerated_p(x, y, alternative="greater") -> float:
    """Reference: every split of the pooled values into |x| and |y|, counted one by one (midranks for ties)."""
    ranks = rankdata(np.concatenate([x, y]))
    observed = ranks[: len(x)].sum()
    sums = [ranks[list(chosen)].sum() for chosen in combinations(range(len(ranks)), len(x))]
    greater = sum(s >= observed for s in sums) / len(sums)
    less = sum(s <= observed for s in sums) / len(sums)
    return {"greater": greater, "less": less, "two-sided": min(1.0, 2 * min(greater, less))}[alternative]


def test_three_vs_three_complete_separation_is_one_split_in_twenty():
    # 6 values, 3 to each group: C(6, 3) = 20 splits; only the observed one puts all three largest in x.
    result = rank_sum([0.90, 0.91, 0.92], [0.70, 0.71, 0.72])
    assert result.pvalue == pytest.approx(1 / 20) and result.test == EXACT
    assert not result.pvalue < 0.05  # no marker at alpha .05
    # what crossmod printed before: the normal approximation marks it
    assert ranksums([0.90, 0.91, 0.92], [0.70, 0.71, 0.72], alternative="greater").pvalue == pytest.approx(0.0248, abs=1e-4)


def test_four_vs_four_complete_separation_is_one_split_in_seventy():
    assert rank_sum([5, 6, 7, 8], [1, 2, 3, 4]).pvalue == pytest.approx(1 / 70)
    assert rank_sum([1, 2, 3, 4], [5, 6, 7, 8], alternative="less").pvalue == pytest.approx(1 / 70)
    assert rank_sum([5, 6, 7, 8], [1, 2, 3, 4], alternative="two-sided").pvalue == pytest.approx(2 / 70)
    assert rank_sum([1, 2, 3, 4], [5, 6, 7, 8]).pvalue == pytest.approx(1.0)  # the wrong direction: every split is as large


def test_ties_by_enumerating_the_splits_by_hand():
    # x = .9 .8 .8, y = .8 .7. Pooled midranks: .7 → 1, the three .8 → 3, 3, 3, .9 → 5; x's rank sum 5 + 3 + 3 = 11.
    # The C(5, 3) = 10 ways to give x three of {1, 3a, 3b, 3c, 5}:
    #   {1, 3, 3} × 3 = 7    {1, 3, 5} × 3 = 9    {3, 3, 3} × 1 = 9    {3, 3, 5} × 3 = 11
    # Rank sum ≥ 11 in 3 of 10 splits.
    assert rank_sum([0.9, 0.8, 0.8], [0.8, 0.7]).pvalue == pytest.approx(3 / 10)
    # scipy's "exact" method uses the no-tie distribution of U: 2/10 here, an understated p-value
    assert mannwhitneyu([0.9, 0.8, 0.8], [0.8, 0.7], alternative="greater", method="exact").pvalue == pytest.approx(2 / 10)
    # x = .9 .8 .7, y = .7 .6 .5. Midranks: .5 → 1, .6 → 2, .7 → 3.5, 3.5, .8 → 5, .9 → 6; x's sum 14.5 of a total 21.
    # Sum ≥ 14.5 ⇔ y's three ranks sum ≤ 6.5: only {1, 2, 3.5} with either 3.5 → 2 of 20 splits.
    assert rank_sum([0.9, 0.8, 0.7], [0.7, 0.6, 0.5]).pvalue == pytest.approx(2 / 20)
    # the normal approximation marks this one
    assert ranksums([0.9, 0.8, 0.7], [0.7, 0.6, 0.5], alternative="greater").pvalue < 0.05


def test_a_single_value_against_a_group():
    # x = 3 against y = 1 2 4 (no ties): x's rank 3 is reached or beaten by ranks 3 and 4 of the 4 splits
    assert rank_sum([3.0], [1.0, 2.0, 4.0]).pvalue == pytest.approx(2 / 4)
    assert rank_sum([1.0, 2.0, 4.0], [3.0], alternative="less").pvalue == pytest.approx(2 / 4)
    assert rank_sum([2.0], [1.0]).pvalue == pytest.approx(1 / 2) and rank_sum([1.0], [1.0]).pvalue == pytest.approx(1.0)


def test_all_tied_is_no_evidence():
    assert rank_sum([0.7] * 6, [0.7] * 6).pvalue == pytest.approx(1.0)
    assert rank_sum([0.7] * 6, [0.7] * 6, alternative="two-sided").pvalue == pytest.approx(1.0)


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_equals_scipys_exact_distribution_without_ties(alternative):
    rng = np.random.default_rng(3)
    for n, m in [(2, 3), (3, 3), (4, 4), (5, 3), (6, 6), (7, 5)]:
        for _ in range(5):
            values = rng.permutation(n + m) + rng.normal(0, 0.1, n + m)  # distinct values, overlapping groups
            x, y = values[:n] + rng.integers(0, 3), values[n:]
            expected = mannwhitneyu(x, y, alternative=alternative, method="exact").pvalue
            assert rank_sum(x, y, alternative).pvalue == pytest.approx(expected, rel=1e-9), (x, y)


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_equals_the_enumeration_with_ties(alternative):
    rng = np.random.default_rng(4)
    for n, m in [(3, 3), (4, 4), (6, 6), (5, 4)]:
        for _ in range(5):
            x, y = rng.integers(0, 5, n) / 4, rng.integers(0, 4, m) / 4  # few distinct values: many ties
            assert rank_sum(x, y, alternative).pvalue == pytest.approx(enumerated_p(x, y, alternative), rel=1e-9), (x, y)


def test_large_groups_use_the_normal_approximation_and_say_so():
    assert math.comb(20, 10) <= EXACT_MAX_SPLITS < math.comb(22, 11)
    assert rank_sum_name(10, 10) == EXACT
    assert rank_sum_name(11, 11).startswith("one-sided Wilcoxon rank-sum (normal approximation")
    x, y = np.arange(11) + 5.0, np.arange(11, dtype=float)
    result = rank_sum(x, y)
    assert result.test == rank_sum_name(11, 11)
    assert result.pvalue == pytest.approx(mannwhitneyu(x, y, alternative="greater", method="asymptotic").pvalue)


def test_empty_group_is_nan_and_nan_values_are_refused():
    assert math.isnan(rank_sum([], [1.0, 2.0]).pvalue)
    with pytest.raises(ValueError, match="finite"):
        rank_sum([1.0, float("nan")], [0.5, 0.2])


def test_smallest_reachable_p_and_the_size_a_marker_needs():
    assert smallest_p(3, 3) == pytest.approx(1 / 20) and smallest_p(4, 4) == pytest.approx(1 / 70)
    assert smallest_p(6, 6) == pytest.approx(1 / 924) and smallest_p(2, 2, "two-sided") == pytest.approx(2 / 6)
    assert smallest_p(1, 1) == 0.5 and math.isnan(smallest_p(0, 3))
    assert needed_per_group(0.05) == 4 and needed_per_group(0.05, "two-sided") == 4
    assert needed_per_group(0.01) == 5  # 1/70 ≥ .01 > 1/252
    # the floor is what the test reaches on complete separation
    for k in range(1, 6):
        assert rank_sum(np.arange(k) + k, np.arange(k)).pvalue == pytest.approx(smallest_p(k, k))


def test_note_names_what_cannot_earn_a_marker():
    sizes = {"US": (3, 3), "DE": (3, 3), "MX": (5, 5), "IN": (2, 3), "CN": (0, 0)}
    note = unreachable_note(sizes, 0.05, unit="folds")
    assert note == (
        "No marker can be earned for IN: with 2 vs 3 folds the exact one-sided rank-sum test cannot go below p = 0.1; "
        "for US, DE: with 3 folds the exact one-sided rank-sum test cannot go below p = 0.05 "
        "(markers need ≥ 4 folds per group for p < 0.05)."
    )
    assert "with 1 run the exact" in unreachable_note({"US": (1, 1)}, 0.05)
    assert unreachable_note({"US": (4, 4), "DE": (6, 6)}, 0.05) is None
    assert describe([(6, 6), (5, 6)]) == EXACT
    assert describe([(6, 6), (12, 12)]) == f"{EXACT} or {rank_sum_name(12, 12)}"

"""Annotation statistics (Multi3Hate §4): α, χ², agreement, random annotator groups — against hand-computed values."""

from __future__ import annotations

import math
import time

import krippendorff
import numpy as np
import pytest
from scipy.stats import hypergeom

from crossmod.evaluation.annotation_stats import (
    agreement_levels,
    annotation_report,
    compare_with_random_groups,
    culture_alpha,
    culture_label_chi2,
    hate_shares,
    krippendorff_alpha,
    pairwise_agreement,
    random_group_agreement,
)

NAN = float("nan")


# ---------------------------------------------------------------------------------------- Krippendorff's α
def test_alpha_two_coders_with_a_missing_vote():
    # coder A: 0 1 1 0 1      units u1 (0,0) u2 (1,1) u3 (1,0) u4 (0,0) u5 (1, –): u5 has one value, not pairable.
    # coder B: 0 1 0 0 –      Coincidences (each pair of a unit with m_u = 2 values counts 1/(m_u − 1) = 1, both orders):
    #   o00 = 2 (u1) + 2 (u4) = 4,  o11 = 2 (u2),  o01 = o10 = 1 (u3);  n0 = 5, n1 = 3, n = 8.
    #   D_o = (o01 + o10) / n = 2/8;  D_e = 2·n0·n1 / (n(n − 1)) = 30/56;  α = 1 − D_o/D_e = 1 − 7/15 = 8/15.
    coders = [[0, 1, 1, 0, 1], [0, 1, 0, 0, NAN]]
    counts = np.array([[2, 0], [0, 2], [1, 1], [2, 0], [0, 1]])  # (non-hate, hate) votes per unit
    assert krippendorff_alpha(counts) == pytest.approx(8 / 15, abs=1e-12)
    assert krippendorff.alpha(reliability_data=coders, level_of_measurement="nominal") == pytest.approx(8 / 15, abs=1e-12)


def test_alpha_three_coders_with_missing_votes_from_culture_votes():
    # coder A: 1 1 0 –     u1 (1,1): m=2 → o11 += 2
    # coder B: 1 0 0 1     u2 (1,0,0): m=3, one 1 and two 0s → o01 = o10 += 1·2/2 = 1, o00 += 2·1/2 = 1
    # coder C: – 0 0 1     u3 (0,0,0): m=3 → o00 += 3·2/2 = 3;   u4 (1,1): m=2 → o11 += 2
    #   o00 = 4, o11 = 4, o01 = o10 = 1;  n0 = n1 = 5, n = 10.
    #   D_o = 2/10;  D_e = 2·5·5 / (10·9) = 5/9;  α = 1 − (1/5)/(5/9) = 1 − 9/25 = 16/25.
    coders = [[1, 1, 0, NAN], [1, 0, 0, 1], [NAN, 0, 0, 1]]
    votes = {"u1": {"US": (2, 2)}, "u2": {"US": (1, 3)}, "u3": {"US": (0, 3)}, "u4": {"US": (2, 2), "DE": (0, 1)}}
    alpha = culture_alpha(votes, ["US", "DE"])
    assert alpha["US"] == {"alpha": pytest.approx(16 / 25, abs=1e-12), "memes": 4, "votes": 10, "pairable_memes": 4}
    assert krippendorff.alpha(reliability_data=coders, level_of_measurement="nominal") == pytest.approx(16 / 25, abs=1e-12)
    assert alpha["DE"] == {"alpha": None, "memes": 1, "votes": 1, "pairable_memes": 0}  # one vote: nothing to pair


def test_alpha_is_undefined_without_disagreement_in_values():
    assert krippendorff_alpha(np.array([[3, 0], [2, 0]])) is None  # only one value used: D_e = 0
    assert krippendorff_alpha(np.array([[1, 0], [0, 1]])) is None  # no unit with two votes
    assert krippendorff_alpha(np.array([[3, 0], [0, 2]])) == pytest.approx(1.0, abs=1e-12)  # D_o = 0


# ---------------------------------------------------------------------------------------- final labels
# memes m1..m4 labelled by cultures A, B, C:  A 1 1 1 0 · B 1 0 0 0 · C 1 1 0 0
THREE = {
    "m1": {"A": 1, "B": 1, "C": 1},
    "m2": {"A": 1, "B": 0, "C": 1},
    "m3": {"A": 1, "B": 0, "C": 0},
    "m4": {"A": 0, "B": 0, "C": 0},
}


def test_shares_pairs_and_levels_of_final_labels():
    assert hate_shares(THREE, "ABC") == {"A": 0.75, "B": 0.25, "C": 0.5}
    assert pairwise_agreement(THREE, "ABC") == {"A-B": 0.5, "A-C": 0.75, "B-C": 0.75}
    # largest same-label group: m1 3, m2 2, m3 2, m4 3
    assert agreement_levels(THREE, "ABC") == {"memes": 4, "memes_incomplete": 0, "share": {"3": 0.5, "2": 0.5}}
    five = {
        "a": dict(zip("12345", [1, 1, 1, 1, 1])),  # 5 agree
        "b": dict(zip("12345", [0, 0, 0, 0, 1])),  # 4
        "c": dict(zip("12345", [1, 1, 0, 0, 0])),  # 3
        "d": dict(zip("12345", [0, 0, 0, 0, 0])),  # 5
        "e": dict(zip("12345", [0, 0, 0, None, 1])),  # a culture's label missing: left out, counted
    }
    assert agreement_levels(five, "12345") == {"memes": 4, "memes_incomplete": 1, "share": {"5": 0.5, "4": 0.25, "3": 0.25}}


def test_chi2_of_culture_by_label():
    # counts (non-hate, hate): A (1, 3), B (3, 1), C (2, 2); every expected count is 4·6/12 = 2
    # χ² = (1−2)²/2 + (3−2)²/2 + (3−2)²/2 + (1−2)²/2 + 0 + 0 = 2, dof = (3−1)(2−1) = 2, p = e^(−χ²/2) = e^(−1)
    chi2 = culture_label_chi2(THREE, "ABC")
    assert chi2["chi2"] == pytest.approx(2.0, abs=1e-12) and chi2["dof"] == 2
    assert chi2["p"] == pytest.approx(math.exp(-1), abs=1e-12)
    assert chi2["table"]["A"] == {"non_hate": 1, "hate": 3}
    nobody_hates = {m: {c: 0 for c in "ABC"} for m in THREE}
    assert culture_label_chi2(nobody_hates, "ABC")["chi2"] is None


# ---------------------------------------------------------------------------------------- random groups
def test_disjoint_groups_from_ten_balanced_votes_always_disagree():
    # 10 votes, 5 hate: the second group holds exactly the votes the first left, so its hate count is 5 − a
    # and the majorities (a ≥ 3 vs 5 − a ≥ 3) can never match; a unanimous meme always agrees → mean 0.5.
    agreements = random_group_agreement(np.array([5, 12]), np.array([10, 12]), repetitions=2_500, seed=3)
    assert agreements.shape == (2_500,) and np.all(agreements == 0.5)
    independent = random_group_agreement(np.array([5]), np.array([10]), repetitions=2_000, seed=3, disjoint=False)
    assert 0.3 < independent.mean() < 0.7  # with overlap allowed the groups agree about half of the time


def _agreement_probability(hate: int, total: int, size: int = 5) -> float:
    """P(two disjoint groups' majorities agree), enumerated with scipy's hypergeometric pmf."""
    majority, p = size // 2 + 1, 0.0
    for a in range(max(0, size - (total - hate)), min(size, hate) + 1):  # the hate counts the first group can hold
        first = hypergeom(total, hate, size).pmf(a)
        second = hypergeom(total - size, hate - a, size)
        same = second.sf(majority - 1) if a >= majority else second.cdf(majority - 1)
        p += first * same
    return p


def test_random_agreement_matches_the_exact_expectation_and_spread():
    hate, total = np.array([4, 9, 15, 20, 1]), np.array([12, 25, 25, 30, 10])
    p = np.array([_agreement_probability(h, t) for h, t in zip(hate, total)])
    agreements = random_group_agreement(hate, total, repetitions=30_000, seed=11)
    expected_std = math.sqrt(float(np.sum(p * (1 - p)))) / len(p)  # mean of independent Bernoulli(p_m) over memes
    assert abs(agreements.mean() - p.mean()) < 5 * expected_std / math.sqrt(len(agreements))
    assert agreements.std(ddof=1) == pytest.approx(expected_std, rel=0.03)
    again = random_group_agreement(hate, total, repetitions=30_000, seed=11)
    assert np.array_equal(agreements, again) and not np.array_equal(agreements, random_group_agreement(hate, total, seed=12))


def test_random_groups_of_a_full_dataset_are_vectorised():
    rng = np.random.default_rng(0)
    total = rng.integers(25, 36, size=300)
    hate = rng.binomial(total, 0.58)
    start = time.perf_counter()
    agreements = random_group_agreement(hate, total, repetitions=30_000, seed=0)
    elapsed = time.perf_counter() - start
    assert agreements.shape == (30_000,) and elapsed < 10, f"3e4 repetitions × 300 memes took {elapsed:.1f} s"


def test_random_groups_reject_bad_settings():
    with pytest.raises(ValueError, match="group_size must be odd"):
        random_group_agreement(np.array([3]), np.array([10]), group_size=4)
    with pytest.raises(ValueError, match="has 9 votes; random groups of 5 need 10"):
        random_group_agreement(np.array([3, 3]), np.array([12, 9]))


def test_sigma_deviations_and_normality():
    result = compare_with_random_groups(np.array([0.7, 0.8, 0.9]), {"US-IN": 0.6, "US-DE": 0.9, "DE-IN": None})
    assert result["mean"] == pytest.approx(0.8) and result["std"] == pytest.approx(0.1)  # sample std (ddof=1)
    assert result["pairs_sigma"] == {"US-IN": pytest.approx(-2.0), "US-DE": pytest.approx(1.0), "DE-IN": None}
    assert result["mean_of_pairs"] == {"agreement": pytest.approx(0.75), "sigma": pytest.approx(-0.5)}
    assert result["normaltest"] == {"statistic": None, "p": None}  # too few values for the test
    normal = compare_with_random_groups(np.random.default_rng(0).normal(0.79, 0.019, 30_000), {})
    assert normal["normaltest"]["p"] > 0.001 and normal["std"] == pytest.approx(0.019, rel=0.02)


def test_report_counts_memes_without_enough_votes_and_works_without_votes():
    labels = {"m1": {"US": 1, "DE": 0}, "m2": {"US": 0, "DE": 0}}
    votes = {"m1": {"US": (3, 5), "DE": (1, 5)}, "m2": {"US": (0, 4), "DE": (0, 4)}}  # m2: 8 pooled votes < 10
    report = annotation_report(labels, votes, ["US", "DE"], repetitions=100)
    groups = report.summary["random_groups"]
    assert groups["memes"] == 1 and groups["memes_too_few_votes"] == 1 and len(report.random_agreements) == 100
    bare = annotation_report(labels, None, ["US", "DE"])
    assert bare.summary["krippendorff_alpha"] is None and bare.random_agreements is None
    assert bare.summary["pairwise_agreement"] == {"US-DE": 0.5}

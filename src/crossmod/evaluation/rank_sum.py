"""Wilcoxon rank-sum (Mann-Whitney U) p-values that are exact for the small samples crossmod's markers compare.

Every significance marker crossmod prints (zero-shot: a culture's accuracies over the 6 prompts; culture
alignment: a head's AUROCs over 2–10 folds, seeds or runs) compares two groups of a handful of values. Why
neither scipy shortcut is used:

- ``scipy.stats.ranksums`` is the normal approximation (no tie or continuity correction). At 3 vs 3 with
  complete separation it gives one-sided p = .0248, but the exact distribution puts 1 split of 20 at that
  rank sum: p = 1/20 = .05. It marks results the data cannot support.
- ``scipy.stats.mannwhitneyu(method="exact")`` uses the exact distribution of U *without ties*; with ties
  (accuracies are k/n over the same memes, AUROCs of folds repeat, and a constant culture ties with itself)
  its p-value is not exact (scipy's documentation: "No correction is made for ties"). At .9 .8 .8 vs .8 .7 it
  gives 2/10 where 3 of the 10 splits reach the observed rank sum.

The rule used (:func:`rank_sum`): pool both groups, give every value its midrank (ties share the mean of their
ranks), and take the first group's rank sum W as the statistic (U = W - n(n+1)/2 orders every split the same way,
so the p-value is the same). The p-value is the share of all C(n+m, n) splits of the pooled values into groups of
sizes n and m whose W is at least the observed one (one-sided "greater"; "less" mirrored; "two-sided" is scipy's
``2·min(one-sided)``, capped at 1): ``scipy.stats.permutation_test(..., permutation_type="independent",
n_resamples=np.inf)``. That is the exact permutation distribution given the observed ties; without ties it equals
``mannwhitneyu(method="exact")``. The midranks are computed once on the pooled sample, so the test permutes the ranks
and sums them (the pooled ranks do not change when the values are re-split). A lone value against a group (which
``permutation_test`` refuses) has only n + m splits, counted directly.

Cost: the splits are enumerated. 924 at 6 vs 6, 184,756 at 10 vs 10 (about a second). Above
:data:`EXACT_MAX_SPLITS` (= 200,000 splits: every size up to 10 vs 10 is exact) the normal approximation with tie
and continuity correction (``mannwhitneyu(method="asymptotic")``) is used: both groups then hold 11 or more values
in crossmod (the groups come from the same prompts or runs, so their sizes match), where that approximation is
standard. The name of the test used is part of every result and goes into the reports.

The smallest p-value an exact test can reach is 1/C(n+m, n) one-sided (2/C(n+m, n) two-sided): 1/20 = .05 at
3 vs 3, 1/70 at 4 vs 4. When it is not below the threshold, no marker can be earned whatever the data;
:func:`unreachable_note` says so for the report instead of printing no marker silently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu, permutation_test, rankdata

EXACT_MAX_SPLITS = 200_000
ALTERNATIVES = ("greater", "less", "two-sided")


def _side(alternative: str) -> str:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    return "two-sided" if alternative == "two-sided" else "one-sided"


def is_exact(n: int, m: int) -> bool:
    """Whether groups of n and m values get the exact test (at most EXACT_MAX_SPLITS splits)."""
    return math.comb(n + m, n) <= EXACT_MAX_SPLITS


def rank_sum_name(n: int, m: int, alternative: str = "greater") -> str:
    """The name of the test :func:`rank_sum` runs for groups of n and m values, as the reports print it."""
    side = _side(alternative)
    if is_exact(n, m):
        return f"exact {side} Wilcoxon rank-sum (permutation over all splits)"
    return f"{side} Wilcoxon rank-sum (normal approximation with tie and continuity correction, more than {EXACT_MAX_SPLITS:,} splits)"


@dataclass(frozen=True)
class RankSum:
    """A p-value and the name of the test that gave it."""

    pvalue: float
    test: str


def _rank_sum_of_first(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return x.sum(axis=axis)


def _single_split_p(ranks: np.ndarray, n: int, alternative: str) -> float:
    """Exact p when one group holds a single value: the splits are which pooled value that is (N of them)."""
    if n == 1:
        sums = ranks  # x's rank sum for each choice of x's value
    else:  # m == 1: x holds all but one value, its rank sum is the total minus the lone value's rank
        sums = ranks.sum() - ranks
    observed = sums[0] if n == 1 else sums[-1]
    greater, less = float(np.mean(sums >= observed)), float(np.mean(sums <= observed))
    return {"greater": greater, "less": less, "two-sided": min(1.0, 2 * min(greater, less))}[alternative]


def rank_sum(x: Iterable[float], y: Iterable[float], alternative: str = "greater") -> RankSum:
    """Wilcoxon rank-sum test of x against y ("greater": x tends to be larger); exact up to EXACT_MAX_SPLITS splits.

    NaN values are not allowed (drop them first: which values count is the caller's decision). An empty group gives
    NaN. All values tied gives p = 1 (one-sided and two-sided).
    """
    x, y = np.asarray(list(x), dtype=float), np.asarray(list(y), dtype=float)
    n, m = x.size, y.size
    name = rank_sum_name(n, m, alternative)
    if n == 0 or m == 0:
        return RankSum(float("nan"), name)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("rank_sum needs finite values: drop NaN/inf before testing")
    if not is_exact(n, m):
        return RankSum(float(mannwhitneyu(x, y, alternative=alternative, method="asymptotic").pvalue), name)
    ranks = rankdata(np.concatenate([x, y]))  # midranks of the pooled sample: the same for every split
    if min(n, m) == 1:  # permutation_test wants 2+ values per group; a lone value has only n + m splits
        return RankSum(_single_split_p(ranks, n, alternative), name)
    result = permutation_test(
        (ranks[:n], ranks[n:]),
        _rank_sum_of_first,
        permutation_type="independent",
        n_resamples=np.inf,
        alternative=alternative,
        vectorized=True,
        batch=50_000,
    )
    return RankSum(min(float(result.pvalue), 1.0), name)


def smallest_p(n: int, m: int, alternative: str = "greater") -> float:
    """The smallest p-value the exact test can give with n vs m values: 1/C(n+m, n) one-sided, twice that two-sided
    (ties can only raise it). NaN when a group is empty."""
    if n <= 0 or m <= 0:
        return float("nan")
    return min(1.0, (2 if _side(alternative) == "two-sided" else 1) / math.comb(n + m, n))


def needed_per_group(alpha: float, alternative: str = "greater") -> int:
    """The fewest values per group (equal groups) with which the exact test can go below alpha."""
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    k = 1
    while smallest_p(k, k, alternative) >= alpha:
        k += 1
    return k


def describe(sizes: Iterable[tuple[int, int]], alternative: str = "greater") -> str:
    """The test(s) the given comparisons (n, m) use, as one phrase (several only when sizes straddle the threshold)."""
    names = list(dict.fromkeys(rank_sum_name(n, m, alternative) for n, m in sizes if n > 0 and m > 0))
    return " or ".join(names) if names else rank_sum_name(1, 1, alternative)


def unreachable_note(sizes: Mapping[str, tuple[int, int]], alpha: float, alternative: str = "greater", unit: str = "runs") -> str | None:
    """A sentence for the report when some comparisons cannot reach p < alpha whatever the data, else None.

    `sizes` maps what is marked (a meme language, a model head) to the sizes (n, m) of the groups its first marker
    (`*`, best vs lowest) compares; `unit` names what a value is ("prompts", "runs").
    """
    blocked = {label: (n, m) for label, (n, m) in sizes.items() if n > 0 and m > 0 and smallest_p(n, m, alternative) >= alpha}
    if not blocked:
        return None
    side = _side(alternative)
    parts = []
    for n, m in sorted(set(blocked.values())):
        labels = ", ".join(label for label, nm in blocked.items() if nm == (n, m))
        count = f"{n} {unit if n > 1 else unit.removesuffix('s')}" if n == m else f"{n} vs {m} {unit}"
        parts.append(f"for {labels}: with {count} the exact {side} rank-sum test cannot go below p = {smallest_p(n, m, alternative):.3g}")
    need = needed_per_group(alpha, alternative)
    return f"No marker can be earned {'; '.join(parts)} (markers need ≥ {need} {unit} per group for p < {alpha:g})."

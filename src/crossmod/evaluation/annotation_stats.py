"""Annotation statistics of a multi-culture dataset (Multi3Hate §4): how much each culture's annotators
agree, how differently cultures label, and whether culture pairs disagree more than random annotator groups.

Inputs are plain mappings, so any source with per-culture final labels and per-annotator votes can use them:
- ``labels[meme][culture]`` — the released (majority-vote) label 0/1, or None when missing;
- ``votes[meme][culture] = (hate, total)`` — that culture's raw hate votes and number of votes on the meme.

Choices made here (and why):
- Krippendorff's α (nominal) comes from the ``krippendorff`` package. For nominal data α depends only on how
  many votes of each value a meme received, not on who cast them, so it is computed from the per-meme
  ``(non-hate, hate)`` counts; memes with a single vote are not pairable and do not count (as in the formula).
- The χ² test of independence (culture × final label) is ``scipy.stats.chi2_contingency`` on the counts.
- Random annotator groups (the study's null model): for each meme, two groups of ``group_size`` votes are
  drawn without replacement from the meme's votes pooled over all cultures; each group's majority label
  is compared and agreement is averaged over memes; repeated ``repetitions`` times with a seeded generator.
  The number of hate votes in a draw without replacement is hypergeometric, so the draws are
  ``numpy.random.Generator.hypergeometric`` (exact, vectorised). By default the two groups are disjoint
  (the second is drawn from the votes the first left), as two cultures are disjoint sets of people;
  ``disjoint=False`` draws both groups from the full pool independently. σ is the sample std (ddof=1).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import krippendorff
import numpy as np
from scipy.stats import chi2_contingency, normaltest

Labels = Mapping[str, Mapping[str, int | None]]
Votes = Mapping[str, Mapping[str, tuple[int, int]]]

GROUP_SIZE = 5
REPETITIONS = 30_000
SEED = 0
_CHUNK = 1_000  # repetitions drawn at once: bounds memory; fixed, so a seed gives the same samples everywhere


def krippendorff_alpha(value_counts: np.ndarray) -> float | None:
    """Nominal α from a (memes × values) count matrix; None when undefined (no pairable votes, or one value only)."""
    counts = np.asarray(value_counts, dtype=float)
    pairable = counts[counts.sum(axis=1) >= 2]
    if pairable.size == 0 or np.count_nonzero(pairable.sum(axis=0)) < 2:
        return None
    return float(krippendorff.alpha(value_counts=pairable, value_domain=list(range(counts.shape[1])), level_of_measurement="nominal"))


def culture_alpha(votes: Votes, cultures: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per culture: α over its annotators' votes, with the memes and votes it rests on."""
    result = {}
    for culture in cultures:
        cells = [pools[culture] for pools in votes.values() if culture in pools and pools[culture][1] > 0]
        counts = np.array([[total - hate, hate] for hate, total in cells], dtype=float).reshape(-1, 2)
        result[culture] = {
            "alpha": krippendorff_alpha(counts),
            "memes": len(cells),
            "votes": int(counts.sum()),
            "pairable_memes": int((counts.sum(axis=1) >= 2).sum()),
        }
    return result


def hate_shares(labels: Labels, cultures: Sequence[str]) -> dict[str, float | None]:
    """Share of memes labelled hate by each culture (over the memes that culture labelled)."""
    return {c: _mean([m[c] for m in labels.values() if m.get(c) is not None]) for c in cultures}


def pairwise_agreement(labels: Labels, cultures: Sequence[str]) -> dict[str, float | None]:
    """Share of memes on which two cultures' final labels agree, for each pair `A-B`."""
    return {
        f"{a}-{b}": _mean([int(m[a] == m[b]) for m in labels.values() if m.get(a) is not None and m.get(b) is not None])
        for a, b in itertools.combinations(cultures, 2)
    }


def agreement_levels(labels: Labels, cultures: Sequence[str]) -> dict[str, Any]:
    """Share of memes whose largest group of cultures with the same label has size k (k = all … a majority).

    Only memes labelled by every culture count; how many were left out is reported.
    """
    complete = [[m[c] for c in cultures] for m in labels.values() if all(m.get(c) is not None for c in cultures)]
    largest = [max(sum(row), len(row) - sum(row)) for row in complete]
    sizes = range(len(cultures), (len(cultures) + 1) // 2 - 1, -1)
    return {
        "memes": len(complete),
        "memes_incomplete": len(labels) - len(complete),
        "share": {str(k): _mean([int(size == k) for size in largest]) for k in sizes},
    }


def culture_label_chi2(labels: Labels, cultures: Sequence[str]) -> dict[str, Any]:
    """χ² test of independence of culture × final label; None statistics when a label never occurs."""
    table = np.array([[sum(1 for m in labels.values() if m.get(c) == v) for v in (0, 1)] for c in cultures])
    result: dict[str, Any] = {"table": {c: {"non_hate": int(row[0]), "hate": int(row[1])} for c, row in zip(cultures, table)}}
    if len(cultures) < 2 or (table.sum(axis=0) == 0).any() or (table.sum(axis=1) == 0).any():
        return {**result, "chi2": None, "dof": None, "p": None, "reason": "a culture or a label has no memes"}
    test = chi2_contingency(table)
    return {**result, "chi2": float(test.statistic), "dof": int(test.dof), "p": float(test.pvalue)}


def random_group_agreement(
    hate: np.ndarray,
    total: np.ndarray,
    group_size: int = GROUP_SIZE,
    repetitions: int = REPETITIONS,
    seed: int = SEED,
    disjoint: bool = True,
) -> np.ndarray:
    """Agreement (share of memes) of two random groups' majority labels, once per repetition.

    ``hate[m]`` / ``total[m]``: pooled hate votes / votes of meme m. Every meme needs at least
    ``2 * group_size`` votes (``group_size`` when not disjoint).
    """
    hate, total = np.asarray(hate, dtype=np.int64), np.asarray(total, dtype=np.int64)
    if group_size % 2 == 0 or group_size < 1:
        raise ValueError(f"group_size must be odd (a majority of an even group can tie), got {group_size}")
    if hate.shape != total.shape or hate.ndim != 1 or not len(hate) or (hate < 0).any() or (hate > total).any():
        raise ValueError("hate and total must be equal-length, non-empty 1-D vote counts with 0 <= hate <= total")
    needed = 2 * group_size if disjoint else group_size
    if (total < needed).any():
        short = int(np.argmax(total < needed))
        raise ValueError(f"meme at position {short} has {int(total[short])} votes; random groups of {group_size} need {needed}")
    rng = np.random.default_rng(seed)
    non_hate, majority = total - hate, group_size // 2 + 1
    agreements = np.empty(repetitions)
    for start in range(0, repetitions, _CHUNK):
        shape = (min(_CHUNK, repetitions - start), len(hate))
        first = rng.hypergeometric(np.broadcast_to(hate, shape), np.broadcast_to(non_hate, shape), group_size)
        if disjoint:
            second = rng.hypergeometric(hate - first, non_hate - (group_size - first), group_size)
        else:
            second = rng.hypergeometric(hate, non_hate, group_size, size=shape)
        agreements[start : start + shape[0]] = ((first >= majority) == (second >= majority)).mean(axis=1)
    return agreements


def sigma_deviation(value: float | None, mean: float, std: float) -> float | None:
    """(value − mean) / std: how many standard deviations of the random distribution a value lies off."""
    if value is None or not std > 0:
        return None
    return (value - mean) / std


def compare_with_random_groups(agreements: np.ndarray, pairs: Mapping[str, float | None]) -> dict[str, Any]:
    """Mean, σ and D'Agostino–Pearson normality of the random agreements; each pair and the pairs' mean in σ."""
    mean = float(np.mean(agreements))
    std = float(np.std(agreements, ddof=1)) if len(agreements) > 1 else 0.0
    normality = normaltest(agreements) if len(agreements) >= 8 and std > 0 else None
    known = [v for v in pairs.values() if v is not None]
    pairs_mean = float(np.mean(known)) if known else None
    return {
        "mean": mean,
        "std": std,
        "normaltest": {
            "statistic": _finite(normality.statistic) if normality else None,
            "p": _finite(normality.pvalue) if normality else None,
        },
        "pairs_sigma": {pair: sigma_deviation(value, mean, std) for pair, value in pairs.items()},
        "mean_of_pairs": {"agreement": pairs_mean, "sigma": sigma_deviation(pairs_mean, mean, std)},
    }


@dataclass
class AnnotationReport:
    """The compact numbers (JSON-able, for the manifest) and the random-group samples (for the histogram)."""

    summary: dict[str, Any]
    random_agreements: np.ndarray | None = None


def annotation_report(
    labels: Labels,
    votes: Votes | None,
    cultures: Sequence[str],
    group_size: int = GROUP_SIZE,
    repetitions: int = REPETITIONS,
    seed: int = SEED,
    disjoint: bool = True,
) -> AnnotationReport:
    """Every statistic of the study's annotation analysis that the given labels and votes allow."""
    pairs = pairwise_agreement(labels, cultures)
    summary: dict[str, Any] = {
        "memes": len(labels),
        "cultures": list(cultures),
        "hate_share": hate_shares(labels, cultures),
        "pairwise_agreement": pairs,
        "agreement_levels": agreement_levels(labels, cultures),
        "chi2": culture_label_chi2(labels, cultures),
    }
    if not votes:
        summary["krippendorff_alpha"] = summary["random_groups"] = None
        summary["votes_note"] = "no per-annotator votes: α and the random-group comparison need them"
        return AnnotationReport(summary)
    summary["krippendorff_alpha"] = culture_alpha(votes, cultures)
    pooled = {m: [sum(p[c][i] for c in cultures if c in p) for i in (0, 1)] for m, p in votes.items()}
    needed = 2 * group_size if disjoint else group_size
    usable = sorted(m for m, (_, total) in pooled.items() if total >= needed)
    settings = {"group_size": group_size, "repetitions": repetitions, "seed": seed, "disjoint": disjoint}
    counts = {"memes": len(usable), "memes_too_few_votes": len(pooled) - len(usable), "votes_needed": needed}
    if not usable:
        summary["random_groups"] = {**settings, **counts, "reason": f"no meme has {needed} pooled votes"}
        return AnnotationReport(summary)
    hate, total = (np.array([pooled[m][i] for m in usable]) for i in (0, 1))
    agreements = random_group_agreement(hate, total, group_size, repetitions, seed, disjoint)
    summary["random_groups"] = {**settings, **counts, **compare_with_random_groups(agreements, pairs)}
    return AnnotationReport(summary, agreements)


def _mean(values: Sequence[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None

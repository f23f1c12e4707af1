"""A moderation policy's thresholds per culture, chosen on the selection split, and the decisions they give.

A policy names each action by the target it must meet on the memes it was chosen on, for example
`{act: {precision: 0.9}, review: {recall: 0.95}}`: act (remove) where the probability reaches the lowest threshold
whose precision is at least 0.9, which flags as many hateful memes as that precision allows; send to review down to
the highest threshold whose recall is at least 0.95, which reviews as few memes as that recall allows; allow the rest.
Each threshold is chosen on the selection split's labels and probabilities and comes with the counts it rests on
and a Wilson 95 % interval for the precision or recall reached there (scipy's `binomtest`). A target the split cannot
meet is said by name (`Unreachable`), never approximated. Applying the thresholds to the held-out memes, once, gives
the precision and recall reported beside them. Pure functions of arrays; the jobs read and write the files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

TARGETS = ("precision", "recall")
ACTIONS = ("act", "review")  # in order of severity; below both thresholds a meme is allowed
ALLOW = "allow"


@dataclass(frozen=True)
class Threshold:
    """A threshold that meets its target on the selection split, with what it rests on there."""

    action: str
    target: str
    goal: float
    threshold: float
    reached: float  # the precision or recall at the threshold on the selection split
    interval: tuple[float, float]  # Wilson 95 % interval of `reached`
    hits: int  # true positives at the threshold
    trials: int  # the memes flagged (precision) or the positives (recall)
    flagged: int  # memes at or above the threshold
    memes: int


@dataclass(frozen=True)
class Unreachable:
    """A target the selection split cannot meet, and why: no threshold is made up for it."""

    action: str
    target: str
    goal: float
    why: str


def check_policy(policy: Mapping[str, Mapping[str, float]]) -> None:
    """A policy maps actions (act, review) to exactly one target each (precision or recall) in (0, 1]."""
    if not isinstance(policy, Mapping) or not policy:
        raise ValueError(f"a policy maps actions {list(ACTIONS)} to a target, e.g. {{act: {{precision: 0.9}}}}, not {policy!r}")
    for action, target in policy.items():
        if action not in ACTIONS:
            raise ValueError(f"policy action {action!r} is not one of {list(ACTIONS)}")
        if not isinstance(target, Mapping) or len(target) != 1 or next(iter(target)) not in TARGETS:
            raise ValueError(f"policy.{action} names one target, precision or recall (e.g. {{precision: 0.9}}), not {target!r}")
        goal = next(iter(target.values()))
        if isinstance(goal, bool) or not isinstance(goal, (int, float)) or not 0 < goal <= 1:
            raise ValueError(f"policy.{action}.{next(iter(target))} is {goal!r}, not a number in (0, 1]")


def _wilson(hits: int, trials: int) -> tuple[float, float]:
    from scipy.stats import binomtest

    interval = binomtest(hits, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return float(interval.low), float(interval.high)


def _cumulative(labels: np.ndarray, probabilities: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct score, descending: the score, the positives and the memes at or above it."""
    order = np.argsort(-probabilities, kind="stable")
    scores, y = probabilities[order], labels[order]
    last = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]  # the last meme of each run of equal scores
    return scores[last], np.cumsum(y)[last], last + 1


def choose_threshold(labels: np.ndarray, probabilities: np.ndarray, action: str, target: str, goal: float) -> Threshold | Unreachable:
    """The threshold of one action on the selection split: precision → the lowest meeting it, recall → the highest."""
    y, p = np.asarray(labels, dtype=int), np.asarray(probabilities, dtype=float)
    positives = int(y.sum())
    if positives == 0:
        return Unreachable(action, target, goal, f"the selection split has no hateful meme among its {len(y)}")
    scores, hits, flagged = _cumulative(y, p)
    if target == "precision":
        met = np.flatnonzero(hits / flagged >= goal)
        if met.size == 0:
            best = float(np.max(hits / flagged))
            return Unreachable(action, target, goal, f"no threshold reaches precision {goal:g} on the selection split (at most {best:.3f})")
        index, trials = int(met[-1]), None
    else:
        met = np.flatnonzero(hits / positives >= goal)  # recall only grows as the threshold falls: the first is highest
        index, trials = int(met[0]), positives
    trials = int(flagged[index]) if trials is None else trials
    reached = int(hits[index]) / trials
    return Threshold(
        action, target, goal, float(scores[index]), reached, _wilson(int(hits[index]), trials), int(hits[index]), trials,
        int(flagged[index]), len(y),
    )  # fmt: skip


def choose_thresholds(
    labels: np.ndarray, probabilities: np.ndarray, policy: Mapping[str, Mapping[str, float]]
) -> dict[str, Threshold | Unreachable]:
    """Every action's threshold for one culture, on its selection split."""
    check_policy(policy)
    return {action: choose_threshold(labels, probabilities, action, *next(iter(policy[action].items()))) for action in ACTIONS if action in policy}


def cut_points(chosen: Mapping[str, Threshold | Unreachable]) -> dict[str, float | None]:
    """Each action's threshold, None where its target was unreachable."""
    return {action: c.threshold if isinstance(c, Threshold) else None for action, c in chosen.items()}


def decide(probabilities: np.ndarray, thresholds: Mapping[str, float | None]) -> np.ndarray:
    """act where the probability reaches act's threshold, else review where it reaches review's, else allow; an action
    without a threshold (its target unreachable) is never taken."""
    p = np.asarray(probabilities, dtype=float)
    decisions = np.full(p.shape, ALLOW, dtype=object)
    for action in reversed(ACTIONS):  # the more severe action wins where both thresholds are reached
        if thresholds.get(action) is not None:
            decisions[p >= thresholds[action]] = action
    return decisions


def held_out_rates(labels: np.ndarray, probabilities: np.ndarray, chosen: Threshold | float) -> dict[str, float | int | None]:
    """Precision and recall on the held-out memes at a threshold chosen on the selection split (or its value, as a fold
    result records it), applied once."""
    y, p = np.asarray(labels, dtype=int), np.asarray(probabilities, dtype=float)
    flagged = p >= (chosen.threshold if isinstance(chosen, Threshold) else float(chosen))
    hits = int((flagged & (y == 1)).sum())
    return {
        "precision": hits / int(flagged.sum()) if flagged.any() else None,
        "recall": hits / int(y.sum()) if y.any() else None,
        "flagged": int(flagged.sum()),
        "memes": len(y),
    }

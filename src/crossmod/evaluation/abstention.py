"""Which memes go to review: a disagreement score across the culture heads, and per culture the risk–coverage
curve of deciding only the memes it ranks least disputed, with its area (AURC), as pure functions.

Cultures judge one meme differently, so a meme on which the culture heads disagree is one a single decision serves
badly. Two parameter-free scores (nothing is fitted, so nothing can see the memes a score is reported on):
- `spread`: the standard deviation of the culture heads' probabilities for the meme (0: every culture agrees);
- `entropy`: the binary entropy, in bits, of their mean probability (the predicted vote split across cultures).

A culture's decisions are its probability ≥ the threshold its selection split chose. Deciding the k memes with the
lowest score first, the selective risk at coverage k/n is the error rate among them; AURC is the mean of the risks
over k = 1…n (Geifman, Uziel & El-Yaniv, "Bias-Reduced Uncertainty Estimation for Deep Neural Classifiers", ICLR 2019,
eq. 1). Two baselines stand beside it on the same memes: a random order (its expected AURC is the overall error
rate) and the oracle order (every wrong decision last), the lowest AURC these decisions allow. Ties in the score are
broken by meme id, so a curve is one order, not one of several.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

SCORES = ("spread", "entropy")


def disagreement(probabilities: Mapping[str, Sequence[float]], score: str = "spread") -> np.ndarray:
    """Per meme, how much the culture heads disagree: `spread` (std of their probabilities) or `entropy` (bits of
    their mean). `probabilities`: head → one probability per meme, every head over the same memes in one order."""
    if score not in SCORES:
        raise ValueError(f"a disagreement score is one of {list(SCORES)}, not {score!r}")
    if len(probabilities) < 2:
        raise ValueError(f"disagreement needs two culture heads or more, not {sorted(probabilities)}")
    matrix = np.asarray([np.asarray(p, dtype=float) for p in probabilities.values()])
    if score == "spread":
        return matrix.std(axis=0)
    mean = np.clip(matrix.mean(axis=0), 1e-12, 1 - 1e-12)
    return -(mean * np.log2(mean) + (1 - mean) * np.log2(1 - mean))


def risk_coverage(errors: Sequence[float], score: Sequence[float], ids: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(coverage k/n, selective risk among the k lowest-scored memes) for k = 1…n; ties broken by `ids` (or position)."""
    wrong, order_by = np.asarray(errors, dtype=float), np.asarray(score, dtype=float)
    if wrong.shape != order_by.shape or wrong.ndim != 1 or wrong.size == 0:
        raise ValueError(f"errors and scores must be two non-empty 1-D arrays of one length, not {wrong.shape} and {order_by.shape}")
    tie = np.arange(wrong.size) if ids is None else np.argsort(np.argsort(np.asarray(ids, dtype=object)))
    order = np.lexsort((tie, order_by))
    k = np.arange(1, wrong.size + 1)
    return k / wrong.size, np.cumsum(wrong[order]) / k


def aurc(errors: Sequence[float], score: Sequence[float], ids: Sequence[str] | None = None) -> float:
    """Area under the risk–coverage curve: the mean selective risk over k = 1…n."""
    return float(np.mean(risk_coverage(errors, score, ids)[1]))


def oracle_aurc(errors: Sequence[float]) -> float:
    """The lowest AURC these decisions allow: every correct one first."""
    wrong = np.sort(np.asarray(errors, dtype=float))
    k = np.arange(1, wrong.size + 1)
    return float(np.mean(np.cumsum(wrong) / k))


def culture_abstention(
    probabilities: Mapping[str, Mapping[str, float]],
    labels: Mapping[str, Mapping[str, int]],
    thresholds: Mapping[str, float],
    score: str = "spread",
) -> dict[str, dict[str, float]]:
    """Per culture with a threshold: AURC of its decisions ordered by the disagreement score (over the memes every
    head scored and this culture labelled), beside the random and oracle orders' and the risk at 80 % coverage."""
    heads = sorted(probabilities)
    common = sorted(set.intersection(*(set(probabilities[h]) for h in heads)))
    per_meme = disagreement({h: [probabilities[h][i] for i in common] for h in heads}, score)
    position = {meme: n for n, meme in enumerate(common)}
    rows: dict[str, dict[str, float]] = {}
    for head, threshold in thresholds.items():
        ids = [i for i in common if i in labels.get(head, {})]
        if not ids:
            continue
        decided = np.array([probabilities[head][i] >= threshold for i in ids], dtype=int)
        wrong = (decided != np.array([labels[head][i] for i in ids])).astype(float)
        order_by = per_meme[[position[i] for i in ids]]
        coverage, risk = risk_coverage(wrong, order_by, ids)
        at_80 = int(np.ceil(0.8 * len(ids))) - 1
        rows[head] = {
            "aurc": float(np.mean(risk)),
            "aurc_random": float(risk[-1]),  # a random order's expected AURC: the error rate, the risk at coverage 1
            "aurc_oracle": oracle_aurc(wrong),
            "risk_at_80_coverage": float(risk[at_80]),
            "memes": len(ids),
        }
    return rows


def abstention_on_test(threshold: Mapping[str, object] | None, test: tuple[Mapping, Mapping], score: str = "spread") -> dict[str, object] | None:
    """A run's abstention report: per culture the test stage's AURC when its memes are decided least disputed first,
    its decisions at the thresholds its validation (selection) split chose (`threshold`: the run's
    `selection_threshold`); None without two binary heads or without thresholds."""
    heads = (threshold or {}).get("heads") or {}  # type: ignore[union-attr]
    probabilities, labels = test
    if len(probabilities) < 2 or not heads:
        return None
    thresholds = {head: row["val_threshold"] for head, row in heads.items() if head in probabilities}
    per_head = culture_abstention(probabilities, labels, thresholds, score)
    if not per_head:
        return None
    names = ("aurc", "aurc_random", "aurc_oracle", "risk_at_80_coverage")
    return {
        "score": score,
        "rule": f"memes decided in order of the culture heads' {score} (lowest first; nothing fitted), each culture's "
        "decisions at the threshold its validation (selection) split chose; AURC = mean selective risk over k = 1…n",
        "heads": per_head,
        "mean": {name: float(np.mean([row[name] for row in per_head.values()])) for name in names},
    }

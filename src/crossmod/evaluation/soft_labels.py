"""How a culture's probabilities compare with its annotators' votes, and how far the cultures' predictions disagree
where their annotators did: the soft metrics (the LeWiDi shared tasks' cross-entropy against the vote share, and the
Jensen–Shannon divergence; Leonardelli et al., SemEval-2023 Task 11) beside AUROC, which sees only the majority.

Pure functions of arrays. A culture's vote share is its hate votes over its votes on a meme; memes without that
culture's votes are left out (NaN shares), never read as a share of 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.spatial.distance import jensenshannon
from scipy.stats import pearsonr, spearmanr

EPS = 1e-7  # probabilities are clipped to [EPS, 1 - EPS] before a log, as scikit-learn's log_loss does


def soft_scores(p: np.ndarray, share: np.ndarray) -> dict[str, Any]:
    """Over the memes with a vote share: the mean cross-entropy of `p` against the share (nats), the mean
    Jensen–Shannon divergence of the two Bernoulli distributions (base 2: 0 identical, 1 disjoint), and Pearson's r of
    `p` with the share (NaN when either is constant: no correlation is defined)."""
    p, share = np.asarray(p, dtype=float), np.asarray(share, dtype=float)
    voted = ~np.isnan(share)
    p, share = np.clip(p[voted], EPS, 1 - EPS), share[voted]
    if not len(share):
        return {"memes": 0, "cross_entropy": float("nan"), "jsd": float("nan"), "pearson": float("nan")}
    cross_entropy = -(share * np.log(p) + (1 - share) * np.log(1 - p))
    jsd = jensenshannon(np.stack([p, 1 - p]), np.stack([share, 1 - share]), base=2, axis=0) ** 2
    return {
        "memes": int(len(share)),
        "cross_entropy": float(cross_entropy.mean()),
        "jsd": float(jsd.mean()),
        "pearson": _correlation(pearsonr, p, share),
    }


def disagreement(p: np.ndarray, shares: np.ndarray) -> dict[str, Any]:
    """Per meme, the spread (population standard deviation) of the cultures' predicted probabilities and of their vote
    shares, over the memes every culture voted on (rows: memes, columns: cultures); Pearson's and Spearman's
    correlation of the two spreads, and their means: does the model disagree across cultures where people did?"""
    p, shares = np.asarray(p, dtype=float), np.asarray(shares, dtype=float)
    every = ~np.isnan(shares).any(axis=1) if shares.size else np.zeros(0, dtype=bool)
    predicted, annotated = p[every].std(axis=1), shares[every].std(axis=1)
    return {
        "memes": int(every.sum()),
        "cultures": int(shares.shape[1]) if shares.ndim == 2 else 0,
        "predicted_spread": float(predicted.mean()) if len(predicted) else float("nan"),
        "annotated_spread": float(annotated.mean()) if len(annotated) else float("nan"),
        "pearson": _correlation(pearsonr, predicted, annotated),
        "spearman": _correlation(spearmanr, predicted, annotated),
    }


def _correlation(test: Any, a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(test(a, b).statistic)

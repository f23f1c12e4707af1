"""RGCL's retrieval-based classifier: a meme's score from its nearest labelled neighbours.

score = Σ_r w_r · (2·y_r − 1) · s_r / Σ_r w_r over the k nearest neighbours (rank r = 1 … k, label y_r, cosine s_r),
with w_r = k − r + 1 (`rank`: the public code's "arithmetic" voting, weighted by rank and similarity) or w_r = 1
(`mean`). The score lies in [−1, 1]; the code predicts hateful where sigmoid(score) ≥ 0.5, i.e. score ≥ 0, and ranks
by the score for AUROC: it is returned as the head's logit, so every metric reads it like a classifier's.
"""

from __future__ import annotations

import torch

WEIGHTINGS = ("rank", "mean")


def knn_scores(similarities: torch.Tensor, neighbour_labels: torch.Tensor, weighting: str = "rank") -> torch.Tensor:
    """similarities, neighbour_labels (queries × k), neighbours nearest first; labels 0/1 (-1: not counted)."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"retrieval weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    k = similarities.shape[1]
    weights = (
        torch.arange(k, 0, -1, dtype=similarities.dtype, device=similarities.device)
        if weighting == "rank"
        else torch.ones_like(similarities[0])
    )
    weights = weights.expand_as(similarities) * (neighbour_labels >= 0)
    votes = (2 * neighbour_labels.clamp(min=0) - 1).to(similarities.dtype) * similarities
    return (weights * votes).sum(1) / weights.sum(1).clamp(min=torch.finfo(similarities.dtype).tiny)

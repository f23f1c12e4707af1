"""The retrieval-guided contrastive loss (RGCL; Mei et al., ACL 2024, arXiv 2311.08110) for one head's labels.

For anchor i with embedding g_i, its pseudo-gold positive g⁺ (most similar training meme with the same label, itself
excluded), its hard negative g⁻ (most similar with the other label) and the batch's memes of the other label:

    L_i = −log( e^{s(g_i,g⁺)/τ} / ( e^{s(g_i,g⁺)/τ} + e^{s(g_i,g⁻)/τ} + Σ_{j in batch, y_j ≠ y_i} e^{s(g_i,g_j)/τ} ) )

with s the cosine similarity and τ = 1 in the paper (its v1 eq. 3–7). `triplet` is the variant the public training
script runs (`--loss triplet`, margin 0.1): relu(mean_j s(g_i,g_j) + s(g_i,g⁻) − s(g_i,g⁺) + margin) over the same
sets. Anchors without a positive are left out; a missing hard negative or batch negative drops its term.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

LOSSES = ("nll", "triplet")


def rgcl_loss(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    has_positive: torch.Tensor,
    has_negative: torch.Tensor,
    kind: str = "nll",
    temperature: float = 1.0,
    margin: float = 0.1,
) -> torch.Tensor:
    """Mean RGCL loss over the anchors that have a positive (0, still attached to the graph, when none has).

    embeddings (B, D): the batch's embeddings (with gradient); labels (B,): 0/1, -1 unlabelled; positives and
    negatives (B, D): each anchor's retrieved bank embeddings (rows where `has_*` is False are ignored)."""
    if kind not in LOSSES:
        raise ValueError(f"RGCL loss kind must be one of {LOSSES}, got {kind!r}")
    anchors = has_positive & (labels >= 0)  # kept on the device: no host sync per step
    g = F.normalize(embeddings, dim=-1)
    positive = (g * F.normalize(positives, dim=-1)).sum(-1)
    negative = (g * F.normalize(negatives, dim=-1)).sum(-1)
    batch = g @ g.T
    labelled = labels >= 0
    other = labelled.unsqueeze(0) & labelled.unsqueeze(1) & (labels.unsqueeze(0) != labels.unsqueeze(1))
    if kind == "nll":
        terms = torch.cat(
            [
                positive.unsqueeze(1),
                negative.masked_fill(~has_negative, float("-inf")).unsqueeze(1),
                batch.masked_fill(~other, float("-inf")),
            ],
            dim=1,
        )
        loss = torch.logsumexp(terms / temperature, dim=1) - positive / temperature
    else:
        count = other.sum(1)
        in_batch = (batch * other).sum(1) / count.clamp(min=1)
        loss = F.relu(in_batch + negative * has_negative - positive + margin)
    return torch.where(anchors, loss, torch.zeros_like(loss)).sum() / anchors.sum().clamp(min=1)

"""The bank RGCL mines from and retrieval classifies with: the training memes' embeddings, ids and per-head labels.

One bank serves every head: the embedding space is shared, the labels are per culture (a head without a label for a
meme marks it -1). Built from the training folds only, so a fold run's held-out memes are never in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from crossmod.models.retrieval.knn_vote import knn_scores
from crossmod.models.retrieval.neighbours import cosine_similarities, mine, same_ids
from crossmod.models.retrieval.rgcl_loss import rgcl_loss


@dataclass(frozen=True)
class Bank:
    embeddings: torch.Tensor  # (N, D), L2-normalised
    labels: dict[str, torch.Tensor]  # head -> (N,) 0/1, -1 where the meme has no label for that head
    ids: list[str]

    @classmethod
    def of(cls, embeddings: torch.Tensor, labels: dict[str, torch.Tensor], ids: list[str]) -> Bank:
        if len(ids) != embeddings.shape[0] or any(v.shape != (len(ids),) for v in labels.values()):
            raise ValueError(f"a bank of {len(ids)} ids needs {len(ids)} embeddings and labels per head, got {tuple(embeddings.shape)}")
        if len(set(ids)) != len(ids):
            raise ValueError("a bank holds each meme once; its ids repeat")
        return cls(F.normalize(embeddings.detach(), dim=-1), {h: v.long() for h, v in labels.items()}, list(ids))

    def to(self, device: torch.device) -> Bank:
        """The bank on the device the model scores on (a loaded database starts on the host)."""
        return Bank(self.embeddings.to(device), {h: v.to(device) for h, v in self.labels.items()}, self.ids)


def rgcl_objective(
    embeddings: torch.Tensor,
    labels: dict[str, torch.Tensor],
    ids: list[str],
    bank: Bank,
    kind: str = "nll",
    temperature: float = 1.0,
    margin: float = 0.1,
    depth: int | None = None,
) -> torch.Tensor:
    """RGCL over every head the bank labels: each head mines its own pseudo-gold positive and hard negative by its own
    labels (a meme hateful to one culture and not to another is a positive for the first and a negative for the
    second), and the heads' losses are averaged over the heads that had an anchor with a positive."""
    similarities = cosine_similarities(embeddings.detach(), bank.embeddings, same_ids(ids, bank.ids, embeddings.device))
    losses, counted = [], []
    for head, bank_labels in bank.labels.items():
        head_labels = labels[head].long()
        positive, negative = mine(similarities, head_labels, bank_labels, depth)
        has_positive, has_negative = positive >= 0, negative >= 0
        losses.append(
            rgcl_loss(
                embeddings,
                head_labels,
                bank.embeddings[positive.clamp(min=0)],
                bank.embeddings[negative.clamp(min=0)],
                has_positive,
                has_negative,
                kind,
                temperature,
                margin,
            )
        )
        counted.append((has_positive & (head_labels >= 0)).any())
    weights = torch.stack(counted).to(embeddings.dtype)  # on the device: no host sync per step
    return (torch.stack(losses) * weights).sum() / weights.sum().clamp(min=1)


Neighbours = dict[str, tuple[torch.Tensor, torch.Tensor]]  # head -> (similarities, bank indices), nearest first


def nearest(embeddings: torch.Tensor, ids: list[str], bank: Bank, k: int) -> Neighbours:
    """Per head, the k nearest bank memes carrying that head's label, per query, nearest first: (similarities, bank
    indices); -inf similarity (index meaningless) where fewer than k are labelled. One similarity matrix serves every
    head. A meme is never its own neighbour."""
    if embeddings.shape[-1] != bank.embeddings.shape[-1]:
        raise ValueError(
            f"the retrieval database holds {bank.embeddings.shape[-1]}-d embeddings, this model makes {embeddings.shape[-1]}-d ones"
        )
    similarities = cosine_similarities(embeddings, bank.embeddings, same_ids(ids, bank.ids, embeddings.device))
    found = {}
    for head, bank_labels in bank.labels.items():
        top = similarities.masked_fill(bank_labels.unsqueeze(0) < 0, float("-inf")).topk(min(k, bank_labels.numel()), dim=1)
        found[head] = (top.values, top.indices)
    return found


def votes(found: Neighbours, bank: Bank, weighting: str = "rank") -> dict[str, torch.Tensor]:
    """Each head's retrieval score (RGCL's kNN vote, `knn_vote.knn_scores`) from its neighbours."""
    scores = {}
    for head, (values, indices) in found.items():
        neighbour_labels = torch.where(values > float("-inf"), bank.labels[head][indices], torch.full_like(indices, -1))
        scores[head] = knn_scores(values.clamp(min=-1.0), neighbour_labels, weighting)
    return scores


def retrieval_logits(embeddings: torch.Tensor, ids: list[str], bank: Bank, k: int, weighting: str = "rank") -> dict[str, torch.Tensor]:
    """Each head's retrieval score from the k nearest bank memes that carry that head's label."""
    return votes(nearest(embeddings, ids, bank, k), bank, weighting)


def explain(found: Neighbours, bank: Bank) -> dict[str, list[list[dict[str, object]]]]:
    """The neighbours that voted, per head and query, nearest first: id, that head's label and the similarity (what
    a retrieval classifier's decision can be audited by)."""
    explained: dict[str, list[list[dict[str, object]]]] = {}
    for head, (values, indices) in found.items():
        values_, indices_, labels = values.tolist(), indices.tolist(), bank.labels[head].tolist()
        explained[head] = [
            [
                {"id": bank.ids[i], "label": labels[i], "similarity": round(v, 4)}
                for v, i in zip(row_values, row_indices)
                if v > float("-inf")
            ]
            for row_values, row_indices in zip(values_, indices_)
        ]
    return explained

"""Exact cosine neighbours in a bank of labelled meme embeddings, and RGCL's mining of a pseudo-gold positive and a
hard negative among them.

RGCL's public code searches FAISS's exact inner-product index over L2-normalised vectors; that search is one
normalisation, one matmul and a top-k, done here in torch: exact, on the model's device, and without another native
library in the training process. At the sizes meme datasets come in (Hateful Memes: 8,500 × 1,024) it is a small
matmul per step. Ties between equal similarities break by bank order (FAISS may break them differently).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cosine_similarities(queries: torch.Tensor, bank: torch.Tensor, excluded: torch.Tensor | None = None) -> torch.Tensor:
    """(queries × bank) cosine similarities; `excluded` (same shape, True = never a neighbour) set to -inf."""
    similarities = F.normalize(queries, dim=-1) @ F.normalize(bank, dim=-1).T
    return similarities if excluded is None else similarities.masked_fill(excluded, float("-inf"))


def same_ids(query_ids: list[str], bank_ids: list[str], device: torch.device | None = None) -> torch.Tensor:
    """True where a query and a bank entry are the same meme: the paper takes positives from G \\ {g_i}."""
    index = {meme_id: n for n, meme_id in enumerate(bank_ids)}
    mask = torch.zeros(len(query_ids), len(bank_ids), dtype=torch.bool, device=device)
    for row, meme_id in enumerate(query_ids):
        if meme_id in index:
            mask[row, index[meme_id]] = True
    return mask


def mine(
    similarities: torch.Tensor, labels: torch.Tensor, bank_labels: torch.Tensor, depth: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per query, the bank index of its pseudo-gold positive (the most similar entry with the query's label) and of its
    hard negative (the most similar entry with another label), -1 where there is none. `depth`: look only among the
    `depth` nearest entries (the public code searches the top 12), None: the whole bank (the paper's argmax over G).
    Unlabelled queries and entries (label -1) take part in neither role; excluded entries (-inf) are never picked."""
    order = similarities.argsort(dim=1, descending=True, stable=True)
    if depth is not None:
        order = order[:, :depth]
    reachable = similarities.gather(1, order) > float("-inf")
    neighbour_labels = bank_labels[order]
    labelled = (labels >= 0).unsqueeze(1) & (neighbour_labels >= 0) & reachable
    same = labelled & (neighbour_labels == labels.unsqueeze(1))
    other = labelled & (neighbour_labels != labels.unsqueeze(1))
    return _first(order, same), _first(order, other)


def _first(order: torch.Tensor, hits: torch.Tensor) -> torch.Tensor:
    """The bank index of each row's first hit in `order`, -1 for rows without one."""
    first = hits.int().argmax(dim=1)  # argmax returns the first maximum
    found = order.gather(1, first.unsqueeze(1)).squeeze(1)
    return torch.where(hits.any(dim=1), found, torch.full_like(found, -1))

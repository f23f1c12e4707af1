"""One output per label head (culture or task), and the masked loss that skips unannotated items."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from datamodules.heads import label_mask, parse_heads


class ClassificationHeads(nn.Module):
    """All heads as one linear layer (one matmul per step), split into named logits afterwards."""

    def __init__(self, in_dim: int, heads: dict[str, dict[str, Any]], dropout: float = 0.0) -> None:
        super().__init__()
        self.specs = {name: dict(spec) for name, spec in heads.items()}
        self.widths = [head.width for head in parse_heads(self.specs).values()]
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(in_dim, sum(self.widths))

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.linear(self.dropout(features)).split(self.widths, dim=-1)
        return {name: chunk.squeeze(-1) if spec["kind"] == "binary" else chunk for (name, spec), chunk in zip(self.specs.items(), logits)}


def masked_loss(logits: torch.Tensor, target: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean loss over annotated items and their count, without host syncs (no boolean indexing)."""
    mask = label_mask(target).float()
    if kind == "binary":
        per_item = F.binary_cross_entropy_with_logits(logits, target.clamp(min=0).float(), reduction="none")
    elif kind == "multiclass":
        per_item = F.cross_entropy(logits, target.clamp(min=0).long(), reduction="none")
    else:
        per_item = F.binary_cross_entropy_with_logits(logits, target.clamp(min=0).float(), reduction="none").mean(-1)
    count = mask.sum()
    return (per_item * mask).sum() / count.clamp(min=1.0), count

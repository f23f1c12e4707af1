"""The linear layers behind the label heads (one output per culture or task), and the masked loss that
skips unannotated items."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from crossmod.data.heads import Head, label_mask


class HeadLayers(nn.Module):
    """All heads as one linear layer (one matmul per step), split into named logits afterwards.

    Its state dict is `linear.weight` / `linear.bias`, rows in head order (`Head.width` rows each).
    """

    def __init__(self, in_dim: int, heads: dict[str, Head], dropout: float = 0.0) -> None:
        super().__init__()
        self.heads = dict(heads)
        self.widths = [head.width for head in self.heads.values()]
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(in_dim, sum(self.widths))

    def rows(self, name: str) -> slice:
        """The rows of `linear` that produce head `name`'s logits."""
        start = 0
        for head, width in zip(self.heads, self.widths):
            if head == name:
                return slice(start, start + width)
            start += width
        raise KeyError(f"{name!r} is not a head of these layers (heads: {list(self.heads)})")

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """Features in the layer's own dtype (DeepSpeed's bf16 casts the weights, while a backbone may hand
        float32 features), logits in float32 for the loss and the metrics."""
        logits = self.linear(self.dropout(features.to(self.linear.weight.dtype))).float().split(self.widths, dim=-1)
        return {name: chunk.squeeze(-1) if head.is_binary else chunk for (name, head), chunk in zip(self.heads.items(), logits)}


def masked_loss(logits: torch.Tensor, target: torch.Tensor, head: Head) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean loss over annotated items and their count, without host syncs (no boolean indexing)."""
    mask = label_mask(target).float()
    if head.kind == "multiclass":
        per_item = F.cross_entropy(logits, target.clamp(min=0).long(), reduction="none")
    else:  # binary, or multilabel: one sigmoid per label, averaged over the labels
        per_item = F.binary_cross_entropy_with_logits(logits, target.clamp(min=0).float(), reduction="none")
        if head.kind == "multilabel":
            per_item = per_item.mean(-1)
    count = mask.sum()
    return (per_item * mask).sum() / count.clamp(min=1.0), count

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


class GroupHeadLayers(HeadLayers):
    """One linear output per annotator group of each culture head (Davani et al., TACL 2022, "Dealing with
    Disagreements": a head per annotator, or here per group of annotators, over shared features), and each culture's
    logit the logit of its groups' mean probability: what metrics, predictions and decisions read.

    `groups`: `<head>|<grouping>=<value>` keys in row order; every head must have at least one group, and only binary
    heads can. Its state dict is HeadLayers' (`linear.weight` / `linear.bias`), one row per group, and `rows(head)` is
    the head's groups' rows (LP-FT starts each from its culture's probe)."""

    def __init__(self, in_dim: int, heads: dict[str, Head], groups: list[str], dropout: float = 0.0) -> None:
        nn.Module.__init__(self)
        from crossmod.data.heads import GROUP_SEPARATOR

        self.heads, self.groups = dict(heads), list(groups)
        owners = [key.split(GROUP_SEPARATOR, 1)[0] for key in self.groups]
        lacking = [name for name in self.heads if name not in owners]
        if lacking or any(not head.is_binary for head in self.heads.values()) or set(owners) - set(self.heads):
            raise ValueError(
                f"annotator groups need binary heads, each with at least one group: {lacking or sorted(set(owners) - set(self.heads))} "
                f"have none or are no heads (groups: {self.groups[:5]}…)"
            )
        self.owners = owners
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(in_dim, len(self.groups))
        membership = torch.zeros(len(self.heads), len(self.groups))
        for column, owner in enumerate(owners):
            membership[list(self.heads).index(owner), column] = 1.0
        self.register_buffer("mean_of_groups", membership / membership.sum(1, keepdim=True), persistent=False)

    def rows(self, name: str) -> list[int]:
        """The rows of `linear` that produce head `name`'s groups' logits."""
        if name not in self.heads:
            raise KeyError(f"{name!r} is not a head of these layers (heads: {list(self.heads)})")
        return [row for row, owner in enumerate(self.owners) if owner == name]

    def group_logits(self, features: torch.Tensor) -> torch.Tensor:
        """[memes, groups] logits in float32."""
        return self.linear(self.dropout(features.to(self.linear.weight.dtype))).float()

    def forward(self, features: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each culture's logit: log p − log(1 − p) of p, the mean of its groups' probabilities (clamped off 0 and 1)."""
        probabilities = torch.sigmoid(self.group_logits(features))
        p = (probabilities @ self.mean_of_groups.T.to(probabilities.dtype)).clamp(1e-6, 1 - 1e-6)
        logits = torch.log(p) - torch.log1p(-p)
        return {name: logits[:, k] for k, name in enumerate(self.heads)}


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

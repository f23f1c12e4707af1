"""Hugging Face text encoders (BERT, XLM-R, MiniLM …) pooled to one vector per text."""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel

from crossmod.models.activation_checkpointing import enable_activation_checkpointing
from crossmod.models.model_folders import refuse_shipped_code


class HFTextEncoder(nn.Module):
    """Any local folder or hub id loadable with `AutoModel`; CLS or mean pooling."""

    def __init__(
        self,
        name_or_path: str,
        pooling: str = "cls",
        freeze: bool = False,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        if pooling not in ("cls", "mean"):
            raise ValueError(f"text pooling must be 'cls' or 'mean', got {pooling!r}")
        refuse_shipped_code(name_or_path)
        self.model = AutoModel.from_pretrained(name_or_path, trust_remote_code=False)
        self.model.train()  # from_pretrained returns eval mode; Lightning keeps whatever mode it finds
        if getattr(self.model, "pooler", None) is not None:
            self.model.pooler = None  # never used (we pool last_hidden_state); unused weights break DDP
        self.pooling = pooling
        self.output_dim = int(self.model.config.hidden_size)
        if gradient_checkpointing:
            enable_activation_checkpointing(self.model)
        if freeze:
            self.model.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.pool(hidden, attention_mask)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """CLS (first position) or mean over the real tokens."""
        if self.pooling == "cls":
            return hidden[:, 0]
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)

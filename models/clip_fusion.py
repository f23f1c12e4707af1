"""CLIP fusion (Hate-CLIPper): CLIP's text and image embeddings combined by feature interaction.

Both embeddings pass a trainable projection and are L2-normalised; `cross` takes their outer
product (the feature interaction matrix, projection_dim² features), `align` their element-wise
product; an MLP follows. CLIP itself is frozen by default, as in the study.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoModel

from models.fusion import mlp


def _features(output: torch.Tensor | object) -> torch.Tensor:
    """`get_*_features` returns a tensor (older transformers) or an output whose pooler_output is projected."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


class CLIPFusion(nn.Module):
    def __init__(
        self,
        name_or_path: str,
        interaction: str = "cross",
        projection_dim: int = 64,
        hidden_dim: int = 512,
        num_layers: int = 1,
        dropout: float = 0.1,
        freeze: bool = True,
    ) -> None:
        super().__init__()
        if interaction not in ("cross", "align"):
            raise ValueError(f"clip_fusion interaction must be 'cross' or 'align', got {interaction!r}")
        self.clip = AutoModel.from_pretrained(name_or_path, trust_remote_code=False)
        self.clip.train()
        if freeze:
            self.clip.requires_grad_(False)
        width = self.clip.config.projection_dim
        self.text_projection = nn.Sequential(nn.Linear(width, projection_dim), nn.Dropout(dropout))
        self.image_projection = nn.Sequential(nn.Linear(width, projection_dim), nn.Dropout(dropout))
        self.interaction = interaction
        fused = projection_dim * projection_dim if interaction == "cross" else projection_dim
        self.mlp, self.output_dim = mlp(fused, hidden_dim, num_layers, dropout)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        text = _features(self.clip.get_text_features(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]))
        image = _features(self.clip.get_image_features(pixel_values=batch["pixel_values"]))
        text = F.normalize(self.text_projection(text), dim=-1)
        image = F.normalize(self.image_projection(image), dim=-1)
        fused = torch.einsum("bi,bj->bij", image, text).flatten(1) if self.interaction == "cross" else image * text
        return self.mlp(fused)

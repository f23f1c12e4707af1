"""Feature extractors per model family: text only, image only, and concat fusion.

Each takes the collated batch and returns one feature vector per item for the shared heads.
"""

from __future__ import annotations

import torch
from torch import nn

from models.backbones.image import TimmImageEncoder
from models.backbones.text import HFTextEncoder


class TextOnly(nn.Module):
    def __init__(self, text: HFTextEncoder) -> None:
        super().__init__()
        self.text = text
        self.output_dim = text.output_dim

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.text(batch["input_ids"], batch["attention_mask"])


class ImageOnly(nn.Module):
    def __init__(self, image: TimmImageEncoder) -> None:
        super().__init__()
        self.image = image
        self.output_dim = image.output_dim

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.image(batch["pixel_values"])


class ConcatFusion(nn.Module):
    """Pooled text ‖ pooled image → MLP: the Hateful Memes "Concat BERT" family."""

    def __init__(self, text: HFTextEncoder, image: TimmImageEncoder, hidden_dim: int = 256, num_layers: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.text, self.image = text, image
        # Each modality is normalised before concatenation so neither dominates by scale alone.
        self.text_norm, self.image_norm = nn.LayerNorm(text.output_dim), nn.LayerNorm(image.output_dim)
        layers: list[nn.Module] = []
        width = text.output_dim + image.output_dim
        for _ in range(num_layers):
            layers += [nn.Linear(width, hidden_dim), nn.GELU(), nn.Dropout(dropout)]
            width = hidden_dim
        self.mlp = nn.Sequential(*layers)
        self.output_dim = width

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        text = self.text(batch["input_ids"], batch["attention_mask"])
        image = self.image(batch["pixel_values"])
        return self.mlp(torch.cat([self.text_norm(text), self.image_norm(image)], dim=-1))

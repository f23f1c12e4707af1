"""timm image encoders and the evaluation transform taken from the backbone's own data config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import timm
import torch
from timm.data import create_transform, resolve_data_config
from torch import nn
from torch.nn import functional as F


class TimmImageEncoder(nn.Module):
    """Any timm model name, classifier removed, returning pooled features."""

    def __init__(self, model_name: str, pretrained: bool = False, freeze: bool = False, **kwargs: Any) -> None:
        super().__init__()
        self.model = timm.create_model(model_name, pretrained=pretrained, num_classes=0, **kwargs)
        self.output_dim = int(self.model.num_features)
        if freeze:
            self.model.requires_grad_(False)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values)

    def tokens(self, pixel_values: torch.Tensor, num_tokens: int) -> torch.Tensor:
        """The unpooled feature map as `num_tokens` region vectors (B, num_tokens, C): MMBT's "grid" input.

        CNN maps (B, C, H, W) are average-pooled to a square grid; ViT-like token sequences drop their
        prefix (class/register) tokens and are pooled along the sequence.
        """
        features = self.model.forward_features(pixel_values)
        if features.dim() == 4:
            side = int(round(num_tokens**0.5))
            if side * side != num_tokens:
                raise ValueError(f"a CNN grid needs a square number of image tokens, got {num_tokens}")
            return F.adaptive_avg_pool2d(features, side).flatten(2).transpose(1, 2)
        patches = features[:, getattr(self.model, "num_prefix_tokens", 0) :]
        return F.adaptive_avg_pool1d(patches.transpose(1, 2), num_tokens).transpose(1, 2)


def timm_transform(model_name: str, input_size: int | None = None) -> Callable:
    """PIL → normalised tensor with the model's own mean/std/interpolation (input size overridable)."""
    pretrained_cfg = timm.models.get_pretrained_cfg(model_name)
    if pretrained_cfg is None:
        raise ValueError(f"timm knows no model named {model_name!r}")
    data_cfg = resolve_data_config(pretrained_cfg=pretrained_cfg.to_dict())
    if input_size is not None:
        data_cfg["input_size"] = (3, input_size, input_size)
        data_cfg["crop_pct"] = 1.0
    return create_transform(**data_cfg, is_training=False)

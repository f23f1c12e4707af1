"""timm image encoders and the evaluation transform taken from the backbone's own data config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import timm
import torch
from timm.data import create_transform, resolve_data_config
from torch import nn


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

"""Transformers' activation checkpointing under whichever name the installed version gives it."""

from __future__ import annotations

from typing import Any

from torch import nn


def enable_activation_checkpointing(model: nn.Module, kwargs: dict[str, Any] | None = None) -> None:
    """`activation_checkpointing_enable` (Transformers 5.x), or `gradient_checkpointing_enable` where it is the only name."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable(kwargs)

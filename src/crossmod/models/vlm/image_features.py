"""A VLM's projected image features, computed apart from the language model and passed back in.

Transformers (≥ 5.18) lets every image-text-to-text family take its image features precomputed:
`forward(..., mm_encoder_outputs={"image": <what get_image_features returns>})` skips the vision tower and
the projector and merges the given features itself (placeholder scatter, Qwen's M-RoPE, Qwen3-VL's
deepstack, Gemma 3's bidirectional image attention unchanged); `generate` takes the same argument. So
features cached per image reproduce the tower's forward exactly (tests/models/test_vision_cache.py).

What differs between families is only the layout of `get_image_features`' output: a sequence with one
tensor per image (Qwen, LLaVA-OneVision), one per batch row (Idefics3, SmolVLM), or one tensor whose
leading dimension counts images or tiles (Gemma 3, InternVL). Features are split per image by that
layout, or by each row's image-token count when every row shows one image; a batch that fits neither
(several tiled images in one row) is not cached (`split_per_image` returns None).

Kept on the cached path: everything the language model reads besides pixels (`image_grid_thw` and
`mm_token_type_ids` for Qwen's positions, `token_type_ids` for Gemma 3's image attention); dropping
those would be silently wrong. Dropped: the tensors only the tower reads.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

# Batch entries only the vision tower (or its pre-processing) reads; the forward refuses pixels and features together.
PIXEL_ONLY = frozenset({"pixel_values", "pixel_attention_mask", "image_sizes", "batch_num_images"})
# One image's features as stored: "image" (tokens, hidden), and Qwen3-VL's deepstack levels "deepstack.<i>".
ImageEntry = dict[str, torch.Tensor]


@dataclass
class CachedImageFeatures(BaseModelOutputWithPooling):
    """`get_image_features`' output rebuilt from stored entries; `deepstack_features` only for Qwen3-VL."""

    deepstack_features: list[Any] | None = None


def image_token_id(config: Any) -> int:
    """The id of the placeholder token the image features replace."""
    for name in ("image_token_id", "image_token_index"):
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ValueError(f"{type(config).__name__} names no image token id (image_token_id / image_token_index)")


def encode(base: nn.Module, inputs: dict[str, torch.Tensor]) -> Any:
    """`get_image_features` of the batch's images, its inputs picked by its signature (as `generate` picks them)."""
    parameters = inspect.signature(base.get_image_features).parameters
    return base.get_image_features(**{k: v for k, v in inputs.items() if k in parameters}, return_dict=True)


def _per_image(output: Any, images: int) -> list[torch.Tensor] | None:
    """The output's own per-image pieces, each (tokens, hidden), when its layout has one piece per image."""
    if isinstance(output, torch.Tensor):
        pieces = list(output) if output.dim() == 3 and output.shape[0] == images else None
    else:
        pieces = list(output) if len(output) == images else None
    return None if pieces is None else [p.reshape(-1, p.shape[-1]) for p in pieces]


def _flat(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output.reshape(-1, output.shape[-1])
    return torch.cat([p.reshape(-1, p.shape[-1]) for p in output], dim=0)


def split_per_image(output: Any, image_tokens_per_row: Sequence[int], images_per_row: Sequence[int]) -> list[ImageEntry] | None:
    """One entry per image in batch order, or None when the layout cannot be cut per image (then nothing is cached)."""
    images = sum(images_per_row)
    levels = {"image": output.pooler_output}
    for i, level in enumerate(getattr(output, "deepstack_features", None) or []):
        levels[f"deepstack.{i}"] = level
    split: dict[str, list[torch.Tensor]] = {}
    for name, level in levels.items():
        pieces = _per_image(level, images)
        if pieces is None and all(n == 1 for n in images_per_row):
            pieces = list(torch.split(_flat(level), list(image_tokens_per_row), dim=0))
        if pieces is None or sum(p.shape[0] for p in pieces) != sum(image_tokens_per_row):
            return None
        split[name] = pieces
    return [{name: pieces[i] for name, pieces in split.items()} for i in range(images)]


def layout(output: Any) -> str:
    """How the family's forward reads the features: `sequence` (one tensor per image or row: Qwen, LLaVA-OneVision, and
    Idefics3/SmolVLM from Transformers 5.21), `blocks:<n>` (one tensor of n-token tiles or images: Gemma 3, InternVL, and
    Idefics3/SmolVLM before 5.21, whose merger cuts the features into tiles by that second dimension) or `tensor` (one
    flat tensor)."""
    features = output.pooler_output
    if not isinstance(features, torch.Tensor):
        return "sequence"
    return f"blocks:{features.shape[1]}" if features.dim() == 3 else "tensor"


LAYOUT = re.compile(r"sequence|tensor|blocks:[1-9][0-9]{0,6}")


def assemble(entries: Sequence[ImageEntry], layout: str) -> CachedImageFeatures:
    """The batch's features in the layout the family's forward merges (entries in placeholder order)."""

    def level(name: str) -> Any:
        pieces = tuple(entry[name] for entry in entries)
        if layout == "sequence":
            return pieces
        flat = torch.cat(pieces, dim=0)
        return flat.view(-1, int(layout.split(":")[1]), flat.shape[-1]) if layout.startswith("blocks:") else flat

    deepstack = sorted((n for n in entries[0] if n.startswith("deepstack.")), key=lambda n: int(n.split(".")[1]))
    return CachedImageFeatures(pooler_output=level("image"), deepstack_features=[level(n) for n in deepstack] or None)


def without_pixels(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch's model inputs with the tower-only tensors removed (what goes beside `mm_encoder_outputs`)."""
    return {k: v for k, v in inputs.items() if k not in PIXEL_ONLY}

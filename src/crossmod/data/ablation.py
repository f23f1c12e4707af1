"""Modality ablations (`data.ablate=image|text`): every meme loses one input as it is read, for training and
evaluation alike, whatever the model. The caption becomes empty; the image becomes one uniform grey picture (kept,
not removed, so models that need an image still run and see nothing). A model trained and scored this way can only
reach what the other modality allows: the proof that both modalities reach the classifier."""

from __future__ import annotations

import io
from functools import cache
from typing import Any

from PIL import Image

from crossmod.data.sample import decode_shard_entry

ABLATIONS = ("image", "text")


@cache
def grey_image() -> bytes:
    """A 64×64 mid-grey PNG: no edge, colour or text for an encoder to read."""
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (127, 127, 127)).save(buffer, format="PNG")
    return buffer.getvalue()


def check_ablation(ablate: str | None) -> None:
    if ablate is not None and ablate not in ABLATIONS:
        raise ValueError(f"data.ablate={ablate!r}: expected one of {list(ABLATIONS)} (or null: both modalities)")


class DecodeAblated:
    """A shard entry → the sample record, with the ablated modality removed (picklable for loader workers)."""

    def __init__(self, ablate: str | None) -> None:
        check_ablation(ablate)
        self.ablate = ablate

    def __call__(self, entry: dict[str, Any]) -> dict[str, Any]:
        record = decode_shard_entry(entry)
        if self.ablate == "text":
            record["text"] = ""
        elif self.ablate == "image":
            record["image"] = grey_image()
        return record

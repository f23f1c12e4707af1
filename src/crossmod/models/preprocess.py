"""Turn raw sample dicts into model inputs: per sample in loader workers, then one batched collate.

Images are decoded and resized per sample (in workers) and normalised once per batch
(src/crossmod/models/pixels.py); texts are tokenized once per batch with the fast tokenizer; labels become one
tensor per head with -1 where the head was not annotated.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image
from transformers import AutoImageProcessor, AutoTokenizer

from crossmod.data.heads import HeadSpecs, group_counts, group_votes, head_votes, label_tensors, parse_heads, vote_shares
from crossmod.models.model_folders import refuse_shipped_code

if TYPE_CHECKING:
    from crossmod.models.pixels import PixelPipeline


class HFImagePixels:
    """A Hugging Face image processor (e.g. CLIP's) with PixelPipeline's interface: its own per-image
    resize and normalisation, batches stacked; picklable for workers."""

    def __init__(self, name_or_path: str) -> None:
        refuse_shipped_code(name_or_path)
        self.processor = AutoImageProcessor.from_pretrained(name_or_path, trust_remote_code=False)

    def decode(self, data: bytes) -> Image.Image:
        return Image.open(io.BytesIO(data)).convert("RGB")

    def image(self, image: Image.Image) -> torch.Tensor:
        return self.processor(images=image, return_tensors="pt")["pixel_values"][0]

    def batch(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.stack(list(images))


class MemePreprocessor:
    """Preprocessor for the text / image / concat families (tokenizer and/or timm transform)."""

    def __init__(
        self,
        heads: HeadSpecs,
        tokenizer: str | None = None,
        max_length: int = 64,
        image_model: str | None = None,
        image_size: int | None = None,
        image_processor: str | None = None,
        draft_decode: bool = False,
    ) -> None:
        """`draft_decode`: decode JPEGs at a reduced DCT scale that still covers the model's input size:
        faster, but it changes what the model sees (src/crossmod/models/pixels.py); validate it per dataset."""
        if tokenizer is None and image_model is None and image_processor is None:
            raise ValueError("a preprocessor needs a tokenizer, an image model (timm) or image processor (HF), or both")
        if image_model and image_processor:
            raise ValueError("give image_model (timm transform) or image_processor (Hugging Face folder), not both")
        self.heads = parse_heads(heads)
        self.max_length = max_length
        self.groups: list[str] | None = None  # the annotator groups whose votes batches carry (set by annotator_groups)
        if tokenizer:
            refuse_shipped_code(tokenizer)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer, trust_remote_code=False) if tokenizer else None
        self.pixels: PixelPipeline | HFImagePixels | None = None
        if image_model:
            # imported here: timm and torchvision add ~40 MiB to every process that imports them
            # (bench/vlm_training.py), and text and VLM models never use them
            from crossmod.models.backbones.image import timm_transform
            from crossmod.models.pixels import PixelPipeline

            self.pixels = PixelPipeline(timm_transform(image_model, image_size), draft=draft_decode)
        elif image_processor:
            self.pixels = HFImagePixels(image_processor)
            crop = getattr(self.pixels.processor, "crop_size", None) or {}
            image_size = image_size or crop.get("height")
        self.image_size = image_size

    @property
    def needs(self) -> frozenset[str]:
        """The meme inputs this model reads: text with a tokenizer, the image with a pixel pipeline."""
        return frozenset({"text"} if self.tokenizer is not None else set()) | frozenset({"image"} if self.pixels is not None else set())

    def length(self, sample: dict[str, Any]) -> int:
        """Tokens the meme's text takes in a batch (truncated as `collate` truncates); images are one size,
        so they add no padding (`data.group_by_length` sorts by this)."""
        if self.tokenizer is None:
            return 0
        return len(self.tokenizer(sample["text"], truncation=True, max_length=self.max_length)["input_ids"])

    def _pixels(self, sample: dict[str, Any]) -> torch.Tensor:
        data = sample.get("image")
        if data is None:  # text-only item: a placeholder keeps every rank calling the vision tower
            return self.pixels.image(Image.new("RGB", (self.image_size or 224,) * 2))
        try:
            return self.pixels.image(self.pixels.decode(data))
        except Exception as error:  # noqa: BLE001 - re-raised with the sample named
            raise ValueError(f"sample {sample.get('id')}: image cannot be decoded ({error})") from error

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        features: dict[str, Any] = {"id": sample["id"], "labels": sample["labels"], "votes": head_votes(sample)}
        if self.groups is not None:  # annotator_groups: the votes of its groups
            features["group_votes"] = group_votes(sample)
        if self.tokenizer is not None:
            features["text"] = sample["text"]
        if self.pixels is not None:
            features["pixel_values"] = self._pixels(sample)
        return features

    def collate(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch: dict[str, Any] = {"ids": [f["id"] for f in features]}
        if self.tokenizer is not None:
            tokens = self.tokenizer(
                [f["text"] for f in features], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            )
            batch["input_ids"], batch["attention_mask"] = tokens["input_ids"], tokens["attention_mask"]
        if self.pixels is not None:
            batch["pixel_values"] = self.pixels.batch([f["pixel_values"] for f in features])
        batch["labels"] = label_tensors(features, self.heads)
        batch["vote_shares"] = vote_shares(features, self.heads)
        if self.groups is not None:
            batch["group_votes"] = group_counts(features, self.groups)
        return batch

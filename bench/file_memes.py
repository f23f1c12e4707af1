"""The baseline of the data-loading benchmark: memes stored as one JPEG + one JSON file each, read by a
map-style dataset, as a training script without crossmod would do it.

`ConventionalPreprocessing` is the textbook per-sample path with the model's own pieces: PIL decodes the
whole image, timm's eval transform (resize, crop, ToTensor, normalise) runs per image, the texts are
tokenized once per batch (the same fast-tokenizer call crossmod makes), labels become one tensor per head.
It produces the same model inputs as crossmod's `MemePreprocessor(draft_decode=False)` (tested in
tests/test_bench_smoke.py), so the two loaders differ only in storage, decoding and batching.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from crossmod.data.heads import head_votes, label_tensors, vote_shares


class ConventionalPreprocessing:
    """Per-image full decode + timm transform; batched tokenization; per-head label and vote-share tensors."""

    def __init__(self, model_preprocessor) -> None:
        self.heads = model_preprocessor.heads
        self.tokenizer, self.max_length = model_preprocessor.tokenizer, model_preprocessor.max_length
        self.transform = model_preprocessor.pixels.per_image  # timm's Resize → CenterCrop → ToTensor → Normalize

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        with Image.open(io.BytesIO(sample["image"])) as image:
            pixel_values = self.transform(image.convert("RGB"))
        return {"id": sample["id"], "labels": sample["labels"], "votes": head_votes(sample), "text": sample["text"], "pixel_values": pixel_values}

    def collate(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        tokens = self.tokenizer(
            [f["text"] for f in features], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {
            "ids": [f["id"] for f in features],
            "input_ids": tokens["input_ids"],
            "attention_mask": tokens["attention_mask"],
            "pixel_values": torch.stack([f["pixel_values"] for f in features]),
            "labels": label_tensors(features, self.heads),
            "vote_shares": vote_shares(features, self.heads),  # NaN where a meme carries no votes (these memes: none)
        }


class FileMemes:
    """Map-style dataset: meme i is `<root>/<i>.jpg` plus `<root>/<i>.json`, turned into model inputs."""

    def __init__(self, root: Path, count: int, preprocessor) -> None:
        self.root, self.count, self.preprocessor = root, count, preprocessor

    def __len__(self) -> int:
        return self.count

    def read(self, index: int) -> dict[str, Any]:
        record = json.loads((self.root / f"{index:06d}.json").read_bytes())
        record["image"] = (self.root / f"{index:06d}.jpg").read_bytes()
        return record

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.preprocessor(self.read(index))


def write_files(samples: list, root: Path) -> None:
    root.mkdir(parents=True)
    for index, sample in enumerate(samples):
        entry = sample.to_shard_entry(f"{index:09d}")  # the shard's own JSON bytes and image bytes
        (root / f"{index:06d}.json").write_bytes(entry["json"])
        (root / f"{index:06d}.jpg").write_bytes(entry["jpg"])


def file_loader(root: Path, preprocessor, batch_size: int, workers: int, memes: int):
    from torch.utils.data import DataLoader

    return DataLoader(
        FileMemes(root, memes, preprocessor),
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        collate_fn=preprocessor.collate,
        num_workers=workers,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,  # as MemeDataModule._loader
    )


def evict(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache (fsync, then POSIX_FADV_DONTNEED): only the benchmark's own
    files, so other jobs on the machine are not touched. The next read goes to the disk (on a VM, the host
    may still cache it: a lower bound on the cost of really cold or networked storage)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

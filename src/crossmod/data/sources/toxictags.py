"""ToxicTags: imgflip memes with title, OCR text and social tags; toxic (stage I) and toxic type (stage II).

No public release exists, so crossmod defines the layout (docs/datasets.md): `toxictags.jsonl`
beside an `images/` folder, one line per meme:
`{"id", "image": "images/x.jpg", "title", "ocr_text", "tags": [...], "label", "split"}` with
`label` in normal | hateful | dangerous | offensive | undecided and `split` in train | val | test.
Heads: `toxic` (stage I) = label ≠ normal; `toxic_type` (stage II) is the study's four-way question
hateful / dangerous / offensive / normal (its Stage II prompt lists all four), None for undecided memes:
toxic memes whose type the annotators did not settle, so they count for stage I and are masked for
stage II, as the study excludes them there.
The study has no dev split: `val_share` moves a stable, id-hashed share of train to `val`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from crossmod.data.sample import Label
from crossmod.data.sources.images import MAX_IMAGE_BYTES
from crossmod.data.sources.jsonl_memes import Invalid, JsonlMemeSource, string_list, text_field

TOXIC_TYPES = ["hateful", "dangerous", "offensive"]
STAGE2_CLASSES = [*TOXIC_TYPES, "normal"]  # the classes of head `toxic_type`, in this order
LABELS = ("normal", *TOXIC_TYPES, "undecided")


def stable_fraction(key: str) -> float:
    """A number in [0, 1) fixed by the key alone: the same split on every machine and rerun."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64


class ToxicTagsSource(JsonlMemeSource):
    """Converts the documented ToxicTags layout; `include_tags` appends the tags to the text input."""

    name = "toxictags"
    version = 2  # 2: toxic_type is four-way (normal is a class, not masked)
    file = "toxictags.jsonl"
    heads = {"toxic": {"kind": "binary"}, "toxic_type": {"kind": "multiclass", "classes": STAGE2_CLASSES}}

    def __init__(
        self,
        raw_dir: str | Path,
        include_tags: bool = False,
        tags_prefix: str = "Tags: ",
        val_share: float = 0.1,
        on_error: str = "raise",
        max_image_bytes: int = MAX_IMAGE_BYTES,
    ) -> None:
        super().__init__(raw_dir, on_error, max_image_bytes)
        if not 0 <= val_share < 1:
            raise ValueError(f"toxictags: val_share must be in [0, 1), got {val_share}")
        self.include_tags, self.tags_prefix, self.val_share = bool(include_tags), tags_prefix, float(val_share)

    def options(self) -> dict[str, Any]:
        return {**super().options(), "include_tags": self.include_tags, "tags_prefix": self.tags_prefix, "val_share": self.val_share}

    def convert(self, item: dict[str, Any]) -> tuple[str, dict[str, Label], dict[str, Any]]:
        label = item.get("label")
        if label not in LABELS:
            raise Invalid(f"label {label!r} is not one of {list(LABELS)}")
        title, ocr = text_field(item, "title"), text_field(item, "ocr_text")
        tags = string_list(item, "tags")
        parts = [part for part in (title, ocr) if part]
        if parts and self.include_tags and tags:
            parts.append(self.tags_prefix + ", ".join(tags))
        labels: dict[str, Label] = {
            "toxic": int(label != "normal"),
            "toxic_type": STAGE2_CLASSES.index(label) if label in STAGE2_CLASSES else None,
        }
        return "\n".join(parts), labels, {"title": title, "ocr_text": ocr, "tags": tags, "label": label}

    def assign_split(self, sample_id: str, split: str) -> str:
        if split == "train" and self.val_share and stable_fraction(sample_id) < self.val_share:
            return "val"
        return split

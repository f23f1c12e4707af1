"""The Sample record every source produces, and its on-shard encoding."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from crossmod.data.heads import Head

Label = int | list[int] | None

IMAGE_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "jpg": (b"\xff\xd8\xff",),
    "png": (b"\x89PNG\r\n\x1a\n",),
    "webp": (b"RIFF",),
}
IMAGE_EXTENSIONS = tuple(IMAGE_SIGNATURES)


class SampleError(ValueError):
    """A sample that cannot be stored as given; the message names the sample and the reason."""


def sniff_image_format(data: bytes) -> str | None:
    """Return the shard extension for encoded image bytes, or None when the bytes are no known image."""
    for ext, signatures in IMAGE_SIGNATURES.items():
        if any(data.startswith(sig) for sig in signatures):
            if ext == "webp" and data[8:12] != b"WEBP":
                continue
            return ext
    return None


@dataclass
class Sample:
    """One meme or post: text, optional original image bytes, one label per head (None = not annotated)."""

    id: str
    group: str
    lang: str
    text: str
    image: bytes | None
    labels: dict[str, Label]
    split: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def validate(self, heads: dict[str, Head]) -> None:
        """Check the record against the dataset's heads; raise SampleError naming the sample otherwise."""
        if not self.id:
            raise SampleError("sample without id")
        unknown = set(self.labels) - set(heads)
        if unknown:
            raise SampleError(f"sample {self.id}: labels for unknown heads {sorted(unknown)}")
        for name, head in heads.items():
            value = self.labels.get(name)
            if value is None:
                continue
            n = head.width
            if head.is_binary and value not in (0, 1):
                raise SampleError(f"sample {self.id}: head {name} is binary but label is {value!r}")
            if head.kind == "multiclass" and (not isinstance(value, int) or not 0 <= value < n):
                raise SampleError(f"sample {self.id}: head {name} expects a class index < {n}, got {value!r}")
            if head.kind == "multilabel" and (not isinstance(value, list) or len(value) != n or any(v not in (0, 1) for v in value)):
                raise SampleError(f"sample {self.id}: head {name} expects a multi-hot list of {n}, got {value!r}")
        if self.image is not None and sniff_image_format(self.image) is None:
            raise SampleError(f"sample {self.id}: image bytes are not JPEG, PNG or WebP")

    def to_shard_entry(self, key: str) -> dict[str, Any]:
        """Encode for a WebDataset tar: `<key>.json` holds every field but the image, which keeps its bytes."""
        record = asdict(self)
        record.pop("image")
        entry: dict[str, Any] = {"__key__": key, "json": json.dumps(record, ensure_ascii=False).encode("utf-8")}
        if self.image is not None:
            entry[sniff_image_format(self.image)] = self.image
        return entry


def decode_shard_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Turn a raw WebDataset entry back into a Sample-shaped dict (image bytes or None)."""
    try:
        record = json.loads(entry["json"])
    except (KeyError, ValueError) as error:  # no record member, or one that is not UTF-8 JSON
        problem = "has no .json record" if isinstance(error, KeyError) else f"has a .json record that is not JSON ({error})"
        raise SampleError(f"shard {entry.get('__url__')}: sample {entry.get('__key__')} {problem}") from None
    if not isinstance(record, dict):
        raise SampleError(f"shard {entry.get('__url__')}: sample {entry.get('__key__')} has a .json record that is not an object")
    record["image"] = next((entry[ext] for ext in IMAGE_EXTENSIONS if ext in entry), None)
    return record

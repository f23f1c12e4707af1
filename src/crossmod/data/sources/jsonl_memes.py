"""Shared reader for the documented one-jsonl-plus-images layouts (ToxicTags, MemeBridge).

Each line holds `id`, `image` (a path relative to raw_dir), `split` and the dataset's own fields;
a subclass turns the fields into text, labels and meta. Ids, image files and split names are
checked here, once, with the same messages for every such dataset.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossmod.data.paths import OutsideRoot, resolve_within
from crossmod.data.sample import Label, Sample
from crossmod.data.sources.base import RawDataError, RawSource
from crossmod.data.sources.images import MAX_IMAGE_BYTES, ImageFinder, load_image
from crossmod.data.sources.readers import clean_id, read_jsonl


class Invalid(ValueError):
    """A field of one line is outside the dataset's scheme; the message says which and why."""


def text_field(item: dict[str, Any], key: str) -> str:
    """A string field, stripped; absent or null is empty; anything else is invalid."""
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Invalid(f"'{key}' must be a string, got {value!r}")
    return value.strip()


def string_list(item: dict[str, Any], key: str) -> list[str]:
    """A list of strings (absent or null is empty)."""
    value = item.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Invalid(f"'{key}' must be a list of strings, got {value!r}")
    return [v.strip() for v in value if v.strip()]


class JsonlMemeSource(RawSource):
    """Base of jsonl + images converters: subclasses set `file`, `splits` and implement `convert`."""

    file: str = "memes.jsonl"
    splits: tuple[str, ...] = ("train", "val", "test")
    text_required: bool = True

    def __init__(self, raw_dir: str | Path, on_error: str = "raise", max_image_bytes: int = MAX_IMAGE_BYTES) -> None:
        super().__init__(raw_dir, on_error, max_image_bytes)
        self.path = self.raw_dir / self.file
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.name}: {self.path} does not exist; expected layout in docs/datasets.md")
        self.images = ImageFinder(self.raw_dir)

    def options(self) -> dict[str, Any]:
        return {"max_image_bytes": self.max_image_bytes}

    def annotation_files(self) -> list[Path]:
        return [self.path]

    def convert(self, item: dict[str, Any]) -> tuple[str, dict[str, Label], dict[str, Any]]:
        """Return (text, labels, meta) for one line, or raise Invalid."""
        raise NotImplementedError

    def assign_split(self, sample_id: str, split: str) -> str:
        """The split a sample goes to (a hook for carving a validation split)."""
        return split

    def records(self) -> Iterator[Sample | RawDataError]:
        for row in read_jsonl(self.path):
            if row.problem:
                yield self.error(self.path, row.problem, row.line)
                continue
            try:
                yield self._sample(row.values, row.line)
            except Invalid as problem:
                yield self.error(self.path, str(problem), row.line)

    def _sample(self, item: dict[str, Any], line: int) -> Sample | RawDataError:
        meme_id = clean_id(item.get("id"))
        if meme_id is None:
            raise Invalid("missing or empty 'id'")
        split = item.get("split")
        if split not in self.splits:
            raise Invalid(f"id {meme_id}: split {split!r} is not one of {list(self.splits)}")
        text, labels, meta = self.convert(item)
        if self.text_required and not text and not self.text_from_image:
            raise Invalid(f"id {meme_id}: empty text")
        reference = item.get("image")
        if not isinstance(reference, str) or not reference.strip():
            raise Invalid(f"id {meme_id}: 'image' must be a path relative to the dataset folder, got {reference!r}")
        try:
            exact = resolve_within(self.raw_dir, reference, "'image' path")
        except OutsideRoot as error:
            raise Invalid(f"id {meme_id}: {error}") from None
        image_path, problem = self.images.find(exact.parent, exact.stem, exact=exact)
        image, problem = (None, problem) if problem else load_image(image_path, self.max_image_bytes)
        if problem:
            raise Invalid(f"id {meme_id}: {problem}")
        lang = text_field(item, "lang") or "en"
        if not re.fullmatch(r"[a-z]{2}", lang):
            raise Invalid(f"id {meme_id}: language code {lang!r} is not an ISO 639-1 code like 'en'")
        sample_id = f"{self.name}/{meme_id}"
        duplicate = self.claim_id(sample_id, self.path, line)
        if duplicate:
            return duplicate
        return Sample(
            id=sample_id,
            group=sample_id,
            lang=lang,
            text=text,
            image=image,
            labels=labels,
            split=self.assign_split(sample_id, split),
            meta={**meta, "image_file": self.rel(image_path), "source_split": split},
        )

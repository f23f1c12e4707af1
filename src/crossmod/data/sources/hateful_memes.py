"""Hateful Memes (Facebook AI): jsonl splits + `img/`, one binary head `hateful`.

Layout: `train.jsonl`, `dev_seen.jsonl`, `test_seen.jsonl`, `dev_unseen.jsonl`, `test_unseen.jsonl`
(first release: `dev.jsonl`, `test.jsonl`) and `img/*.png`. A line is
`{"id": 1235, "img": "img/01235.png", "label": 0|1, "text": "…"}`; `label` may be absent or null in
unlabeled test files (the head is then masked). Only one split scheme is read, because the seen and
unseen dev sets share memes. Each meme is its own fold group: benign confounders carry no link.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossmod.data.paths import OutsideRoot, resolve_within
from crossmod.data.sample import Sample
from crossmod.data.sources.base import RawDataError, RawSource
from crossmod.data.sources.images import MAX_IMAGE_BYTES, ImageFinder, load_image
from crossmod.data.sources.readers import clean_id, read_jsonl

SPLIT_SCHEMES: dict[str, dict[str, str]] = {
    "seen": {"train": "train.jsonl", "val": "dev_seen.jsonl", "test": "test_seen.jsonl"},
    "unseen": {"train": "train.jsonl", "val": "dev_unseen.jsonl", "test": "test_unseen.jsonl"},
    "phase1": {"train": "train.jsonl", "val": "dev.jsonl", "test": "test.jsonl"},
}


def parse_binary(value: Any) -> tuple[int | None, str | None]:
    """0/1 (also "0"/"1"); None when absent; anything else is outside the scheme."""
    if value is None or value == "":
        return None, None
    if isinstance(value, bool):
        return None, f"label {value!r} is not 0 or 1"
    if isinstance(value, int | float) and value in (0, 1):
        return int(value), None
    if isinstance(value, str) and value.strip() in ("0", "1"):
        return int(value.strip()), None
    return None, f"label {value!r} is not 0 or 1"


class HatefulMemesSource(RawSource):
    """Converts one split scheme of the Hateful Memes release (seen by default)."""

    name = "hateful_memes"
    version = 1
    heads = {"hateful": {"kind": "binary"}}

    def __init__(
        self, raw_dir: str | Path, splits: str | dict[str, str] = "seen", on_error: str = "raise", max_image_bytes: int = MAX_IMAGE_BYTES
    ) -> None:
        super().__init__(raw_dir, on_error, max_image_bytes)
        if isinstance(splits, str):
            if splits not in SPLIT_SCHEMES:
                raise ValueError(
                    f"hateful_memes: unknown split scheme {splits!r}; choose from {sorted(SPLIT_SCHEMES)} or give a mapping split → file"
                )
            self.splits = dict(SPLIT_SCHEMES[splits])
        else:
            self.splits = {str(k): str(v) for k, v in dict(splits).items()}
        for split, file in self.splits.items():
            resolve_within(self.raw_dir, file, f"split file ({split})")
            if not (self.raw_dir / file).is_file():
                present = sorted(p.name for p in self.raw_dir.glob("*.jsonl"))
                raise FileNotFoundError(
                    f"hateful_memes: {self.raw_dir / file} (split {split}) does not exist; jsonl files there: {present}. "
                    f"Choose data.source.splits from {sorted(SPLIT_SCHEMES)} (phase1 = dev.jsonl/test.jsonl) or map split → file"
                )
        self.images = ImageFinder(self.raw_dir)

    def options(self) -> dict[str, Any]:
        return {"splits": self.splits, "max_image_bytes": self.max_image_bytes}

    def annotation_files(self) -> list[Path]:
        return [self.raw_dir / file for file in self.splits.values()]

    def records(self) -> Iterator[Sample | RawDataError]:
        for split, file in self.splits.items():
            path = self.raw_dir / file
            for row in read_jsonl(path):
                if row.problem:
                    yield self.error(path, row.problem, row.line)
                else:
                    yield self._sample(row.values, split, path, row.line)

    def _sample(self, item: dict[str, Any], split: str, path: Path, line: int) -> Sample | RawDataError:
        meme_id = clean_id(item.get("id"))
        if meme_id is None:
            return self.error(path, "missing or empty 'id'", line)
        label, problem = parse_binary(item.get("label"))
        if problem:
            return self.error(path, problem, line)
        text = item.get("text")
        if text is None and self.text_from_image:
            text = ""
        if not isinstance(text, str) or not (text.strip() or self.text_from_image):
            return self.error(path, f"empty or missing 'text' for id {meme_id}", line)
        image, problem = self._image(item.get("img"), meme_id)
        if problem:
            return self.error(path, problem, line)
        duplicate = self.claim_id(f"hateful_memes/{meme_id}", path, line)
        if duplicate:
            return duplicate
        return Sample(
            id=f"hateful_memes/{meme_id}",
            group=f"hateful_memes/{meme_id}",
            lang="en",
            text=text.strip(),
            image=image,
            labels={"hateful": label},
            split=split,
            meta={"file": path.name, "img": item.get("img")},
        )

    def _image(self, reference: Any, meme_id: str) -> tuple[bytes | None, str | None]:
        if reference is None:
            path, problem = self.images.find(self.raw_dir / "img", meme_id)
        elif not isinstance(reference, str) or not reference.strip():
            return None, f"'img' must be a relative path like img/01235.png, got {reference!r}"
        else:
            try:
                exact = resolve_within(self.raw_dir, reference, "'img' path")
            except OutsideRoot as error:
                return None, str(error)
            path, problem = self.images.find(exact.parent, exact.stem, exact=exact)
        return (None, problem) if problem else load_image(path, self.max_image_bytes)

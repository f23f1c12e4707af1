"""Content keys of memes: the same meme under another id is still the same meme.

Ids say nothing about content: a held-out meme copied into a dataset under a new id (re-encoded, resized, its text
re-spaced or re-cased) would still be scored as its own neighbour by a retrieval adapter. A meme's content key is
its normalised text (Unicode NFKC, case-folded, every run of non-alphanumerics one space) hashed with SHA-256, and
a 256-bit difference hash of its image (grey 17×16 thumbnail, one bit per horizontally neighbouring pixel pair: the
standard dHash at hash size 16, which survives re-encoding and resizing). Two memes are near-duplicates when their
texts are equal after normalisation and their image hashes differ in at most `IMAGE_BITS` bits (or neither has an
image). The dHash is written out here (a few lines of PIL/numpy) rather than taken from a package for it.
"""

from __future__ import annotations

import hashlib
import io
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from PIL import Image

HASH_SIZE = 16  # 16 × 16 = 256 bits: at 8 × 8 (64 bits), distinct synthetic memes with one text came 3 bits apart
# Measured on the 360 memes of 40 synthetic groups (128 px, the smallest images crossmod meets): distinct memes with the
# same text are ≥ 20 bits apart; copies re-encoded as JPEG q70 or resized 1.5× are ≤ 7 bits from their originals,
# 0.75× + q70 within 16 bits for 98.6 % (max 19), 0.5× + q60 for 92.8 % (max 23). 16 keeps a 4-bit margin below
# the closest distinct pair and catches every re-encoded or enlarged copy.
IMAGE_BITS = 16
NO_IMAGE = -1


def text_key(text: str | None) -> str:
    normalised = re.sub(r"[\W_]+", " ", unicodedata.normalize("NFKC", text or "").casefold()).strip()
    return hashlib.sha256(normalised.encode("utf-8")).hexdigest()


def image_key(image: bytes | None) -> int:
    """The image's 256-bit difference hash, or NO_IMAGE."""
    if not image:
        return NO_IMAGE
    with Image.open(io.BytesIO(image)) as opened:
        grey = np.asarray(opened.convert("L").resize((HASH_SIZE + 1, HASH_SIZE), Image.Resampling.BILINEAR), dtype=np.int16)
    bits = (grey[:, 1:] > grey[:, :-1]).flatten()
    return int("".join("1" if b else "0" for b in bits), 2)


def content_key(record: dict[str, Any]) -> tuple[str, int]:
    return text_key(record.get("text")), image_key(record.get("image"))


class NearDuplicates:
    """Content keys to match memes against (e.g. a run's held-out memes); serialisable as plain JSON lists."""

    def __init__(self, keys: Iterable[tuple[str, int]]) -> None:
        self.by_text: dict[str, list[int]] = defaultdict(list)
        for text, image in keys:
            self.by_text[str(text)].append(int(image))

    def __len__(self) -> int:
        return sum(map(len, self.by_text.values()))

    def matches(self, key: tuple[str, int]) -> bool:
        text, image = key
        for other in self.by_text.get(text, ()):
            if (image == NO_IMAGE) != (other == NO_IMAGE):
                continue
            if image == NO_IMAGE or bin(image ^ other).count("1") <= IMAGE_BITS:
                return True
        return False

    def to_json(self) -> list[list[Any]]:
        return sorted([text, f"{image:064x}" if image != NO_IMAGE else None] for text, images in self.by_text.items() for image in images)

    @classmethod
    def from_json(cls, rows: Any, where: str) -> NearDuplicates:
        """Rows as `to_json` writes them; anything else is refused naming `where` (the file is data someone shared)."""
        keys = []
        for row in rows if isinstance(rows, list) else [None]:
            ok = isinstance(row, list) and len(row) == 2 and isinstance(row[0], str) and re.fullmatch(r"[0-9a-f]{64}", row[0])
            ok = ok and (row[1] is None or isinstance(row[1], str) and re.fullmatch(r"[0-9a-f]{64}", row[1]))
            if not ok:
                raise ValueError(f"{where}: {str(row)[:80]} is not a [text sha256, image dhash] pair")
            keys.append((row[0], NO_IMAGE if row[1] is None else int(row[1], 16)))
        return cls(keys)

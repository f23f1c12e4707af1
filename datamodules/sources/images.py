"""Finding and checking meme images: original bytes kept, but only once PIL has fully decoded them.

A file is accepted when it is JPEG, PNG or WebP, passes `verify()`, and decodes completely
(`load()` on a fresh handle, which catches truncation). PIL's decompression-bomb limit stays on:
above `Image.MAX_IMAGE_PIXELS` the warning is turned into an error too, so a bomb never reaches a
loader worker.

Lookups are tolerant only where the answer is unambiguous: `img/01235.PNG` for `img/01235.png`,
`01235.jpeg` for `1235.jpg`; two candidates are an error naming both.
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

from PIL import Image, ImageFile

from datamodules.sample import sniff_image_format

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


def check_image(data: bytes) -> str | None:
    """Return None for a complete JPEG/PNG/WebP within PIL's pixel limit, else the reason it is not."""
    if not data:
        return "image file is empty"
    if sniff_image_format(data) is None:
        return "image is not a JPEG, PNG or WebP file"
    load_truncated, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, False  # another library may relax it
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:
                image.verify()
            with Image.open(io.BytesIO(data)) as image:
                image.load()
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
            return f"decompression bomb refused ({error})"
        except Exception as error:  # noqa: BLE001 - PIL raises many types for broken files
            return f"corrupt or truncated image ({type(error).__name__}: {error})"
        finally:
            ImageFile.LOAD_TRUNCATED_IMAGES = load_truncated
    return None


def _number(stem: str) -> str | None:
    return str(int(stem)) if re.fullmatch(r"\d+", stem) else None


class ImageFinder:
    """Resolve an image reference against the files that exist, indexing each folder once."""

    def __init__(self, recursive: bool = False) -> None:
        self.recursive = recursive
        self._index: dict[Path, dict[str, list[Path]]] = {}

    def _folder_index(self, folder: Path) -> dict[str, list[Path]]:
        if folder not in self._index:
            index: dict[str, list[Path]] = {}
            files = folder.rglob("*") if self.recursive else folder.glob("*")
            for path in sorted(files):
                if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
                    for key in {path.stem.casefold(), _number(path.stem)} - {None}:
                        index.setdefault(key, []).append(path)
            self._index[folder] = index
        return self._index[folder]

    def find(self, folder: Path, stem: str, exact: Path | None = None) -> tuple[Path | None, str | None]:
        """The one image in `folder` for `stem` (case, extension and leading zeros tolerated) or the reason."""
        if exact is not None and exact.is_file():
            return exact, None
        if not folder.is_dir():
            return None, f"image folder {folder} does not exist"
        index = self._folder_index(folder)
        candidates = index.get(stem.casefold()) or index.get(_number(stem) or "\0") or []
        if exact is not None and exact.suffix:
            same_suffix = [p for p in candidates if p.suffix.lower() == exact.suffix.lower()]
            candidates = same_suffix if len(same_suffix) == 1 else candidates
        if not candidates:
            wanted = exact if exact is not None else folder / f"{stem}.*"
            return None, f"image file not found: {wanted}"
        if len(candidates) > 1:
            return None, f"ambiguous image for {stem!r}: {', '.join(str(p) for p in candidates)}"
        return candidates[0], None


def load_image(path: Path) -> tuple[bytes | None, str | None]:
    """The file's original bytes once checked, or the reason they cannot be used."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return None, f"image cannot be read: {path} ({error.strerror or error})"
    problem = check_image(data)
    return (None, f"{problem}: {path}") if problem else (data, None)

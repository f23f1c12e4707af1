"""Finding and checking meme images: original bytes kept, but only once PIL has fully decoded them.

A file is accepted when it is a regular file no larger than `max_bytes`, starts with a JPEG, PNG
or WebP signature (both checked before the rest is read, so a 2 GB file named `.png` costs a
`stat` and 12 bytes), passes `verify()`, and decodes completely (`load()` on a fresh handle,
which catches truncation). PIL's decompression-bomb limit stays on: above `Image.MAX_IMAGE_PIXELS`
the warning is turned into an error too, so a bomb never reaches a loader worker.

Lookups are tolerant only where the answer is unambiguous: `img/01235.PNG` for `img/01235.png`,
`01235.jpeg` for `1235.jpg`; two candidates are an error naming both. Every file found must stay
inside the finder's root (`crossmod.data.paths`), symlinks included.
"""

from __future__ import annotations

import io
import os
import re
import stat
import warnings
from pathlib import Path

from PIL import Image, ImageFile

from crossmod.data.paths import OutsideRoot, ensure_within
from crossmod.data.sample import sniff_image_format

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")
MAX_IMAGE_BYTES = 50 * 1024**2  # far above any meme (the datasets' largest are a few MB), far below what hurts a worker
SIGNATURE_BYTES = 12  # enough for every signature in `sniff_image_format` (WebP: RIFF....WEBP)


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
    """Resolve an image reference against the files that exist under `root`, indexing each folder once."""

    def __init__(self, root: Path, recursive: bool = False) -> None:
        self.root, self.recursive = root, recursive
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
        """The one image in `folder` for `stem` (case, extension and leading zeros tolerated) or the reason.

        `folder` and `exact` are under `root` by name (built with `resolve_within`); the file found
        is checked once more, so a symlink in the folder cannot lead outside `root`.
        """
        path, problem = self._find(folder, stem, exact)
        if path is None:
            return None, problem
        try:
            return ensure_within(self.root, path, "image file"), None
        except OutsideRoot as error:
            return None, str(error)

    def _find(self, folder: Path, stem: str, exact: Path | None) -> tuple[Path | None, str | None]:
        if exact is not None and exact.exists():  # a FIFO or folder here is reported by `read_image_file`, not "not found"
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


def read_image_file(path: Path, max_bytes: int = MAX_IMAGE_BYTES) -> tuple[bytes | None, str | None]:
    """The bytes of a regular file that starts like an image and holds at most `max_bytes`, or the reason.

    Size and signature are checked before the rest is read, and the read is bounded by the size
    checked (a file that grows meanwhile is refused, not read on).
    """
    try:
        # O_NONBLOCK: a FIFO named like an image must not hang the conversion before fstat refuses it
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None, f"not a regular file: {path}"
            if info.st_size > max_bytes:
                return None, f"image file is {info.st_size} bytes, above the limit of {max_bytes} (max_image_bytes): {path}"
            head = handle.read(SIGNATURE_BYTES)
            if not head:
                return None, f"image file is empty: {path}"
            if sniff_image_format(head) is None:
                return None, f"image is not a JPEG, PNG or WebP file (signature {head[:8].hex(' ')}): {path}"
            data = head + handle.read(max(info.st_size - len(head), 0))
            if handle.read(1):
                return None, f"image file grew while it was read: {path}"
    except OSError as error:
        return None, f"image cannot be read: {path} ({error.strerror or error})"
    return data, None


def load_image(path: Path, max_bytes: int = MAX_IMAGE_BYTES) -> tuple[bytes | None, str | None]:
    """The file's original bytes once checked (size, signature, full decode), or the reason they cannot be used."""
    data, problem = read_image_file(path, max_bytes)
    if problem:
        return None, problem
    problem = check_image(data)
    return (None, f"{problem}: {path}") if problem else (data, None)

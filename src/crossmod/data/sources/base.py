"""What every raw-dataset converter shares: the error type, `on_error`, duplicate ids, the cache key.

A converter reads one published layout and yields, for every input (a JSON line, a CSV row, or a
whole file it cannot read), exactly one `Sample` or one problem. With `on_error="raise"` the first
problem stops the conversion with a message naming the file, the line and the reason; with
`on_error="skip"` each problem becomes a `Skipped` record that the manifest counts. Either way no
input disappears silently, and a conversion that ends with no sample at all is an error.
Paths read from the raw files resolve inside `raw_dir` (`crossmod.data.paths.resolve_within`) and
image files above `max_image_bytes` are refused before they are read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from crossmod.data.sample import Sample
from crossmod.data.shards import Skipped, sha256_file
from crossmod.data.sources.images import MAX_IMAGE_BYTES

ON_ERROR = ("raise", "skip")


class RawDataError(ValueError):
    """A problem in the user's raw files; the message names the file, the line and the reason."""

    def __init__(self, file: Path | str, reason: str, line: int | None = None, rel: str | None = None) -> None:
        self.file, self.reason, self.line = str(file), reason, line
        self.rel = rel or self.file
        where = self.file if line is None else f"{self.file}, line {line}"
        super().__init__(f"{where}: {reason}")

    @property
    def input(self) -> str:
        """Short name of the input for the manifest: `relative/file:line` (or the file alone)."""
        return self.rel if self.line is None else f"{self.rel}:{self.line}"


class RawSource:
    """Base of the converters: subclasses set `name`, `version`, `heads` and implement `records()`."""

    name: str = "raw"
    version: int = 1
    heads: dict[str, dict[str, Any]] = {}
    # Set by crossmod.data.ocr.CaptionsFromImages: a meme with an image and empty text is kept, its caption
    # read off the image, instead of being a bad input.
    text_from_image: bool = False

    def __init__(self, raw_dir: str | Path, on_error: str = "raise", max_image_bytes: int = MAX_IMAGE_BYTES) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"{self.name}: on_error must be one of {ON_ERROR}, got {on_error!r}")
        if isinstance(max_image_bytes, bool) or not isinstance(max_image_bytes, int) or max_image_bytes <= 0:
            raise ValueError(f"{self.name}: max_image_bytes must be a positive number of bytes, got {max_image_bytes!r}")
        if raw_dir is None or not Path(raw_dir).expanduser().is_dir():
            raise FileNotFoundError(
                f"{self.name}: raw_dir {raw_dir} is not a directory; set data.raw_dir to the dataset's folder (see docs/datasets.md)"
            )
        self.raw_dir = Path(raw_dir).expanduser().resolve()
        self.on_error, self.max_image_bytes = on_error, max_image_bytes
        self._params: dict[str, Any] | None = None
        self._first_seen: dict[str, str] = {}

    # ------------------------------------------------------------------ for subclasses
    def records(self) -> Iterator[Sample | RawDataError]:
        """Yield one Sample or one RawDataError per input, in a deterministic order."""
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        """The converter's settings that change its output (part of the cache key)."""
        return {}

    def annotation_files(self) -> list[Path]:
        """Files whose content decides the output besides images; hashed into the cache key."""
        return []

    def rel(self, path: Path) -> str:
        """A path relative to raw_dir, as the manifest records inputs."""
        try:
            return path.relative_to(self.raw_dir).as_posix()
        except ValueError:
            return str(path)

    def error(self, path: Path, reason: str, line: int | None = None) -> RawDataError:
        return RawDataError(path, reason, line, rel=self.rel(path))

    def claim_id(self, sample_id: str, path: Path, line: int | None) -> RawDataError | None:
        """Register an id; return an error naming the first occurrence when it was seen before."""
        where = self.rel(path) if line is None else f"{self.rel(path)}:{line}"
        first = self._first_seen.get(sample_id)
        if first is not None:
            return self.error(path, f"duplicate id {sample_id!r} (first seen at {first})", line)
        self._first_seen[sample_id] = where
        return None

    # ------------------------------------------------------------------ the Source protocol
    def params(self) -> dict[str, Any]:
        """Everything the shards depend on: converter version, raw_dir, options, annotation file hashes."""
        if self._params is None:
            self._params = {
                "converter": self.name,
                "version": self.version,
                "raw_dir": str(self.raw_dir),
                "on_error": self.on_error,
                "options": self.options(),
                "files": {self.rel(p): sha256_file(p) for p in sorted(self.annotation_files()) if p.is_file()},
            }
        return self._params

    def __iter__(self) -> Iterator[Sample | Skipped]:
        self._first_seen = {}
        written = skipped = 0
        for record in self.records():
            if isinstance(record, RawDataError):
                if self.on_error == "raise":
                    raise RawDataError(
                        record.file,
                        f"{record.reason} (with data.on_error=skip such inputs are counted and skipped)",
                        record.line,
                        record.rel,
                    )
                skipped += 1
                yield Skipped(input=record.input, reason=record.reason)
            else:
                written += 1
                yield record
        if written == 0:
            raise RawDataError(
                self.raw_dir, f"{self.name}: no samples could be read ({skipped} inputs skipped); check the layout in docs/datasets.md"
            )

    def summary(self) -> dict[str, Any]:
        """Facts about the raw data for the manifest (agreement statistics …); empty by default."""
        return {}


def check_known(values: Iterable[str], known: Iterable[str], what: str) -> None:
    """Reject unknown names in a converter option early, listing the valid ones."""
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} {unknown}; choose from {sorted(known)}")

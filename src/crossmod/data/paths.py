"""Paths written inside data files (image references, shard names) stay inside their root.

Annotation files, JSONL inputs and manifests are shared and downloaded: a path in them is data, so
`img: ../../home/me/.ssh/id_rsa` or `/etc/passwd` must never make crossmod read (and copy into
shards or predictions) a file outside the folder the user pointed at. `resolve_within` is the one
place that turns such a path into a file path: it refuses absolute paths, `..` that climbs out of
the root, and symlinks whose target lies outside the root.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePath, PurePosixPath

_DRIVE = re.compile(r"[A-Za-z]:")


class OutsideRoot(ValueError):
    """A path from a data file that would leave its root; the message names the path and the root."""


def resolve_within(root: Path, reference: str | PurePath, what: str = "path") -> Path:
    """`root / reference` once it is sure to stay inside `root`; raise OutsideRoot otherwise.

    `reference` is relative, with `/` or `\\` separators; `..` is allowed while it stays inside.
    The returned path is the lexical one (no `..`), so the file opened is the file checked.
    """
    text = str(reference)
    if not text.strip():
        raise OutsideRoot(f"empty {what}")
    if "\0" in text:
        raise OutsideRoot(f"{what} {text!r} contains a NUL character")
    posix = text.strip().replace("\\", "/")
    if posix.startswith("/") or _DRIVE.match(posix):
        raise OutsideRoot(f"{what} {text!r} is absolute; paths in data files must be relative to {root}")
    parts: list[str] = []
    for part in PurePosixPath(posix).parts:
        if part == "..":
            if not parts:
                raise OutsideRoot(f"{what} {text!r} leaves {root} through '..'; paths in data files must stay inside it")
            parts.pop()
        elif part != ".":
            parts.append(part)
    if not parts:
        raise OutsideRoot(f"{what} {text!r} names the folder {root} itself, not a file in it")
    return ensure_within(root, root.joinpath(*parts), what, text)


def ensure_within(root: Path, path: Path, what: str = "path", shown: str | None = None) -> Path:
    """`path` (already under `root` by name) unless a symlink on the way leads outside `root`."""
    real_root, real = root.resolve(), path.resolve()
    if real != real_root and not real.is_relative_to(real_root):
        raise OutsideRoot(f"{what} {shown or str(path)!r} is a symlink to {real}, outside {root}; crossmod reads files inside it only")
    return path


def override_value(value: str) -> str:
    """A path as a Hydra override value (`data.raw_dir=<this>`): quoted when it holds characters the override grammar
    reserves, such as the `=` of Lightning's `epoch=2-step=300.ckpt` names or a space."""
    if re.fullmatch(r"[\w/.\-~+:@]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

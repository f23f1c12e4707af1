"""Write a model folder exactly once, however many processes ask for it at the same time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from filelock import FileLock


def build_once(out_dir: str | Path, write: Callable[[Path], None]) -> Path:
    """Run `write(staging)` under a lock and rename the staging dir to `out_dir`, unless it is built already.

    The lock lets concurrent ranks and tests share one folder; the rename means a half-written folder is
    never taken for a finished one (a folder counts as built once its `config.json` exists).
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out_dir) + ".lock"):
        if (out_dir / "config.json").is_file():
            return out_dir
        staging = out_dir.with_name(out_dir.name + ".partial")
        write(staging)
        staging.rename(out_dir)
    return out_dir

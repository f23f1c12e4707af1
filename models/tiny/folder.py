"""Write a model folder exactly once, however many processes ask for it at the same time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock


@contextmanager
def _no_progress_bars() -> Iterator[None]:
    from transformers.utils import logging as transformers_logging

    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            transformers_logging.enable_progress_bar()


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
        with _no_progress_bars():  # Transformers draws a "Writing model shards" bar for each tiny file it saves
            write(staging)
        staging.rename(out_dir)
    return out_dir

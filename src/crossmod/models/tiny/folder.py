"""Write a model folder exactly once, however many processes ask for it at the same time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from crossmod.data.cache_files import atomic_dir, refuse_links


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
    never taken for a finished one (a folder counts as built once its `config.json` exists). `staging` does not
    exist yet: `write` creates it (`save_pretrained` does).
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(out_dir, "tiny model folder")
    with FileLock(str(out_dir) + ".lock"):
        if (out_dir / "config.json").is_file():
            return out_dir
        # a fresh private staging folder (src/crossmod/data/cache_files.py): a link planted beside out_dir is never written through
        with atomic_dir(out_dir, "tiny model folder") as staging, _no_progress_bars():  # Transformers draws a bar per tiny file
            write(staging)
    return out_dir

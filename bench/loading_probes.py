"""Where the data-loading time goes: per-stage costs, the worker → training-process hand-over, and the
time a real training loop waits on data. Used by bench/data_loading.py."""

from __future__ import annotations

import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import bare_trainer
from file_memes import FileMemes, evict


def datamodule_for(shard_dir: Path | str, preprocessor, batch_size: int, workers: int, memes: int):
    from crossmod.data.memes import MemeDataModule

    dm = MemeDataModule(
        heads=preprocessor.heads,
        shard_dir=str(shard_dir),
        batch_size=batch_size,
        num_workers=workers,
        epoch="resampled",
        epoch_samples=memes,
        train_splits=["train", "val", "test"],  # every meme written streams, as in the file loader
        preprocessor=preprocessor,
        verify=False,
    )
    dm.setup("fit")
    return dm


@contextmanager
def http_server(root: Path) -> Iterator[str]:
    """The standard library's HTTP server serving `root` from its own process (as a storage host would), its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):  # until it accepts connections
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def _median_us_per_meme(fn: Callable[[], Any], memes: int, before: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(3):
        if before:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(1e6 * statistics.median(times) / memes, 2)


def components(shard_dir: Path, file_root: Path, crossmod, conventional, memes: int, batch_size: int) -> dict[str, float]:
    """Microseconds per meme of each stage, one process, no workers (median of 3); `_cold`: files evicted first.
    `read_tar` is crossmod's shard reader, `read_tar_webdataset` webdataset's `tarfile_to_samples` for reference."""
    import webdataset as wds

    from crossmod.data.sample import decode_shard_entry
    from crossmod.data.tar_reader import shard_samples

    urls = sorted(str(p) for p in shard_dir.glob("*.tar"))
    files = FileMemes(file_root, memes, conventional)
    cold_files = [Path(u) for u in urls] + sorted(file_root.iterdir())

    def read_tar(stage=shard_samples) -> list:
        return list(wds.DataPipeline(wds.SimpleShardList(urls), stage, wds.map(decode_shard_entry)))

    records = read_tar()
    ours = [crossmod(r) for r in records]
    theirs = [conventional(r) for r in records]

    def collate(preprocessor, features) -> Callable[[], None]:
        def run() -> None:
            for i in range(0, len(features) - batch_size + 1, batch_size):
                preprocessor.collate(features[i : i + batch_size])

        return run

    out = {
        "read_tar": _median_us_per_meme(read_tar, memes),
        "read_tar_webdataset": _median_us_per_meme(lambda: read_tar(wds.tarfile_to_samples()), memes),
        "read_files": _median_us_per_meme(lambda: [files.read(i) for i in range(memes)], memes),
        "read_tar_cold": _median_us_per_meme(read_tar, memes, lambda: evict(cold_files)),
        "read_files_cold": _median_us_per_meme(lambda: [files.read(i) for i in range(memes)], memes, lambda: evict(cold_files)),
        "preprocess": _median_us_per_meme(lambda: [crossmod(r) for r in records], memes),
        "preprocess_conventional": _median_us_per_meme(lambda: [conventional(r) for r in records], memes),
        "collate": _median_us_per_meme(collate(crossmod, ours), memes),
        "collate_conventional": _median_us_per_meme(collate(conventional, theirs), memes),
    }
    return out


def handoff(make_loader: Callable[[], Any], batches: int) -> dict[str, float]:
    """Milliseconds `next()` takes when the worker's batches are already waiting in the queue (the consumer
    sleeps between batches): receiving a batch from a worker process, whatever the pipeline costs."""
    loader = make_loader()
    iterator = iter(loader)
    first = next(iterator)
    times = []
    for _ in range(batches):
        time.sleep(0.2)
        start = time.perf_counter()
        try:
            next(iterator)
        except StopIteration:
            break
        times.append(time.perf_counter() - start)
    tensors = [v for v in first.values() if hasattr(v, "shape")] + [v for v in first.get("labels", {}).values() if hasattr(v, "shape")]
    del iterator, loader
    return {
        "ms_per_batch": 1000 * statistics.median(times),
        "tensors_per_batch": len(tensors),
        "shared_memory_blocks": len({t.untyped_storage().data_ptr() for t in tensors}),
    }


def wait_run(shard_dir: Path, model, workers: int, batch_size: int, memes: int, steps: int, warmup: int) -> dict[str, float]:
    """A real short training run; the loop's time blocked in the DataLoader over its wall time."""
    import copy

    import lightning as L
    from lightning.pytorch.profilers import Profiler

    class FetchWait(Profiler):
        """Records only Lightning's `train_dataloader_next` action (the loop blocked on the next batch)."""

        def __init__(self) -> None:
            super().__init__()
            self.open: float | None = None
            self.waits: list[tuple[float, float]] = []

        def start(self, action_name: str) -> None:
            if action_name.endswith("train_dataloader_next"):
                self.open = time.perf_counter()

        def stop(self, action_name: str) -> None:
            if action_name.endswith("train_dataloader_next") and self.open is not None:
                self.waits.append((self.open, time.perf_counter()))
                self.open = None

    class Stamps(L.Callback):
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.ends: list[float] = []

        def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
            self.starts.append(time.perf_counter())

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            self.ends.append(time.perf_counter())

    model = copy.deepcopy(model)  # every run starts from the same weights
    dm = datamodule_for(shard_dir, model.preprocessor, batch_size, workers, memes)
    profiler, stamps = FetchWait(), Stamps()
    root = tempfile.mkdtemp(prefix="crossmod-bench-wait-")
    try:
        trainer = bare_trainer(max_steps=steps, limit_val_batches=0, profiler=profiler, callbacks=[stamps], default_root_dir=root)
        trainer.fit(model, train_dataloaders=dm.train_dataloader())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    # The window runs from the start of step `warmup` to the end of the last step; fetches before it
    # (worker start, shuffle-buffer fill) are the startup wait.
    starts, ends, waits = stamps.starts, stamps.ends, profiler.waits
    begin, finish = starts[warmup], ends[-1]
    window = finish - begin
    steady_waits = [b - a for a, b in waits if a >= begin and b <= finish]
    timed_steps = len(starts) - warmup
    gaps = [b - a for a, b in zip(ends[warmup:], starts[warmup + 1 :])]
    return {
        "wait_fraction": sum(steady_waits) / window,
        "gap_fraction": sum(gaps) / window,
        "startup_wait_s": sum(b - a for a, b in waits if b <= begin),
        "step_s": statistics.median(b - a for a, b in zip(starts[warmup:], ends[warmup:])),
        "steps": len(starts),
        "max_wait_s": max(steady_waits, default=0.0),
        "wait_s_per_step": sum(steady_waits) / max(timed_steps, 1),
        "steps_waiting_over_10ms": sum(w > 0.01 for w in steady_waits) / max(timed_steps, 1),
    }

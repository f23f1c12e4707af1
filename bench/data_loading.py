"""Data loading: memes/s that the WebDataset pipeline delivers against a file-per-meme map-style loader.

    python bench/data_loading.py [--smoke] [--repeats 3] [--workers 0 1 2] [--memes 1536]

The same memes (synthetic, 128 px JPEG as `data=synthetic` stores them) are written twice: as WebDataset
shards by the real shard writer, and as `<n>.jpg` + `<n>.json` per meme (the JSON is the shard's JSON).
Both loaders decode with the same preprocessor (the default `model=concat`: tokenizer + timm transform),
collate with the same `collate`, the same batch size, worker count and prefetch factor:

* `webdataset`: `MemeDataModule.train_dataloader()` (resampled shards, shuffle buffer, fixed epoch)
* `files`: `DataLoader(map-style dataset reading both files, shuffle=True)`

Throughput is memes per second between the first and the last batch of one epoch, with a consumer that
takes no time (`steady`); `with_startup` counts from creating the iterator (worker start, shuffle buffer
fill). A component breakdown (one process, no workers) shows where the per-meme time goes.

The last part is a real short training run (Lightning Trainer, `model=concat`, the datamodule streaming
the shards with 1 and 2 workers): the time the training loop spends waiting in the DataLoader's `next()`
(Lightning's `train_dataloader_next` profiler action) over the loop's wall time, after `warmup` steps.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Result, build_model, compose, interleave, parser, repeats, stats, synthetic_samples  # noqa: E402

NAME = "data_loading"
SPEED_TARGET = 1.5
WAIT_TARGET = 0.05


class FileMemes:
    """Map-style dataset: meme i is `<root>/<i>.jpg` plus `<root>/<i>.json`, turned into model inputs."""

    def __init__(self, root: Path, count: int, preprocessor) -> None:
        self.root, self.count, self.preprocessor = root, count, preprocessor

    def __len__(self) -> int:
        return self.count

    def read(self, index: int) -> dict[str, Any]:
        record = json.loads((self.root / f"{index:06d}.json").read_bytes())
        record["image"] = (self.root / f"{index:06d}.jpg").read_bytes()
        return record

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.preprocessor(self.read(index))


def write_files(samples: list, root: Path) -> None:
    root.mkdir(parents=True)
    for index, sample in enumerate(samples):
        entry = sample.to_shard_entry(f"{index:09d}")  # the shard's own JSON bytes and image bytes
        (root / f"{index:06d}.json").write_bytes(entry["json"])
        (root / f"{index:06d}.jpg").write_bytes(entry["jpg"])


def evict(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache (fsync, then POSIX_FADV_DONTNEED): only the benchmark's own
    files, so other jobs on the machine are not touched. The next read goes to the disk (on a VM, the host
    may still cache it: a lower bound on the cost of really cold or networked storage)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def datamodule_for(shard_dir: Path, preprocessor, batch_size: int, workers: int, memes: int):
    from datamodules.memes import MemeDataModule

    dm = MemeDataModule(
        heads=preprocessor.heads,
        shard_dir=str(shard_dir),
        batch_size=batch_size,
        num_workers=workers,
        epoch_samples=memes,
        train_splits=["train", "val", "test"],  # every meme written streams, as in the file loader
        preprocessor=preprocessor,
        verify=False,
    )
    dm.setup("fit")
    return dm


def file_loader(root: Path, preprocessor, batch_size: int, workers: int, memes: int):
    from torch.utils.data import DataLoader

    return DataLoader(
        FileMemes(root, memes, preprocessor),
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        collate_fn=preprocessor.collate,
        num_workers=workers,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,  # as MemeDataModule._loader
    )


def throughput(make_loader, cold: list[Path] | None = None) -> dict[str, float]:
    """One epoch of a fresh loader with an instant consumer: memes/s after the first batch and overall.
    `cold`: files to evict from the page cache first (both datasets, whichever loader runs)."""
    if cold:
        evict(cold)
    created = time.perf_counter()
    loader = make_loader()
    iterator = iter(loader)
    first = next(iterator)
    t_first = time.perf_counter()
    memes = 0
    for batch in iterator:
        memes += len(batch["ids"])
    end = time.perf_counter()
    total = memes + len(first["ids"])
    del iterator, loader
    return {"steady": memes / (end - t_first), "with_startup": total / (end - created), "memes": total, "first_batch_s": t_first - created}


def components(shard_dir: Path, file_root: Path, preprocessor, memes: int, batch_size: int) -> dict[str, float]:
    """Microseconds per meme of each stage, one process, no workers (median of 3); `_cold`: files evicted first."""
    import webdataset as wds

    from datamodules.sample import decode_shard_entry

    urls = sorted(str(p) for p in shard_dir.glob("*.tar"))
    files = FileMemes(file_root, memes, preprocessor)

    def tar_read() -> list:
        return list(wds.DataPipeline(wds.SimpleShardList(urls), wds.tarfile_to_samples(), wds.map(decode_shard_entry)))

    def file_read() -> list:
        return [files.read(i) for i in range(memes)]

    records = tar_read()

    def preprocess() -> list:
        return [preprocessor(r) for r in records]

    features = preprocess()

    def collate() -> None:
        for i in range(0, len(features) - batch_size + 1, batch_size):
            preprocessor.collate(features[i : i + batch_size])

    cold_files = [Path(u) for u in urls] + sorted(file_root.iterdir())
    stages = {
        "read_tar": tar_read,
        "read_files": file_read,
        "read_tar_cold": tar_read,
        "read_files_cold": file_read,
        "preprocess": preprocess,
        "collate": collate,
    }
    out = {}
    for name, fn in stages.items():
        times = []
        for _ in range(3):
            if name.endswith("_cold"):
                evict(cold_files)
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        out[name] = round(1e6 * statistics.median(times) / memes, 2)
    return out


def handoff(shard_dir: Path, preprocessor, batch_size: int, memes: int, batches: int) -> dict[str, float]:
    """Milliseconds `next()` takes when the worker's batches are already waiting in the queue (the consumer
    sleeps between batches): receiving a batch from a worker process, whatever the pipeline costs."""
    loader = datamodule_for(shard_dir, preprocessor, batch_size, 1, memes).train_dataloader()
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
    tensors = sum(1 for v in first.values() if hasattr(v, "shape")) + sum(
        1 for v in first.get("labels", {}).values() if hasattr(v, "shape")
    )
    del iterator, loader
    return {"ms_per_batch": 1000 * statistics.median(times), "tensors_per_batch": tensors}


def wait_run(
    shard_dir: Path, cfg_overrides: list[str], workers: int, batch_size: int, memes: int, steps: int, warmup: int
) -> dict[str, float]:
    """A real short training run; the loop's time blocked in the DataLoader over its wall time."""
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

    model, _ = build_model(cfg_overrides)
    dm = datamodule_for(shard_dir, model.preprocessor, batch_size, workers, memes)
    profiler, stamps = FetchWait(), Stamps()
    root = tempfile.mkdtemp(prefix="crossmod-bench-wait-")
    try:
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=1,
            max_steps=steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            profiler=profiler,
            callbacks=[stamps],
            default_root_dir=root,
        )
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


def _findings(
    result: Result, parts: dict[str, float], batch_size: int, workers_list: list[int], storages: list[str], wait_workers: list[int]
) -> None:
    """Sentences for the README, from the measured numbers: why the ratios are what they are."""
    ratios, variants = result.payload["ratios"], result.payload["variants"]
    shared = parts["preprocess"] + parts["collate"]
    bound = (parts["read_files"] + shared) / (parts["read_tar"] + shared)
    needed = SPEED_TARGET * (parts["read_tar"] + shared) - shared
    measured = ", ".join(f"{w} worker{'' if w == 1 else 's'} {ratios[f'webdataset/files {w}w']['value']:.2f}×" for w in workers_list)
    text = (
        f"WebDataset / files at the same worker count: {measured} (warm page cache). Per meme, reading costs "
        f"{parts['read_tar']:.0f} µs from the shards (Python's tarfile parses every member header) against {parts['read_files']:.0f} µs "
        f"for two small files, while JPEG decode + transform cost {parts['preprocess']:.0f} µs and tokenizing/collating "
        f"{parts['collate']:.0f} µs, the same in both loaders: a loader that only reads differently can reach "
        f"{bound:.2f}× here, so the {SPEED_TARGET}× target is not reachable from a local disk. It needs storage where a meme's two "
        f"files cost ≥ {needed:.0f} µs to read (≈ {needed - parts['read_files']:.0f} µs more than here: the per-file latency of networked "
        "or spinning disks, which shards avoid by reading sequentially)"
    )
    if "cold" in storages:
        cold = ", ".join(f"{w} worker{'' if w == 1 else 's'} {ratios[f'webdataset/files {w}w cold']['value']:.2f}×" for w in workers_list)
        text += (
            f"; with the files evicted from the page cache before each epoch the ratio is {cold}: on this VM a cold read costs "
            f"{parts['read_files_cold']:.0f} µs per meme for files, {parts['read_tar_cold']:.0f} µs for shards"
        )
    result.finding(text + ".")
    for w in wait_workers:
        v = variants[f"train_wait/{w}w"]
        batch_ms = batch_size * (parts["read_tar"] + parts["preprocess"] + parts["collate"]) / 1000
        step_ms = 1000 * v["step_s"]["median"]
        hand = result.payload["handoff"]
        wait_ms = 1000 * v["wait_s_per_step"]["median"]
        result.finding(
            f"Training run with {w} loader worker{'s' if w > 1 else ''}: the loop is blocked on the next batch {100 * v['median']:.1f} % of "
            f"its time (runs {100 * v['min']:.1f}–{100 * v['max']:.1f} %; {100 * v['share_of_steps_waiting_over_10ms']['median']:.0f} % of the "
            f"steps wait more than 10 ms, the longest {1000 * v['max_wait_s']['median']:.0f} ms) with a {step_ms:.0f} ms step, "
            f"{wait_ms:.1f} ms of waiting per step. Receiving a ready batch from a worker alone takes {hand['ms_per_batch']:.1f} ms "
            f"({hand['tensors_per_batch']} tensors passed through shared memory); a batch costs a worker ≈ {batch_ms:.0f} ms of CPU "
            f"({step_ms / batch_ms:.1f}× headroom on a free core), so "
            + ("most of the wait is that hand-over, the rest " if hand["ms_per_batch"] >= 0.5 * wait_ms else "most of the wait is ")
            + f"the workers not getting a core while {result.payload['machine']['cpu_count']} cores carry the training process, the workers "
            f"and other jobs "
            f"(load average {result.payload['load_average_start'][0]:.1f} at the start)."
        )


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--memes", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, nargs="+", default=None)
    p.add_argument("--storage", nargs="+", choices=["warm", "cold"], default=None, help="page cache state before each epoch")
    p.add_argument("--samples-per-shard", type=int, default=None)
    p.add_argument("--train-steps", type=int, default=None, help="steps of each training run that measures the wait")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the main process")
    args = p.parse_args()
    smoke = args.smoke
    memes = args.memes or (64 if smoke else 1024)
    batch_size = 8 if smoke and args.batch_size == 32 else args.batch_size
    storages = args.storage or (["warm"] if smoke else ["warm", "cold"])
    workers_list = args.workers if args.workers is not None else ([0, 1] if smoke else [0, 1, 2])
    per_shard = args.samples_per_shard or (16 if smoke else 256)
    train_steps = args.train_steps or (6 if smoke else 40)
    warmup = 2 if smoke else 5
    model_overrides = ["model=concat"]

    import torch

    from datamodules.shards import write_shards

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = compose(model_overrides)
    model = instantiate(OmegaConf.to_container(cfg.model, resolve=True), _recursive_=False)  # only its preprocessor is used
    preprocessor = model.preprocessor
    samples = synthetic_samples(memes, image_size=128)
    tmp = Path(tempfile.mkdtemp(prefix="crossmod-bench-data-"))
    try:
        shard_dir = tmp / "shards"
        source = samples[0]
        heads = {name: {"kind": "binary"} for name in source.labels}
        write_shards(samples, shard_dir, dataset="synthetic", heads=heads, params={"bench": memes}, maxcount=per_shard)
        file_root = tmp / "files"
        write_files(samples, file_root)
        image_bytes = statistics.median(len(s.image) for s in samples)

        result = Result(
            NAME,
            "Memes/s delivered to the training step: WebDataset shards against one JPEG + one JSON file per meme, same preprocessing",
            args,
            {
                "memes": memes,
                "image": f"synthetic {samples[0].image[:3].hex()}… JPEG, 128 px, median {image_bytes} bytes",
                "preprocessor": "model=concat (tokenizer max_length 32 + test_efficientnet transform, 64 px)",
                "batch_size": batch_size,
                "workers": workers_list,
                "samples_per_shard": per_shard,
                "prefetch_factor": 4,
                "main_process_torch_threads": args.threads,
                "storage": {
                    "warm": "local disk, every file in the page cache (written just before reading)",
                    "cold": "the same files evicted from the page cache before every epoch (fsync + POSIX_FADV_DONTNEED, only these files)",
                },
                "storages": storages,
                "train_steps": train_steps,
                "train_warmup_steps": warmup,
            },
        )
        all_files = sorted(file_root.iterdir()) + sorted(shard_dir.glob("*.tar"))
        for storage in storages:
            cold = all_files if storage == "cold" else None
            for workers in workers_list:
                print(f"[{NAME}] {storage} page cache, {workers} workers", flush=True)
                measured = interleave(
                    {
                        "webdataset": lambda w=workers, c=cold: throughput(
                            lambda: datamodule_for(shard_dir, preprocessor, batch_size, w, memes).train_dataloader(), c
                        ),
                        "files": lambda w=workers, c=cold: throughput(
                            lambda: file_loader(file_root, preprocessor, batch_size, w, memes), c
                        ),
                    },
                    repeats(args),
                )
                key = f"{workers}w" + ("" if storage == "warm" else f" {storage}")
                for name, runs in measured.items():
                    result.variant(
                        f"{name}/{key}",
                        "memes/s",
                        [r["steady"] for r in runs],
                        with_startup=stats([r["with_startup"] for r in runs]),
                        first_batch_s=stats([r["first_batch_s"] for r in runs]),
                        memes_per_epoch=runs[0]["memes"],
                    )
                ratio = result.paired(
                    f"webdataset/files {key}",
                    [r["steady"] for r in measured["webdataset"]],
                    [r["steady"] for r in measured["files"]],
                    "median over rounds of (memes/s of the WebDataset loader / of the file loader, same round)",
                )
                result.paired(
                    f"webdataset/files {key} (with startup)",
                    [r["with_startup"] for r in measured["webdataset"]],
                    [r["with_startup"] for r in measured["files"]],
                    "the same counting from the creation of the loader (worker start, first batch)",
                )
                target = f"webdataset >= {SPEED_TARGET}x files, {key}"
                result.row(
                    f"{workers} worker{'' if workers == 1 else 's'}{', cold cache' if storage == 'cold' else ''}: `webdataset` vs `files`",
                    f"webdataset/{key}",
                    f"files/{key}",
                    f"webdataset/files {key}",
                    target,
                    unit="memes/s",
                )
                result.target(
                    target,
                    ratio,
                    ">=",
                    SPEED_TARGET,
                    f"memes/s delivered by the WebDataset pipeline at least {SPEED_TARGET}x the file-per-meme loader's "
                    f"({workers} workers, {storage} page cache)",
                )

        parts = components(shard_dir, file_root, preprocessor, memes, batch_size)
        result.payload["components_us_per_meme"] = parts
        result.payload["handoff"] = handoff(shard_dir, preprocessor, batch_size, memes, 4 if smoke else 10)
        bound = (parts["read_files"] + parts["preprocess"] + parts["collate"]) / (
            parts["read_tar"] + parts["preprocess"] + parts["collate"]
        )
        result.ratio(
            "components bound",
            bound,
            "(read files + preprocess + collate) / (read tar + preprocess + collate): the ratio one process can reach when only reading differs",
        )

        wait_workers = [w for w in workers_list if w > 0] or [1]
        for workers in wait_workers:
            print(f"[{NAME}] training run, {workers} workers", flush=True)
            runs = interleave(
                {f"train/{workers}w": lambda w=workers: wait_run(shard_dir, model_overrides, w, batch_size, memes, train_steps, warmup)},
                repeats(args),
            )
            runs = next(iter(runs.values()))
            result.variant(
                f"train_wait/{workers}w",
                "fraction of loop time",
                [r["wait_fraction"] for r in runs],
                gap_fraction=stats([r["gap_fraction"] for r in runs]),
                startup_wait_s=stats([r["startup_wait_s"] for r in runs]),
                step_s=stats([r["step_s"] for r in runs]),
                max_wait_s=stats([r["max_wait_s"] for r in runs]),
                wait_s_per_step=stats([r["wait_s_per_step"] for r in runs]),
                share_of_steps_waiting_over_10ms=stats([r["steps_waiting_over_10ms"] for r in runs]),
            )
            fractions = [r["wait_fraction"] for r in runs]
            fraction = statistics.median(fractions)
            result.ratio(
                f"data wait / loop time {workers}w",
                fraction,
                "median over runs of the time blocked on the next batch / loop wall time",
                fractions,
            )
            result.row(
                f"training run, {workers} worker{'' if workers == 1 else 's'}: time blocked on data / loop time",
                f"train_wait/{workers}w",
                None,
                f"data wait / loop time {workers}w",
                f"data wait <= {WAIT_TARGET:.0%}, {workers} workers",
                scale=100,
                unit="%",
            )
            result.target(
                f"data wait <= {WAIT_TARGET:.0%}, {workers} workers",
                fraction,
                "<=",
                WAIT_TARGET,
                f"a training step waits on data for at most {WAIT_TARGET:.0%} of the loop time ({workers} workers, after {warmup} steps)",
            )
        _findings(result, parts, batch_size, workers_list, storages, wait_workers)
        result.note(
            "gap_fraction is the whole time between on_train_batch_end and the next on_train_batch_start (data wait plus Lightning's own "
            "inter-step work); wait_fraction is the part spent blocked in the DataLoader."
        )
        result.write()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

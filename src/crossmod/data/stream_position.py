"""Where a resumed run's training stream starts, so it sees exactly the batches the uninterrupted run would.

The training stream is resampled shards seeded per (seed, rank, worker, epoch) and cut into fixed epochs;
its epoch counter lives in the dataset object of each loader process, which a fresh process starts at zero.
A checkpoint records the stream's position (`training_position`: the epoch running or about to run and the
batches of it already trained on); on resume the datamodule's `StreamResume` sets it in the stream's
`StreamPosition`, and `ResumeAt`, a stage of the stream, applies it once at the start of a pass of every
loader process: the stream starts at that epoch and the batches already trained on are dropped. An epoch that is a
pass (src/crossmod/data/epoch_passes.py) resumes exactly with any number of loader workers: every worker sees the rank's
batches and keeps its share counted from the resume point, batch i of the rest going to worker i mod workers, the order
the DataLoader takes them in. A resampled stream is exact with `data.num_workers` <= 1; with more workers the rest
of the interrupted epoch is the same batches in a rotated worker order.

The position lives in shared memory: Lightning restores a DeepSpeed run's checkpoint after it has built (and
started) the training loader, so the position must reach loader workers that already exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, get_worker_info


def training_position(trainer: L.Trainer) -> tuple[int, int]:
    """(epoch, batches of it already trained on) of the training stream, from the fit loop's progress.

    A position at the end of an epoch is the start of the next one.
    """
    epochs = trainer.fit_loop.epoch_progress.current
    if epochs.started == epochs.completed:  # between epochs, or fit is over
        return epochs.completed, 0
    batches = trainer.fit_loop.epoch_loop.batch_progress.current
    if batches.ready == batches.started == batches.processed == batches.completed + 1:
        done = batches.processed  # saved in on_train_batch_end: that batch is done
    else:
        done = batches.completed
    if done >= trainer.num_training_batches:
        return epochs.completed + 1, 0
    return epochs.completed, done


class StreamPosition:
    """A position to start the stream at, shared by the loader processes.

    Cells: (times set, first pass it applies to, epoch, batches done). A loader process applies each
    setting once, at the first pass it starts whose number (counted in that process) is at least the
    given one.
    """

    def __init__(self) -> None:
        self.cells = torch.zeros(4, dtype=torch.int64).share_memory_()

    def set(self, epoch: int, batches: int, from_pass: int = 0) -> None:
        self.cells[1], self.cells[2], self.cells[3] = from_pass, epoch, batches
        self.cells[0] += 1  # last: a reader seeing the new count sees the new values

    def read(self) -> tuple[int, int, int, int]:
        times, from_pass, epoch, batches = (int(v) for v in self.cells.tolist())
        return times, from_pass, epoch, batches


class ResumeAt:
    """Stream stage after batching: on its first pass after a position is set, starts `shards` at the
    position's epoch and drops the batches already trained on. `shared`: every loader worker sees the rank's whole
    stream of batches, and this stage also keeps the worker's share (batch i after the resume point goes to worker
    i mod workers); otherwise each worker has a stream of its own and drops its part of the batches done."""

    def __init__(self, shards: Any, position: StreamPosition, shared: bool = False) -> None:
        self.shards, self.position, self.shared = shards, position, shared
        self.passes = 0  # passes started in this process
        self.applied = 0  # settings of the position applied in this process

    def __call__(self, batches: Iterable[Any]) -> Iterator[Any]:
        this_pass, self.passes = self.passes, self.passes + 1
        times, from_pass, epoch, done = self.position.read()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        skip = 0
        if times != self.applied and this_pass >= from_pass:
            self.applied = times
            self.shards.epoch = epoch - 1  # incremented when the shards' pass starts, after this
            skip = done if self.shared else done // workers + (1 if worker < done % workers else 0)
        for index, batch in enumerate(batches):
            if index >= skip and (not self.shared or (index - skip) % workers == worker):
                yield batch


class StreamResume:
    """A datamodule's resume state: a checkpoint's position waits for the next train loader, or reaches the
    one already running (Lightning restores this state before building the train loader, except under
    strategies that restore checkpoints after their setup, such as DeepSpeed, which built and started it)."""

    def __init__(self) -> None:
        self._pending: tuple[int, int] | None = None
        self._running: tuple[DataLoader, StreamPosition] | None = None

    def stage(self, shards: Any, shared: bool = False) -> ResumeAt:
        """The resume stage of a new train stream over `shards` (it takes the waiting position, if any); `shared` as
        in ResumeAt."""
        position = StreamPosition()
        if self._pending is not None:
            position.set(*self._pending)
            self._pending = None
        return ResumeAt(shards, position, shared)

    def running(self, loader: DataLoader, stage: ResumeAt) -> None:
        """The train loader of the current fit, whose stream has `stage`."""
        self._running = (loader, stage.position)

    def stopped(self) -> None:
        self._running = None

    def load(self, epoch: int, batches: int, num_workers: int, exact: bool = True) -> None:
        if self._running is None:
            self._pending = (epoch, batches)
        elif num_workers > 0:
            # Lightning iterates a train loader as soon as it builds it: its (persistent) workers have started
            # a pass from epoch 0, which restarting the iteration drops; their next pass resumes.
            loader, position = self._running
            position.set(epoch, batches, from_pass=1)
            iter(loader)
        else:
            self._running[1].set(epoch, batches)  # the in-process pass has not started yet
        where = f"the start of epoch {epoch}" if batches == 0 else f"epoch {epoch}, batch {batches}"
        what = (
            "the same batches in the same order as the uninterrupted run, with every rank's RNG state"
            if exact
            else f"the same batches, those left of this epoch in a rotated worker order (data.epoch=resampled with {num_workers} workers)"
        )
        rank_zero_info(f"Resuming the training stream at {where}: {what}")

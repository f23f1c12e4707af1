"""A rank whose loop stops moving says where it is stuck.

A hung collective looks like nothing at all: the rank that waits prints, after the process group's timeout (30 min by
default), only its own wait (`Timed out waiting … for recv`); the rank that never arrived, the one to fix, prints
nothing. Here each rank keeps the time of its loop's last batch; a watchdog thread, once no batch has finished for
`after_s` seconds, writes one notice naming the rank, loop and step, then every thread's stack (read from
`sys._current_frames`: the waits worth reporting, in a collective or on a loader queue, hold no GIL). Once per stall: a loop that moves again rearms it. Set
`after_s` below the process group's timeout so that the stacks come before the ranks are killed.

The per-batch cost is one clock read under an uncontended lock; the thread wakes four times per `after_s`.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import Any, TextIO

import lightning as L


class StallReport(L.Callback):
    """Writes the stacks of a rank whose current loop has finished no batch for `after_s` seconds (null: off)."""

    def __init__(self, after_s: float | None = 900.0, stream: TextIO | None = None) -> None:
        if after_s is not None and after_s <= 0:
            raise ValueError(f"callbacks.stall_report.after_s must be a positive number of seconds or null, got {after_s}")
        self.after_s, self.stream = after_s, stream
        self._last = time.monotonic()
        self._where, self._values = "setup", ()
        self._rank = 0
        self._reported = False
        self._stop = threading.Event()
        self._lock = threading.Lock()  # a beat and the watchdog's check see each other whole
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- the watchdog
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._rank = trainer.global_rank
        self._beat("{} setup", stage)
        if self.after_s is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="crossmod-stall-report", daemon=True)
        self._thread.start()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._thread = None

    def _watch(self) -> None:
        assert self.after_s is not None
        while not self._stop.wait(self.after_s / 4):
            with self._lock:
                idle, where = time.monotonic() - self._last, self._where.format(*self._values)
                stalled = idle >= self.after_s and not self._reported
                self._reported = self._reported or stalled
            if stalled:
                self._report(idle, where)

    def _report(self, idle: float, where: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(
            f"[crossmod] rank {self._rank}: no batch has finished for {idle:.0f} s (last: {where}); every thread's "
            "stack follows (callbacks.stall_report.after_s sets when)\n"
        )
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident != threading.get_ident():  # the watchdog's own stack says nothing
                stream.write(f"Thread {names.get(ident, ident)} (most recent call last):\n{''.join(traceback.format_stack(frame))}")
        stream.flush()

    def _beat(self, where: str, *values: Any) -> None:
        """`where` a format string for `values`, formatted only when a report is written (nothing built per batch)."""
        with self._lock:
            self._last, self._where, self._values, self._reported = time.monotonic(), where, values, False

    # ---------------------------------------------------------------- the loops' heartbeats
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._beat("train epoch {} start", trainer.current_epoch)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._beat("train epoch {}, global step {}", trainer.current_epoch, trainer.global_step)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._beat("validation start")

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._beat("validation batch {}", _batch_index(args))

    def on_test_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._beat("test start")

    def on_test_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._beat("test batch {}", _batch_index(args))

    def on_predict_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._beat("predict start")

    def on_predict_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._beat("predict batch {}", _batch_index(args))

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        self._beat("checkpoint saved")


def _batch_index(args: tuple[Any, ...]) -> Any:
    """`batch_idx` of a Lightning `on_*_batch_end(outputs, batch, batch_idx, dataloader_idx=0)`."""
    return args[2] if len(args) > 2 else "?"

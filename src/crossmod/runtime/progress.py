"""Progress on the console: Lightning's Rich bar on a terminal, plain log lines anywhere else.

A SLURM job's output is a file, and so is anything piped or captured: a Rich bar there is redrawn into nothing (or
into a file of control codes), so a long run shows no progress at all. Where stdout is not a terminal,
`LineProgress` logs one plain line per loop every `every_s` seconds (and/or every `every_n_steps` batches) and a
line when the loop ends, through the `crossmod.runtime.progress` logger, so the lines also reach the run's
`train.log`:

    train epoch 2/6: 340/1095 (31%), 11.3 it/s, ETA 0:01:07, loss=0.4121
    train epoch 2/6: 1095/1095 (100%), 11.2 it/s, done in 0:01:38, loss=0.3917
    validation epoch 2/6: 120/120 (100%), 35.0 it/s, done in 0:00:03

It is a Lightning `ProgressBar`, so the Trainer uses it instead of its default bar, and only rank 0 writes
(Lightning disables progress bars on every other rank).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from datetime import timedelta
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar, RichProgressBar
from lightning.pytorch.trainer.states import TrainerFn

log = logging.getLogger(__name__)


def console_progress(mode: str = "auto", every_s: float | None = 30.0, every_n_steps: int | None = None, **rich: Any) -> ProgressBar:
    """configs/callbacks/default.yaml's progress bar. `mode`: `auto` (a Rich bar when stdout is a terminal, else
    plain lines), `bar` or `lines`; `rich` are RichProgressBar's arguments."""
    if mode not in ("auto", "bar", "lines"):
        raise ValueError(f"callbacks.progress_bar.mode={mode}: use auto, bar or lines")
    if mode == "lines" or (mode == "auto" and not _is_terminal()):
        return LineProgress(every_s=every_s, every_n_steps=every_n_steps)
    return RichProgressBar(**rich)


def _is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


def _dataloader(batches: Any, idx: int) -> str:
    return f" (dataloader {idx})" if isinstance(batches, list) and len(batches) > 1 else ""


def _duration(seconds: float) -> str:
    return str(timedelta(seconds=round(seconds))) if math.isfinite(seconds) else "?"


class LineProgress(ProgressBar):
    """A line per loop every `every_s` seconds and/or `every_n_steps` batches (whichever comes first; null turns
    one off), with step/total, rate and ETA, and a closing line per loop; sanity-check batches are not reported."""

    def __init__(self, every_s: float | None = 30.0, every_n_steps: int | None = None) -> None:
        super().__init__()
        if not every_s and not every_n_steps:
            raise ValueError("LineProgress needs every_s or every_n_steps")
        self.every_s, self.every_n_steps = every_s, every_n_steps
        self._enabled = True
        self._loop: dict[str, Any] | None = None

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    @property
    def is_disabled(self) -> bool:
        return not self._enabled

    # --- one loop: start, advance, finish -------------------------------------------------------------------

    def _start(self, label: str, total: int | float) -> None:
        self._finish()  # the previous dataloader's loop, if it ended early
        now = time.monotonic()
        self._loop = {"label": label, "total": total, "start": now, "last_t": now, "base": None, "last_step": 0, "step": 0, "done": False}

    def _advance(self, step: int, metrics: dict[str, Any] | None = None) -> None:
        loop = self._loop
        if loop is None or loop["done"]:
            return
        if loop["base"] is None:  # a resumed epoch starts mid-way: its rate counts the batches run since
            loop["base"] = loop["last_step"] = step - 1
        loop["step"] = step
        if math.isfinite(loop["total"]) and step >= loop["total"]:
            self._finish(metrics)
            return
        now = time.monotonic()
        due_time = self.every_s is not None and now - loop["last_t"] >= self.every_s
        due_steps = self.every_n_steps is not None and step - loop["last_step"] >= self.every_n_steps
        if due_time or due_steps:
            loop["last_t"], loop["last_step"] = now, step
            if self._enabled:
                log.info(self._line(metrics))

    def _finish(self, metrics: dict[str, Any] | None = None) -> None:
        loop = self._loop
        if loop is None or loop["done"]:
            return
        loop["done"] = True
        if self._enabled and loop["base"] is not None:
            log.info(self._line(metrics, done=True))

    def _line(self, metrics: dict[str, Any] | None, done: bool = False) -> str:
        loop = self._loop
        assert loop is not None
        step, total = loop["step"], loop["total"]
        elapsed = time.monotonic() - loop["start"]
        rate = (step - loop["base"]) / elapsed if elapsed > 0 else float("inf")
        speed = f"{rate:.2f} it/s" if rate >= 1 or not math.isfinite(rate) else f"{1 / rate:.2f} s/it"
        if math.isfinite(total):
            where = f"{step}/{total} ({100 * step / total:.0f}%)"
            eta = (total - step) / rate if rate > 0 else float("inf")
        else:
            where, eta = f"{step}/?", float("inf")
        when = f"done in {_duration(elapsed)}" if done else f"ETA {_duration(eta)}, elapsed {_duration(elapsed)}"
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in (metrics or {}).items())
        return f"{loop['label']}: {where}, {speed}, {when}" + (f", {shown}" if shown else "")

    def _epoch(self, trainer: L.Trainer) -> str:
        """` epoch e/E` while fitting; nothing for a validation run of its own (the selected weights' re-scoring)."""
        if trainer.state.fn != TrainerFn.FITTING:
            return ""
        epochs = trainer.max_epochs
        return f" epoch {trainer.current_epoch + 1}" + (f"/{epochs}" if epochs and epochs > 0 else "")

    def _metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        items = self.get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return {k: float(v) if hasattr(v, "item") else v for k, v in items.items()}

    # --- Lightning hooks ----------------------------------------------------------------------------------

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(f"train{self._epoch(trainer)}", self.total_train_batches)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._advance(batch_idx + 1, self._metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._loop is not None and self._loop["label"].startswith("train"):  # an epoch of unknown length ends here
            self._finish(self._metrics(trainer, pl_module))

    def on_validation_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if trainer.sanity_checking:
            return
        if self.has_dataloader_changed(dataloader_idx):
            label = f"validation{self._epoch(trainer)}{_dataloader(trainer.num_val_batches, dataloader_idx)}"
            self._start(label, self.total_val_batches_current_dataloader)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking:
            self._advance(batch_idx + 1)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._finish()
        self.reset_dataloader_idx_tracker()

    def on_test_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            self._start(f"test{_dataloader(trainer.num_test_batches, dataloader_idx)}", self.total_test_batches_current_dataloader)

    def on_test_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance(batch_idx + 1)

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finish()
        self.reset_dataloader_idx_tracker()

    def on_predict_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            self._start(f"predict{_dataloader(trainer.num_predict_batches, dataloader_idx)}", self.total_predict_batches_current_dataloader)

    def on_predict_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._advance(batch_idx + 1)

    def on_predict_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finish()
        self.reset_dataloader_idx_tracker()

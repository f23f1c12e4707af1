"""SIGTERM and SIGINT stop a run as a failure would be seen, with a checkpoint to resume from.

Lightning turns SIGTERM during fit into `SIGTERMException`, a `SystemExit` without a code: left alone the process
exited 0 with no checkpoint and no metrics.json. Here both signals take Lightning's path (SIGINT is turned into
SIGTERM while fitting, so the ranks stop together at a batch boundary, where the state is whole), the full training
state is saved as `<run>/checkpoints/last.ckpt` (`ckpt_path=` that file resumes exactly), and train.py exits with
128 + the signal's number, the shell's convention. Outside fit (data conversion, scoring) the signal raises
`Interrupted` at once: nothing there needs saving.
"""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException

log = logging.getLogger(__name__)
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(Exception):
    """A run stopped by a signal outside fit."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


SIGNAL_CONNECTOR = "lightning.pytorch.trainer.connectors.signal_connector"


class _SignalReceived(logging.Filter):
    """Lightning logs every stop as "Received SIGTERM": a Ctrl-C reaches it as SIGTERM (below), so its line names the
    signal the user sent instead."""

    def __init__(self, callback: InterruptionCheckpoint) -> None:
        super().__init__()
        self.callback = callback

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.callback.signum == signal.SIGINT and "Received SIGTERM" in message:
            record.msg, record.args = message.replace("Received SIGTERM: 15", "Received SIGINT (Ctrl-C)").replace("SIGTERM", "SIGINT"), ()
        return True


class InterruptionCheckpoint(L.Callback):
    """Installs the SIGTERM/SIGINT handlers for a run and saves the resumable checkpoint when a signal stops fit."""

    def __init__(self, checkpoint: Path) -> None:
        self.checkpoint = Path(checkpoint)
        self.signum: int | None = None  # the first signal received
        self.saved: Path | None = None
        self._fitting = False

    def install(self) -> None:
        for signum in SIGNALS:
            signal.signal(signum, self._on_signal)
        connector = logging.getLogger(SIGNAL_CONNECTOR)
        if not any(isinstance(f, _SignalReceived) for f in connector.filters):
            connector.addFilter(_SignalReceived(self))

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.signum = self.signum or signum
        if not self._fitting:
            raise Interrupted(signum)
        if signum == signal.SIGINT:
            signal.raise_signal(signal.SIGTERM)  # Lightning's handler (composed with this one) stops the ranks together

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fitting = True

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fitting = False

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._fitting = False
        if not isinstance(exception, SIGTERMException) or trainer.state.fn != TrainerFn.FITTING:
            return
        self.signum = self.signum or signal.SIGTERM
        trainer.save_checkpoint(self.checkpoint)  # every rank: collective under DeepSpeed, RNG states gathered
        self.saved = self.checkpoint
        if trainer.is_global_zero:
            log.warning("%s: saved the training state to %s", signal.Signals(self.signum).name, self.checkpoint)

    def exit_status(self) -> int:
        return 128 + int(self.signum or signal.SIGTERM)

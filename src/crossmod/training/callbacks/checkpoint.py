"""A ModelCheckpoint that never ranks a NaN monitor.

Lightning stores a NaN monitor as -inf (+inf in `min` mode) and keeps that checkpoint while it has
fewer than `save_top_k`: when `val/mean/auroc` is NaN at every validation (no head has a defined
AUROC, e.g. a validation split with one class), the "best" checkpoint is silently epoch 0, and
everything scored afterwards is scored with it. Here a validation whose monitor is NaN is not
ranked: it is named in a warning and saves no top-k checkpoint, and when fit ends without a single
ranked validation a last warning says so (the run then has no best checkpoint and scores its final
weights; `last.ckpt` comes from its own callback).

The best checkpoint is written without optimizer state (`save_weights_only`, configs/callbacks/default.yaml) when
another checkpoint callback keeps a full `last.ckpt` to resume from; without one (e.g. `callbacks.last_checkpoint=null`)
it stays full, since it is then the only checkpoint a run could resume from.
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

log = logging.getLogger(__name__)


class NanSafeModelCheckpoint(ModelCheckpoint):
    """`ModelCheckpoint` whose ranking skips validations where the monitored value is NaN, loudly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unranked_epochs: list[int] = []

    def check_monitor_top_k(self, trainer: L.Trainer, current: torch.Tensor | None = None) -> bool:
        # every rank sees the same value (metrics are computed over the gathered set), so all skip alike
        if current is not None and bool(torch.isnan(torch.as_tensor(current))):
            epoch = trainer.current_epoch
            self.unranked_epochs.append(epoch)
            if trainer.is_global_zero:
                kept = self.best_model_path or "none yet"
                log.warning(
                    "epoch %d: %s is NaN (no head has a defined score on the validation set; see the warnings above): "
                    "this validation is not ranked and saves no checkpoint; best checkpoint: %s",
                    epoch,
                    self.monitor,
                    kept,
                )
            return False
        return super().check_monitor_top_k(trainer, current)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        # this callback's own `save_last` would be weights-only too: a resumable last.ckpt must come from elsewhere
        resumable_elsewhere = not self.save_last and _full_last_elsewhere(self, trainer)
        if stage == "fit" and self.save_weights_only and not resumable_elsewhere:
            self.save_weights_only = False
            if trainer.is_global_zero:
                log.info(
                    "no other checkpoint callback keeps a full last.ckpt to resume from: the best checkpoint (%s) keeps the "
                    "optimizer state after all",
                    self.monitor,
                )

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.monitor and not self.best_model_path and self.unranked_epochs and trainer.is_global_zero:
            log.warning(
                "%s was NaN at every validation (epochs %s): no checkpoint was selected by it, so the run scores its final "
                "weights. Give the validation set items of both classes for at least one head, or monitor another metric.",
                self.monitor,
                self.unranked_epochs,
            )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "unranked_epochs": list(self.unranked_epochs)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.unranked_epochs = list(state_dict.get("unranked_epochs", []))


def _full_last_elsewhere(this: ModelCheckpoint, trainer: L.Trainer) -> bool:
    """Whether another checkpoint callback writes a full checkpoint every time it saves a last one (the resumable one)."""
    return any(
        other is not this and not other.save_weights_only and (other.save_last or (other.monitor is None and other.save_top_k != 0))
        for other in trainer.checkpoint_callbacks
    )

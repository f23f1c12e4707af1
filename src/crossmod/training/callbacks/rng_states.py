"""RNG states travel in checkpoints, so a resumed run draws the same dropout masks as the uninterrupted one.

Lightning restores model, optimizer, scheduler and loops, but not the random number generators: this
callback saves every rank's states (Python, numpy, torch, CUDA) with each checkpoint and sets them again
when training resumes from one. Validation during fit is kept from moving the training RNG, so a run
resumed from a checkpoint written after a validation draws what the uninterrupted run draws. (The
training stream's position is the datamodule's own state: src/crossmod/data/stream_position.py.)
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from lightning.pytorch.callbacks import Callback


def _rng_states() -> dict[str, Any]:
    """Lightning's RNG snapshot with numpy's array as a tensor: checkpoints must load with weights_only=True."""
    states = _collect_rng_states(include_cuda=torch.cuda.is_available())
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    states["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss))
    return states


def _set_states(states: dict[str, Any]) -> None:
    states = dict(states)
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    states["numpy"] = (kind, keys.numpy().astype("uint32"), pos, has_gauss, gauss)
    _set_rng_states(states)


class RngStates(Callback):
    """Saves every rank's RNG states in checkpoints and restores them when fitting resumes from one."""

    def __init__(self) -> None:
        self._restore: list[dict[str, Any]] | None = None
        self._before_val: dict[str, Any] | None = None

    @property
    def state_key(self) -> str:
        return "RngStates"

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Validation during fit must not move the training RNG: building the val loader's iterator draws a
        # worker seed from torch's RNG the first time only, which a resumed run does at a different epoch.
        self._before_val = _collect_rng_states(include_cuda=torch.cuda.is_available())

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and self._before_val is not None:
            _set_rng_states(self._before_val)
            self._before_val = None

    def state_dict(self) -> dict[str, Any]:
        # Every rank's states (checkpoints are dumped on every rank; DDP writes rank 0's file only).
        states = _rng_states()
        if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, states)
            return {"rng": gathered}
        return {"rng": [states]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restore = state_dict.get("rng")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the checkpoint's loop state is restored and before the first batch; the train loader's iterator
        # was built earlier (Lightning sizes the scheduler from the loader and iterates it at once).
        if self._restore is None:
            return
        states = self._restore[trainer.global_rank % len(self._restore)]
        self._restore = None
        loader = trainer.train_dataloader
        # A loader without persistent workers builds a new iterator (one draw from torch's RNG) at every epoch
        # start, which a resumed run skips: at an epoch boundary the draw is made again after the states are set.
        new_iterator_each_epoch = not (getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0)
        _set_states(states)
        if new_iterator_each_epoch and _at_epoch_boundary(trainer, loader):
            iter(trainer.fit_loop._data_fetcher)


def _batches_done(trainer: L.Trainer) -> int:
    """Training batches of the current epoch already done according to the restored loop state."""
    current = trainer.fit_loop.epoch_loop.batch_progress.current
    if current.ready == current.started == current.processed == current.completed + 1:
        return current.processed  # saved in on_train_batch_end: that batch is done
    return current.completed


def _at_epoch_boundary(trainer: L.Trainer, loader: Any) -> bool:
    """Whether the restored loop state sits between epochs (no batch of the next epoch done yet)."""
    done = _batches_done(trainer)
    try:
        length = len(loader)
    except TypeError:
        length = None
    return done <= 0 or (length is not None and done >= length)

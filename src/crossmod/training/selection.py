"""How a fold run picks the weights its held-out fold is scored with, applied to the trainer's callbacks.

Under `cv.selection=last` there is no validation set: nothing may monitor a metric (a checkpoint
callback would have nothing to rank, early stopping nothing to stop on), so monitored checkpoints
are dropped, early stopping is refused with the fix, and Lightning's validation loop is switched off.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

# Trainer arguments that switch the validation loop off (no sanity check either).
NO_VALIDATION = {"limit_val_batches": 0, "num_sanity_val_steps": 0}


def without_selection(callbacks: list[Any]) -> list[Any]:
    """Callbacks for a run that trains the configured schedule and scores its final weights."""
    stoppers = [type(c).__name__ for c in callbacks if isinstance(c, EarlyStopping)]
    if stoppers:
        raise ValueError(
            f"cv.selection=last trains the configured schedule without a validation set, but {stoppers} would need one: "
            "use cv.selection=inner (a validation split carved from the training folds) or remove the early stopping callback"
        )
    return [c for c in callbacks if not (isinstance(c, ModelCheckpoint) and c.monitor)]

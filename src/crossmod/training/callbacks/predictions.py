"""Write per-sample predictions (id, head, probability, label) of validate/test runs.

Each rank writes its own part at epoch end (one device→host copy per epoch, none per step);
rank 0 merges the parts into `<stage>.csv` after a barrier, so the file holds every sample once, in the order of
their ids (the same file whatever the number of ranks and loader workers).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

COLUMNS = ("id", "head", "probability", "label")


def _cell(value: torch.Tensor) -> Any:
    return value.item() if value.dim() == 0 else json.dumps([round(v, 6) for v in value.tolist()])


def _label(value: torch.Tensor) -> Any:
    if value.dim() == 0:
        return "" if value < 0 else int(value)
    return "" if value[0] < 0 else json.dumps([int(v) for v in value.tolist()])


class PredictionWriter(L.Callback):
    """Records predictions only in `trainer.validate` / `trainer.test`, not in fit's validation loops."""

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)
        self.records: list[dict[str, Any]] | None = None  # the epoch's scored batches, while recording

    def _start(self, trainer: L.Trainer) -> None:
        self.records = [] if trainer.state.fn in (TrainerFn.VALIDATING, TrainerFn.TESTING) else None

    def _keep(self, outputs: Any) -> None:
        if self.records is not None and outputs is not None:  # the step's scores (MemeClassifier._eval_step)
            self.records.append(outputs)

    def on_validation_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._start(trainer)

    def on_test_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._start(trainer)

    def on_validation_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._keep(outputs)

    def on_test_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._keep(outputs)

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._finish(trainer, module, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._finish(trainer, module, "test")

    def _finish(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        records, self.records = self.records, None
        if records is None:
            return  # fit's validation loops are not written
        self.dirpath.mkdir(parents=True, exist_ok=True)
        part = self.dirpath / f"{stage}.rank{trainer.global_rank}.csv"
        with open(part, "w", newline="") as handle:
            writer = csv.writer(handle)
            for record in records:
                probs = {head: p.cpu() for head, p in record["probs"].items()}
                labels = {head: t.cpu() for head, t in record["labels"].items()}
                for i, sample_id in enumerate(record["ids"]):
                    for head in probs:
                        writer.writerow((sample_id, head, _cell(probs[head][i]), _label(labels[head][i])))
        trainer.strategy.barrier("predictions")
        if trainer.is_global_zero:
            parts = sorted(self.dirpath.glob(f"{stage}.rank*.csv"))
            rows = []
            for path in parts:
                with open(path, newline="") as part_file:
                    rows += csv.reader(part_file)
            rows.sort(key=lambda row: row[0])  # by id (a meme's heads keep their order): the same file for any ranks and workers
            with open(self.dirpath / f"{stage}.csv", "w", newline="") as out:
                writer = csv.writer(out)
                writer.writerow(COLUMNS)
                writer.writerows(rows)
            for path in parts:
                path.unlink()
        trainer.strategy.barrier("predictions-merged")

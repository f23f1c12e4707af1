"""MHC functional tests at validation time: per-functionality accuracy and per-language macro F1 as metrics.

During fit, the callback keeps the validation steps' probabilities (one device→host copy per epoch);
they are gathered from every rank, joined with the cases' functionality and language from the shards,
and logged as `val/mhc/acc/<functionality>` and `val/mhc/macro_f1/<lang>` (CSV, W&B …). Datasets
without functional-test metadata leave the callback idle.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

from crossmod.data.folds import iter_records
from crossmod.evaluation.functional import functional_metrics, functional_report


class FunctionalTestsCallback(L.Callback):
    def __init__(self, head: str = "hateful", threshold: float = 0.5) -> None:
        self.head, self.threshold = head, threshold
        self.cases: dict[str, dict[str, Any]] = {}
        self.records: list[dict[str, Any]] | None = None  # this validation epoch's scored batches, while recording

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        datamodule = trainer.datamodule
        if self.head not in getattr(module, "heads", {}) or datamodule is None or not datamodule.manifest:
            return
        names = [s["name"] for s in datamodule.manifest["shards"]]
        self.cases = {
            r["id"]: {"lang": r["lang"], "label": r["labels"].get(self.head), "meta": r["meta"]}
            for r in iter_records(datamodule.dataset_dir, names)
            if "functionality" in r.get("meta", {})
        }

    def _active(self, trainer: L.Trainer) -> bool:
        return bool(self.cases) and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking

    def on_validation_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.records = [] if self._active(trainer) else None

    def on_validation_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.records is not None and outputs is not None:  # the step's scores (MemeClassifier._eval_step)
            self.records.append(outputs)

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        records, self.records = self.records, None
        if records is None or not self._active(trainer):
            return
        local = [(i, float(p)) for record in records for i, p in zip(record["ids"], record["probs"][self.head].cpu())]
        gathered = [local]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, local)
        rows = [
            {**self.cases[i], "prediction": int(p >= self.threshold)}
            for part in gathered
            for i, p in part
            if i in self.cases and self.cases[i]["label"] is not None
        ]
        if not rows:
            return
        metrics = functional_metrics(functional_report(rows), "val/mhc")
        module.log_dict(metrics, sync_dist=False, rank_zero_only=False)  # identical on every rank after the gather

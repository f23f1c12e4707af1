"""Keeps the model's retrieval bank: the training memes' embeddings under the current weights, with their labels.

RGCL refreshes it at the start of every training epoch (the paper and its public code rebuild the database once per
epoch); retrieval classification (`model/scoring=retrieval`) builds it before every validation, test and prediction,
so memes are scored against neighbours embedded by the weights being scored. It reads the training memes only
(`MemeDataModule.bank_dataloader`): a fold run's held-out fold, and its inner validation split, never enter it.
The pass is a plain loop in eval mode without gradients: Lightning runs no loop inside another loop's epoch.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from crossmod.data.even_batches import FILLER
from crossmod.models.module import MemeClassifier
from crossmod.models.retrieval.bank import Bank


class RetrievalBank(L.Callback):
    """Idle unless the classifier's objective (RGCL) or scoring rule (a retrieval vote) reads the bank in a stage."""

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._refresh(trainer, module, "fit")

    def on_validation_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._refresh(trainer, module, "val")

    def on_test_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._refresh(trainer, module, "test")

    def on_predict_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._refresh(trainer, module, "predict")

    @staticmethod
    def _refresh(trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        if isinstance(module, MemeClassifier) and module.needs_bank(stage):
            module.use_bank(build_bank(trainer, module))


def embedded(model: Any, batch: dict[str, Any]) -> dict[str, Any]:
    """One batch's bank entries: embeddings (kept on the host), ids and every head's labels. What the in-training
    builder below and the predict loop's `Embedder` (src/crossmod/artifacts/retrieval_db.py) both collect."""
    output: dict[str, Any] = {"embedding": model.embed(batch).float().cpu()}
    for key in ("index", "ids", "labels"):
        if key in batch:
            output[key] = batch[key]
    return output


def bank_of(outputs: list[dict[str, Any]], heads: list[str] | Any, device: torch.device | None = None) -> Bank:
    """The bank that per-batch entries (`embedded`) make: one assembly for both builders."""
    labels = {head: torch.cat([torch.as_tensor(o["labels"][head]).long().cpu() for o in outputs]) for head in heads}
    ids = [str(meme_id) for o in outputs for meme_id in o["ids"]]
    embeddings = torch.cat([o["embedding"] for o in outputs])
    if device is not None:
        embeddings, labels = embeddings.to(device), {head: values.to(device) for head, values in labels.items()}
    return Bank.of(embeddings, labels, ids)


@torch.no_grad()
def build_bank(trainer: L.Trainer, module: Any) -> Bank:
    """Every training meme embedded once (each rank its shards, then gathered), labels of every head. A plain loop:
    it runs inside the fit loop's epoch, where Lightning cannot start another loop."""
    datamodule = trainer.datamodule
    if datamodule is None or not hasattr(datamodule, "bank_dataloader"):
        raise RuntimeError("RGCL and retrieval classification read the training memes from a MemeDataModule (bank_dataloader)")
    was_training = module.training
    module.eval()
    outputs: list[dict[str, Any]] = []
    try:
        for batch in datamodule.bank_dataloader():
            batch = trainer.strategy.batch_to_device(batch)
            entry = embedded(module, batch)  # a filler batch (ZeRO-3 lockstep) still runs the collective forward
            if not batch.get(FILLER):  # kept on the host, as ranks exchange them below
                outputs.append({**entry, "labels": {head: values.cpu() for head, values in entry["labels"].items()}})
    finally:
        module.train(was_training)
    if dist.is_available() and dist.is_initialized() and trainer.world_size > 1:
        parts: list[Any] = [None] * trainer.world_size
        dist.all_gather_object(parts, outputs)
        outputs = [output for part in parts for output in part]
    return bank_of(outputs, module.heads, module.device)

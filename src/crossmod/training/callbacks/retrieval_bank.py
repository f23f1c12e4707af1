"""Keeps the model's retrieval bank: the training memes' embeddings under the current weights, with their labels.

RGCL refreshes it at the start of every training epoch (the paper and its public code rebuild the database once per
epoch); retrieval classification (`model.classify=retrieval`) builds it before every validation, test and prediction,
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
from crossmod.models.retrieval.bank import Bank


class RetrievalBank(L.Callback):
    """Idle unless the model trains with RGCL or classifies by retrieval."""

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if getattr(module, "rgcl", None) is not None:
            module.retrieval_bank = build_bank(trainer, module)

    def on_validation_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._for_scoring(trainer, module)

    def on_test_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._for_scoring(trainer, module)

    def on_predict_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._for_scoring(trainer, module)

    @staticmethod
    def _for_scoring(trainer: L.Trainer, module: L.LightningModule) -> None:
        if getattr(module, "classify", "head") == "retrieval":
            module.retrieval_bank = build_bank(trainer, module)


@torch.no_grad()
def build_bank(trainer: L.Trainer, module: Any) -> Bank:
    """Every training meme embedded once (each rank its shards, then gathered), labels of every head."""
    datamodule = trainer.datamodule
    if datamodule is None or not hasattr(datamodule, "bank_dataloader"):
        raise RuntimeError("RGCL and retrieval classification read the training memes from a MemeDataModule (bank_dataloader)")
    was_training = module.training
    module.eval()
    embeddings: list[torch.Tensor] = []
    ids: list[str] = []
    labels: dict[str, list[torch.Tensor]] = {head: [] for head in module.heads}
    try:
        for batch in datamodule.bank_dataloader():
            batch = trainer.strategy.batch_to_device(batch)
            features = module.embed(batch)  # a filler batch (ZeRO-3 lockstep) still runs the collective forward
            if batch.get(FILLER):
                continue
            embeddings.append(features.float().cpu())
            ids += list(batch["ids"])
            for head in labels:
                labels[head].append(batch["labels"][head].long().cpu())
    finally:
        module.train(was_training)
    part = (torch.cat(embeddings), ids, {head: torch.cat(values) for head, values in labels.items()})
    if dist.is_available() and dist.is_initialized() and trainer.world_size > 1:
        parts: list[Any] = [None] * trainer.world_size
        dist.all_gather_object(parts, part)
        part = (
            torch.cat([p[0] for p in parts]),
            [i for p in parts for i in p[1]],
            {h: torch.cat([p[2][h] for p in parts]) for h in labels},
        )
    device = module.device
    return Bank.of(part[0].to(device), {head: values.to(device) for head, values in part[2].items()}, part[1])

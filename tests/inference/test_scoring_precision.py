"""`trainer.precision` reaches scoring: evaluate.py, predict.py, zero-shot and prompting run their forwards through
the Trainer built from the `trainer=` group (src/crossmod/inference/scoring.py), so bf16 mixed or true precision applies there as in
training. A probe module reports the dtype its layer computed in and the dtype its weights are held in."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from crossmod.inference.scoring import predict_in_order, scoring_trainer


class Probe(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 2)

    def predict_step(self, batch: dict, batch_idx: int) -> dict:
        out = self.linear(batch["x"])
        count = len(batch["index"])
        return {"index": batch["index"], "computed": [str(out.dtype)] * count, "held": [str(self.linear.weight.dtype)] * count}


class Rows:
    def __call__(self, record: dict) -> dict:
        return record

    def collate(self, records: list[dict]) -> dict:
        return {"x": torch.tensor([r["x"] for r in records], dtype=torch.float32)}


@pytest.mark.parametrize(
    ("precision", "computed", "held"),
    [
        ("32-true", "torch.float32", "torch.float32"),
        ("bf16-mixed", "torch.bfloat16", "torch.float32"),
        ("bf16-true", "torch.bfloat16", "torch.bfloat16"),
    ],
)
def test_the_trainer_groups_precision_reaches_the_scoring_forward(precision, computed, held):
    trainer = scoring_trainer(
        OmegaConf.create({"_target_": "lightning.pytorch.Trainer", "accelerator": "cpu", "devices": 1, "precision": precision})
    )
    records = [{"x": [float(k)] * 4} for k in range(5)]
    rows = predict_in_order(trainer, Probe(), records, batch_size=2, preprocessor=Rows())
    assert len(rows) == 5
    assert {row["computed"] for row in rows} == {computed} and {row["held"] for row in rows} == {held}

"""Issue 15, item 7: an undefined metric is NaN everywhere, and a NaN monitor never picks a checkpoint
silently.

The attack is a validation split with one class for every head (binary, multiclass and multilabel):
AUROC is undefined there. The run that must not hide it: a tiny real training run (MemeClassifier
on shards, the project's checkpoint callback beside Lightning's own). Lightning's ModelCheckpoint
keeps epoch 0 as "best" of a NaN monitor; the project's callback ranks nothing, says so each epoch
and at the end, and the metric warnings name head and split once per validation, not per step.
"""

from __future__ import annotations

import io
import logging
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from PIL import Image

from crossmod.data.memes import MemeDataModule
from crossmod.data.sample import Sample
from crossmod.data.shards import write_shards
from crossmod.models.module import MemeClassifier
from crossmod.training.callbacks.checkpoint import NanSafeModelCheckpoint

HEADS = {
    "US": {"kind": "binary"},
    "topic": {"kind": "multiclass", "classes": ["a", "b", "c"]},
    "emotion": {"kind": "multilabel", "classes": ["x", "y"]},
}
MONITOR = "val/mean/auroc"


def _png(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (shade, 255 - shade, 64)).save(buffer, format="PNG")
    return buffer.getvalue()


def _one_class_validation(directory: Path) -> Path:
    """Train: every class of every head. Val: 4 memes, all US=1, topic 'a', emotion [1, 0]."""
    train = [
        Sample(f"t/{i}", f"t/{i}", "en", "", _png(20 * i), {"US": i % 2, "topic": i % 3, "emotion": [i % 2, (i // 2) % 2]}, "train")
        for i in range(8)
    ]
    val = [Sample(f"v/{i}", f"v/{i}", "en", "", _png(30 * i), {"US": 1, "topic": 0, "emotion": [1, 0]}, "val") for i in range(4)]
    write_shards(train + val, directory, dataset="oneclass", heads=HEADS, params={}, maxcount=4)
    return directory


def _tiny_model() -> MemeClassifier:
    image = {"_target_": "crossmod.models.backbones.image.TimmImageEncoder", "model_name": "test_efficientnet"}
    return MemeClassifier(
        fusion={"_target_": "crossmod.models.fusion.ImageOnly"},
        preprocessor={"_target_": "crossmod.models.preprocess.MemePreprocessor", "image_model": "test_efficientnet", "image_size": 32},
        heads=HEADS,
        optimizer={"_target_": "torch.optim.AdamW", "lr": 1e-3},
        image=image,
    )


def _messages(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == logger and record.levelno == logging.WARNING]


def test_a_one_class_validation_split_is_nan_named_per_head_and_never_a_best_checkpoint(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    datamodule = MemeDataModule(heads=HEADS, shard_dir=str(_one_class_validation(tmp_path / "data")), batch_size=2, eval_batch_size=2)
    nan_safe = NanSafeModelCheckpoint(
        dirpath=tmp_path / "safe", filename="epoch{epoch:03d}", monitor=MONITOR, mode="max", auto_insert_metric_name=False
    )
    lightning_own = ModelCheckpoint(
        dirpath=tmp_path / "plain", filename="epoch{epoch:03d}", monitor=MONITOR, mode="max", auto_insert_metric_name=False
    )
    trainer = L.Trainer(
        max_epochs=2,
        limit_train_batches=2,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[nan_safe, lightning_own],
    )
    model = _tiny_model()
    datamodule.connect(model.preprocessor)
    trainer.fit(model, datamodule=datamodule)

    assert math.isnan(trainer.callback_metrics[MONITOR])
    for head in HEADS:
        assert math.isnan(trainer.callback_metrics[f"val/{head}/auroc"])  # binary, multiclass, multilabel alike
    assert Path(lightning_own.best_model_path).name == "epoch000.ckpt"  # the attack: Lightning's "best" is epoch 0
    assert nan_safe.best_model_path == "" and not list((tmp_path / "safe").glob("*.ckpt"))

    metric_warnings = _messages(caplog, "crossmod.models.module")
    expected = {
        "US": "auroc undefined (one class only: all 4 annotated items are 1)",
        "topic": "auroc undefined (class 'b', 'c' absent from the 4 annotated items)",
        "emotion": "auroc undefined (label 'x' is 1, 'y' is 0 in all 4 annotated items)",
    }
    # once per validation epoch (2 epochs × 2 batches each), none from the sanity check
    assert sorted(metric_warnings) == sorted(
        f"val: head {h}: {what}: NaN, left out of val/mean" for h, what in expected.items() for _ in range(2)
    )
    checkpoint_warnings = _messages(caplog, "crossmod.training.callbacks.checkpoint")
    assert [m.split(":")[0] for m in checkpoint_warnings[:2]] == ["epoch 0", "epoch 1"]
    assert all(f"{MONITOR} is NaN" in m and "not ranked" in m for m in checkpoint_warnings[:2])
    assert checkpoint_warnings[2].startswith(f"{MONITOR} was NaN at every validation (epochs [0, 1]): no checkpoint was selected")


class _Scripted(BoringModel):
    """Logs a given monitor value at each validation."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.values = values

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.log(MONITOR, torch.tensor(self.values[self.current_epoch]))


@pytest.mark.parametrize(
    "values, best, unranked",
    [([math.nan, 0.6, math.nan, 0.7, 0.65], 3, [0, 2]), ([0.8, math.nan], 0, [1]), ([math.nan, 0.5], 1, [0])],
)
def test_validations_with_a_nan_monitor_are_skipped_by_name_and_the_rest_ranked(tmp_path, caplog, values, best, unranked):
    caplog.set_level(logging.WARNING)
    callback = NanSafeModelCheckpoint(
        dirpath=tmp_path, filename="epoch{epoch:03d}", monitor=MONITOR, mode="max", auto_insert_metric_name=False
    )
    trainer = L.Trainer(
        max_epochs=len(values),
        limit_train_batches=1,
        limit_val_batches=1,
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )
    trainer.fit(_Scripted(values))
    assert Path(callback.best_model_path).name == f"epoch{best:03d}.ckpt"
    assert callback.unranked_epochs == unranked
    warnings = _messages(caplog, "crossmod.training.callbacks.checkpoint")
    assert [m.split(":")[0] for m in warnings] == [f"epoch {e}" for e in unranked]  # no "every validation" warning

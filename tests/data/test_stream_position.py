"""A run resumed from a checkpoint sees exactly the training batches the uninterrupted run saw after it.

Runs real Lightning fits of a one-parameter module that records the ids of every training batch, with
checkpoints written mid-epoch (as SLURM preemption does, in on_train_batch_end) and at an epoch's end.
Both restore orders Lightning has are covered: datamodule state before the train loader is built (the
default) and after it was built and iterated (strategies that restore after their setup, e.g. DeepSpeed).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.strategies import SingleDeviceStrategy

from crossmod.data.memes import MemeDataModule
from crossmod.data.synthetic import SyntheticMemeSource
from tests.data.test_length_groups import WordCounts
from tests.data.test_memes import HEADS, IdsOnly

BATCHES_PER_EPOCH = 6
EPOCHS = 3
MID = (1, 3)  # (epoch, batch index) after which the mid-epoch checkpoint is written: 4 batches of epoch 1 done


class RecordBatches(L.LightningModule):
    """Records (epoch, ids of the batch, one draw of torch's RNG) for every training step."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[tuple[int, tuple[str, ...], float]] = []

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, tuple(batch["ids"]), float(torch.rand(1))))
        return (self.weight**2).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        self.trainer.estimated_stepping_batches  # noqa: B018  (as the real module: builds the train loader here)
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SaveAt(L.Callback):
    """Writes `mid.ckpt` after batch MID and `end0.ckpt` at the end of epoch 0's training."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if (trainer.current_epoch, args[-1]) == MID:
            trainer.save_checkpoint(self.directory / "mid.ckpt")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == 0:
            trainer.save_checkpoint(self.directory / "end0.ckpt")


class RestoreAfterSetup(SingleDeviceStrategy):
    """Restores checkpoints after the strategy's setup, when the train loader is built and iterated (as DeepSpeed)."""

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return True


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shards")


def fit(
    shard_root: Path,
    workers: int,
    callbacks: list[L.Callback],
    ckpt_path: Path | None = None,
    after_setup: bool = False,
    group_by_length: bool = False,
    epoch: str = "pass",
):
    datamodule = MemeDataModule(
        heads=HEADS,
        source=SyntheticMemeSource(num_groups=20, image_size=32),
        shard_root=str(shard_root),
        preprocessor=WordCounts() if group_by_length else IdsOnly(),
        group_by_length=group_by_length,
        length_groups=3,
        batch_size=4,
        epoch=epoch,
        epoch_samples=4 * BATCHES_PER_EPOCH if epoch == "resampled" else None,  # a pass: every training meme once
        num_workers=workers,
        samples_per_shard=30,
        shuffle_buffer=50,
    )
    model = RecordBatches()
    trainer = L.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        strategy=RestoreAfterSetup(device=torch.device("cpu")) if after_setup else "auto",
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    return model.seen


def batches(seen: list[tuple[int, tuple[str, ...], float]]) -> list[tuple[int, tuple[str, ...]]]:
    return [(epoch, ids) for epoch, ids, _ in seen]


@pytest.mark.parametrize("epoch", ["pass", "resampled"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("after_setup", [False, True], ids=["restore-before-loader", "restore-after-loader"])
def test_resumed_stream_continues_with_the_uninterrupted_batches(shard_root, tmp_path, workers, after_setup, epoch):
    full = fit(shard_root, workers, [SaveAt(tmp_path)], epoch=epoch)
    per_epoch = sum(1 for e, _, _ in full if e == 0)
    assert len(full) == EPOCHS * per_epoch and per_epoch > MID[1] + 1
    if epoch == "resampled":
        assert per_epoch == BATCHES_PER_EPOCH
    else:  # a pass: each epoch holds every training meme exactly once (one rank), so the resumed epoch completes it
        memes = [Counter(i for e, ids, _ in full if e == k for i in ids) for k in range(EPOCHS)]
        assert all(set(m.values()) == {1} for m in memes) and memes[0] == memes[1] == memes[2]
    epochs = [[ids for e, ids, _ in full if e == k] for k in range(EPOCHS)]
    assert epochs[0] != epochs[1] != epochs[2], "each epoch is a different stream: where a resume starts matters"

    for checkpoint, done in (("mid.ckpt", MID[0] * per_epoch + MID[1] + 1), ("end0.ckpt", per_epoch)):
        resumed = fit(shard_root, workers, [], ckpt_path=tmp_path / checkpoint, after_setup=after_setup, epoch=epoch)
        # an even number of batches of the epoch done: with two workers the interrupted epoch resumes in the same order too
        assert batches(resumed) == batches(full[done:]), f"resumed from {checkpoint}"


def test_length_grouped_batches_resume_exactly_too(shard_root, tmp_path):
    full = fit(shard_root, 2, [SaveAt(tmp_path)], group_by_length=True)
    done = MID[0] * sum(1 for e, _, _ in full if e == 0) + MID[1] + 1
    resumed = fit(shard_root, 2, [], ckpt_path=tmp_path / "mid.ckpt", group_by_length=True)
    assert batches(resumed) == batches(full[done:])
    assert batches(full) != batches(fit(shard_root, 2, [])), "grouping changed the batches: the test compares grouped streams"


def test_checkpoints_hold_the_stream_position_and_a_fresh_fit_starts_at_zero(shard_root, tmp_path):
    full = fit(shard_root, 0, [SaveAt(tmp_path)])
    again = fit(shard_root, 0, [])
    assert batches(again) == batches(full)
    state = torch.load(tmp_path / "mid.ckpt", weights_only=True)["MemeDataModule"]
    assert state == {"train_stream": {"epoch": MID[0], "batches": MID[1] + 1}}
    state = torch.load(tmp_path / "end0.ckpt", weights_only=True)["MemeDataModule"]
    assert state == {"train_stream": {"epoch": 1, "batches": 0}}

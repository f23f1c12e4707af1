"""Batches from workers arrive as views of one buffer, with every value, dtype and shape unchanged."""

from __future__ import annotations

import torch

from crossmod.data.one_block import one_block
from tests.data.test_memes import HEADS, _datamodule


class TensorBatches:
    """A preprocessor whose batches hold tensors of several dtypes and a nested dict, like a meme batch."""

    def __call__(self, sample):
        return {"id": sample["id"], "labels": sample["labels"]}

    def collate(self, features):
        n = len(features)
        return {
            "ids": [f["id"] for f in features],
            "pixel_values": torch.arange(n * 3 * 5 * 5, dtype=torch.float32).view(n, 3, 5, 5),
            "input_ids": torch.arange(n * 7).view(n, 7),
            "mask": torch.ones(n, 7, dtype=torch.bool),
            "labels": {h: torch.tensor([-1 if f["labels"].get(h) is None else f["labels"][h] for f in features]).float() for h in HEADS},
        }


def _tensors(batch) -> list[torch.Tensor]:
    return [batch["pixel_values"], batch["input_ids"], batch["mask"], *batch["labels"].values()]


def test_views_of_one_buffer_hold_the_same_values():
    batch = TensorBatches().collate([{"id": str(i), "labels": {"US": i % 2}} for i in range(5)])
    packed = one_block(batch)
    assert packed["ids"] == batch["ids"]
    pointers = {t.untyped_storage().data_ptr() for t in _tensors(packed)}
    assert len(pointers) == 1
    for before, after in zip(_tensors(batch), _tensors(packed)):
        assert after.dtype == before.dtype and after.shape == before.shape and torch.equal(after, before)
        assert after.data_ptr() % 64 == 0


def test_worker_batches_cross_as_one_block_and_main_process_batches_are_left_alone(tmp_path):
    for workers, blocks in ((1, 1), (0, 8)):
        dm = _datamodule(tmp_path, num_workers=workers, batch_size=6, samples_per_shard=40)
        dm.preprocessor = TensorBatches()
        batch = next(iter(dm.train_dataloader()))
        assert len({t.untyped_storage().data_ptr() for t in _tensors(batch)}) == blocks
        val = next(iter(dm.val_dataloader()))
        assert len({t.untyped_storage().data_ptr() for t in _tensors(val)}) == blocks
        assert torch.equal(batch["input_ids"], torch.arange(6 * 7).view(6, 7))

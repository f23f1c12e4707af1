"""Length-grouped training batches: every meme once, batches of similar length, the same batches for the
same stream and seed (what resuming relies on), and far less padding than shuffled batches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crossmod.data.length_groups import LengthGroupedBatches
from crossmod.data.memes import MemeDataModule
from crossmod.data.synthetic import SyntheticMemeSource
from tests.data.test_memes import HEADS, IdsOnly


def memes(n: int) -> list[dict]:
    return [{"id": str(i), "length": (i * 7919) % 37 + 1} for i in range(n)]


def by_length(sample: dict) -> int:
    return sample["length"]


def test_every_sample_once_in_batches_sorted_within_each_buffer():
    grouped = list(LengthGroupedBatches(batch_size=4, groups=5, length=by_length, seed=0)(iter(memes(40))))
    assert len(grouped) == 10 and all(len(batch) == 4 for batch in grouped)
    assert sorted(s["id"] for batch in grouped for s in batch) == sorted(s["id"] for s in memes(40))
    for start in (0, 5):  # each buffer of 5 batches: cut from its memes sorted by length
        buffer = grouped[start : start + 5]
        spans = sorted((min(map(by_length, b)), max(map(by_length, b))) for b in buffer)
        assert all(high <= next_low for (_, high), (next_low, _) in zip(spans, spans[1:]))


def test_the_same_stream_and_seed_give_the_same_batches_another_seed_another_order():
    def ids(seed: int) -> list[list[str]]:
        return [[s["id"] for s in b] for b in LengthGroupedBatches(4, 5, by_length, seed)(iter(memes(40)))]

    assert ids(3) == ids(3)
    assert ids(3) != ids(4) and sorted(ids(3)) == sorted(ids(4))  # same batches, another order


def test_a_finite_stream_drops_only_its_last_incomplete_batch():
    grouped = list(LengthGroupedBatches(batch_size=4, groups=5, length=by_length, seed=0)(iter(memes(30))))
    assert sum(len(b) for b in grouped) == 28  # 20 in the full buffer, 8 of the last 10


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="batch_size >= 1 and groups >= 1"):
        LengthGroupedBatches(0, 5, by_length, 0)


class WordCounts(IdsOnly):
    """Ids and the number of words of each meme's text (its `length`)."""

    def length(self, sample):
        return len(sample["text"].split())

    def __call__(self, sample):
        return {"id": sample["id"], "length": self.length(sample)}

    def collate(self, features):
        return {"ids": [f["id"] for f in features], "lengths": [f["length"] for f in features]}


def padding_share(batches: list[dict]) -> float:
    """Real tokens / computed tokens when each batch is padded to its longest meme."""
    real = sum(sum(b["lengths"]) for b in batches)
    return real / sum(max(b["lengths"]) * len(b["lengths"]) for b in batches)


def train_batches(tmp_path, preprocessor, **options) -> list[dict]:
    dm = MemeDataModule(
        heads=HEADS,
        source=SyntheticMemeSource(num_groups=30, image_size=32),
        shard_root=str(tmp_path),
        preprocessor=preprocessor,
        batch_size=8,
        **options,
    )
    dm.prepare_data()
    dm.trainer = SimpleNamespace(global_rank=0, world_size=1, lightning_module=None)
    dm.setup("fit")
    return list(dm.train_dataloader())


def test_the_training_stream_groups_memes_by_length_and_computes_less_padding(tmp_path):
    shuffled = train_batches(tmp_path, WordCounts())
    grouped = train_batches(tmp_path, WordCounts(), group_by_length=True, length_groups=10)
    assert len(grouped) == len(shuffled)
    assert padding_share(grouped) > padding_share(shuffled)
    assert padding_share(grouped) >= 0.95, padding_share(grouped)
    assert train_batches(tmp_path, WordCounts(), group_by_length=True, length_groups=10) == grouped  # deterministic


def test_grouping_needs_a_preprocessor_that_counts_tokens(tmp_path):
    with pytest.raises(
        ValueError, match="group_by_length needs the model's preprocessor to count a meme's tokens; IdsOnly has no `length`"
    ):
        train_batches(tmp_path, IdsOnly(), group_by_length=True)

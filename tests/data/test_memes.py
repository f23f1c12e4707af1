"""Streaming: exact evaluation across ranks and workers, training epochs as passes (or resampled, fixed length), fold filtering."""

from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import pytest

from crossmod.data.folds import iter_records
from crossmod.data.memes import MemeDataModule
from crossmod.data.synthetic import SyntheticMemeSource

HEADS = {c: {"kind": "binary"} for c in ("US", "DE", "MX", "IN", "CN")}


class IdsOnly:
    """A minimal preprocessor: keeps ids, so tests count samples without decoding images."""

    def __call__(self, sample):
        return {"id": sample["id"]}

    def collate(self, features):
        return {"ids": [f["id"] for f in features]}


def _datamodule(tmp_path, rank=0, world=1, **kwargs) -> MemeDataModule:
    source = SyntheticMemeSource(num_groups=kwargs.pop("num_groups", 30), image_size=32)
    dm = MemeDataModule(heads=HEADS, source=source, shard_root=str(tmp_path), preprocessor=IdsOnly(), **kwargs)
    dm.prepare_data()
    dm.trainer = SimpleNamespace(global_rank=rank, world_size=world, lightning_module=None, strategy=None)
    dm.setup("fit")
    return dm


def _ids(loader) -> list[str]:
    return [sample_id for batch in loader for sample_id in batch["ids"]]


@pytest.mark.parametrize("world, workers", [(1, 0), (2, 2), (3, 2), (2, 4)])
def test_every_eval_sample_is_seen_exactly_once(tmp_path, world, workers):
    # 30 groups × 9 memes with 40 samples per shard: shard counts that do not divide evenly.
    seen = Counter()
    for rank in range(world):
        dm = _datamodule(tmp_path, rank=rank, world=world, num_workers=workers, samples_per_shard=40, eval_batch_size=7)
        seen.update(_ids(dm.val_dataloader()))
    expected = dm.manifest["counts"]["split"]["val"]
    assert len(seen) == expected and set(seen.values()) == {1}


@pytest.mark.parametrize("fold", [None, 0], ids=["train-split", "fold-run"])
def test_training_batches_do_not_depend_on_the_loader_workers(tmp_path, fold):
    """Batch i of a rank goes to worker i mod workers, the order a DataLoader takes them in: the training process sees
    the same batches in the same order for any data.num_workers (two epochs, two ranks)."""
    folds = {"fold": fold, "num_folds": 3} if fold is not None else {}
    streams = {}
    for workers in (0, 1, 2, 3):
        for rank in range(2):
            dm = _datamodule(tmp_path, rank=rank, world=2, num_workers=workers, batch_size=8, samples_per_shard=40, **folds)
            loader = dm.train_dataloader()
            streams[workers, rank] = [[list(batch["ids"]) for batch in loader] for _ in range(2)]
    for rank in range(2):
        assert streams[0, rank] == streams[1, rank] == streams[2, rank] == streams[3, rank], rank
    assert streams[0, 0] != streams[0, 1]


def test_eval_batches_do_not_depend_on_ranks_or_workers(tmp_path):
    """A val batch never spans two shards: the same memes share a batch (and its padding) for any ranks and workers."""
    batchings = []
    for world, workers in ((1, 0), (1, 2), (2, 0), (3, 2)):
        batches = []
        for rank in range(world):
            dm = _datamodule(tmp_path, rank=rank, world=world, num_workers=workers, samples_per_shard=40, eval_batch_size=7)
            batches += [tuple(batch["ids"]) for batch in dm.val_dataloader()]
        batchings.append(sorted(batches))
    assert all(batching == batchings[0] for batching in batchings)
    assert any(len(batch) < 7 for batch in batchings[0]), "shards of 40 leave short batches: the test sees shard boundaries"


def test_more_consumers_than_shards_still_covers_everything(tmp_path):
    seen = Counter()
    for rank in range(2):
        dm = _datamodule(tmp_path, rank=rank, world=2, num_workers=3, samples_per_shard=10_000)
        assert len([s for s in dm.manifest["shards"] if s["split"] == "test"]) == 1
        seen.update(_ids(dm.test_dataloader()))
    assert len(seen) == dm.manifest["counts"]["split"]["test"] and set(seen.values()) == {1}


@pytest.mark.parametrize("fold", [None, 0], ids=["train-split", "fold-run"])
@pytest.mark.parametrize("world, workers", [(1, 0), (1, 2), (2, 0), (2, 2), (3, 2)])
def test_an_epoch_shows_every_training_meme_once(tmp_path, world, workers, fold):
    """data.epoch=pass (the default): over the ranks an epoch holds every training meme once, plus the rule's
    ceil(N / world) · world − N repeats (at most world − 1); every rank runs the same number of batches, the last of a
    worker may be short; the next epoch is another order of the same memes."""
    folds = {"fold": fold, "num_folds": 3} if fold is not None else {}
    seen: Counter = Counter()
    lengths = []
    for rank in range(world):
        dm = _datamodule(tmp_path, rank=rank, world=world, num_workers=workers, batch_size=8, samples_per_shard=40, **folds)
        loader = dm.train_dataloader()
        epochs = [[list(batch["ids"]) for batch in loader] for _ in range(2)]
        assert len(epochs[0]) == len(epochs[1]) == len(loader)
        assert all(len(batch) <= 8 for batch in epochs[0]) and sum(len(batch) < 8 for batch in epochs[0]) <= max(workers, 1)
        assert epochs[0] != epochs[1], "each epoch draws another order"
        lengths.append(len(loader))
        seen.update(i for batch in epochs[0] for i in batch)
        assert Counter(i for batch in epochs[0] for i in batch) == Counter(i for batch in epochs[1] for i in batch) or world > 1
    splits, role = dm._plan().reads("train")
    names = [shard["name"] for shard in dm.manifest["shards"] if shard["split"] in splits]
    training = {r["id"] for r in iter_records(dm.dataset_dir, names) if role is None or dm.roles[r["group"]] == role}
    assert len(training) == dm.num_samples("train") > 0
    assert set(seen) == training
    repeats = sum(seen.values()) - len(training)
    assert repeats == math.ceil(len(training) / world) * world - len(training) and max(seen.values()) <= 2
    assert len(set(lengths)) == 1


@pytest.mark.parametrize("world, workers", [(1, 0), (2, 2)])
def test_resampled_epochs_have_the_same_fixed_length_on_every_rank(tmp_path, world, workers):
    lengths = []
    for rank in range(world):
        dm = _datamodule(tmp_path, rank=rank, world=world, num_workers=workers, batch_size=8, samples_per_shard=40, epoch="resampled")
        loader = dm.train_dataloader()
        batches = list(loader)
        assert len(batches) == len(loader)
        assert all(len(b["ids"]) == 8 for b in batches)
        lengths.append(len(batches))
    assert len(set(lengths)) == 1
    assert lengths[0] * 8 * world >= dm.num_samples("train")


def test_an_epoch_length_belongs_to_resampled_epochs(tmp_path):
    with pytest.raises(ValueError, match="data.epoch_samples=64 sets the length of a resampled epoch"):
        MemeDataModule(heads=HEADS, source=SyntheticMemeSource(num_groups=2), shard_root=str(tmp_path), epoch_samples=64)


def test_unknown_head_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="head 'FR' is not in the dataset synthetic"):
        dm = MemeDataModule(
            heads={"FR": {"kind": "binary"}}, source=SyntheticMemeSource(num_groups=5, image_size=32), shard_root=str(tmp_path)
        )
        dm.prepare_data()
        dm.setup("fit")


def test_shards_are_reused_and_regenerated_only_when_parameters_change(tmp_path):
    first = _datamodule(tmp_path, num_groups=6)
    stamp = (first.dataset_dir / "manifest.json").stat().st_mtime_ns
    again = _datamodule(tmp_path, num_groups=6)
    assert again.dataset_dir == first.dataset_dir
    assert (again.dataset_dir / "manifest.json").stat().st_mtime_ns == stamp
    changed = _datamodule(tmp_path, num_groups=7)
    assert changed.dataset_dir != first.dataset_dir


def test_the_preprocessor_is_handed_over_not_reached_for(tmp_path):
    dm = MemeDataModule(heads=HEADS, source=SyntheticMemeSource(num_groups=20, image_size=32), shard_root=str(tmp_path))
    dm.prepare_data()
    with pytest.raises(RuntimeError, match=r"call datamodule.connect\(model.preprocessor\)"):
        dm.setup("fit")
    dm.connect(IdsOnly())
    dm.setup("fit")
    assert _ids(dm.val_dataloader())


class Inputs:
    """Keeps what a model could read of each meme: its caption and its image bytes."""

    def __call__(self, sample):
        return {"id": sample["id"], "text": sample["text"], "image": sample["image"]}

    def collate(self, features):
        return {key: [f[key] for f in features] for key in ("id", "text", "image")}


@pytest.mark.parametrize("ablate", [None, "text", "image"])
def test_an_ablation_removes_one_modality_from_every_stage(tmp_path, ablate):
    """data.ablate=text: every caption empty; data.ablate=image: every image the same grey picture; in training,
    validation and test streams alike (and nothing else changed)."""
    from crossmod.data.ablation import grey_image

    dm = _datamodule(tmp_path, ablate=ablate, batch_size=8)
    dm.preprocessor = Inputs()
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        batches = list(loader)
        texts = [t for b in batches for t in b["text"]]
        images = [i for b in batches for i in b["image"]]
        assert texts and images
        if ablate == "text":
            assert set(texts) == {""} and len(set(images)) > 1
        elif ablate == "image":
            assert set(images) == {grey_image()} and len(set(texts)) > 1
        else:
            assert len(set(texts)) > 1 and len(set(images)) > 1


def test_an_unknown_ablation_is_refused(tmp_path):
    with pytest.raises(ValueError, match="data.ablate='audio': expected one of"):
        MemeDataModule(heads=HEADS, source=SyntheticMemeSource(num_groups=2), shard_root=str(tmp_path), ablate="audio")

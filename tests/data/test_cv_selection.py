"""No held-out id reaches a training, selection or retrieval-bank loader, under every selection rule, on one or several ranks.

The held-out ids are computed here from the shards and the manifest's stored assignment, independently
of the datamodule's filters; the loaders are then read as Lightning reads them (per rank, per worker).
"""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from types import SimpleNamespace

import pytest

from crossmod.data.memes import MemeDataModule
from crossmod.data.synthetic import SyntheticMemeSource
from tests.data.test_memes import HEADS, IdsOnly, _ids

NUM_FOLDS = 3


def _records(dataset_dir, manifest, splits):
    records = []
    for shard in manifest["shards"]:
        if shard["split"] in splits:
            with tarfile.open(dataset_dir / shard["name"]) as tar:
                records += [json.loads(tar.extractfile(m).read()) for m in tar if m.name.endswith(".json")]
    return records


def _datamodules(tmp_path, world: int, fold: int, selection: str, own_val: bool, workers: int) -> list[MemeDataModule]:
    modules = []
    for rank in range(world):
        dm = MemeDataModule(
            heads=HEADS,
            source=SyntheticMemeSource(num_groups=36, image_size=32),
            shard_root=str(tmp_path),
            preprocessor=IdsOnly(),
            fold=fold,
            num_folds=NUM_FOLDS,
            selection=selection,
            val_splits=["val"] if own_val else [],
            samples_per_shard=40,
            num_workers=workers,
            batch_size=8,
        )
        dm.prepare_data()
        dm.trainer = SimpleNamespace(global_rank=rank, world_size=world, lightning_module=None, strategy=None)
        dm.setup("fit")
        modules.append(dm)
    return modules


@pytest.mark.parametrize(
    "selection, own_val, world, workers",
    [("last", False, 1, 0), ("inner", False, 1, 0), ("inner", True, 1, 0), ("last", False, 2, 2), ("inner", False, 2, 2)],
)
def test_held_out_fold_reaches_only_the_test_stage(tmp_path, selection, own_val, world, workers):
    fold = 1
    modules = _datamodules(tmp_path, world, fold, selection, own_val, workers)
    dm = modules[0]
    manifest = json.loads((dm.dataset_dir / "manifest.json").read_text())
    entry = next(e for e in manifest["folds"] if e["num_folds"] == NUM_FOLDS)
    assert entry["splits"] == ["train"]  # folds divide the training split; a validation split stays one
    records = _records(dm.dataset_dir, manifest, ["train"])
    held_out = {r["id"] for r in records if entry["assignment"][r["group"]] == fold}
    assert held_out and len(held_out) == entry["samples_per_fold"][fold]

    trained, validated, tested, banked = Counter(), Counter(), Counter(), Counter()
    for module in modules:
        banked.update(_ids(module.bank_dataloader()))  # what RGCL mines and retrieval classifies from
        for _ in range(3):  # resampled training epochs: several passes, any of them could leak
            trained.update(_ids(module.train_dataloader()))
        if selection == "last":
            assert module.val_dataloader() == []  # no validation set at all
        else:
            validated.update(_ids(module.val_dataloader()))
        tested.update(_ids(module.test_dataloader()))

    assert not set(trained) & held_out, "a held-out meme reached the training stream"
    assert not set(validated) & held_out, "a held-out meme reached the selection set"
    assert not set(banked) & (held_out | set(validated)), "a held-out or selection meme reached the retrieval bank"
    assert set(banked) == set(trained) and set(banked.values()) == {1}, "the bank holds every training meme once"
    assert set(tested) == held_out and set(tested.values()) == {1}, "the held-out fold is scored exactly once, all of it"
    assert dm.num_samples("test") == len(held_out)
    if selection == "inner" and own_val:
        assert dm.selection_rule == "val_split"
        assert set(validated) == {r["id"] for r in _records(dm.dataset_dir, manifest, ["val"])}
    elif selection == "inner":
        assert dm.selection_rule == "inner"
        inner = next(i for i in entry["inner"] if i["fold"] == fold)
        assert validated and not set(validated) & set(trained)
        val_groups = {r["group"] for r in records if r["id"] in validated}
        assert val_groups == set(inner["groups"]) and sum(validated.values()) == inner["samples"] == dm.num_samples("val")
        assert not val_groups & {g for g, k in entry["assignment"].items() if k == fold}
        # groups never straddle the inner split either
        assert not val_groups & {r["group"] for r in records if r["id"] in trained}
    else:
        assert dm.selection_rule == "last"
    assert dm.held_out_labels().keys() == held_out


def test_inner_split_is_stored_once_and_reused(tmp_path):
    first = _datamodules(tmp_path, 1, 0, "inner", False, 0)[0]
    stamp = (first.dataset_dir / "manifest.json").stat().st_mtime_ns
    again = _datamodules(tmp_path, 1, 0, "inner", False, 0)[0]
    assert (again.dataset_dir / "manifest.json").stat().st_mtime_ns == stamp
    assert again.roles == first.roles


def test_selecting_on_the_held_out_fold_is_not_an_option(tmp_path):
    with pytest.raises(ValueError, match="the held-out fold is never a selection set"):
        MemeDataModule(heads=HEADS, shard_dir=str(tmp_path), fold=0, num_folds=3, selection="held_out")

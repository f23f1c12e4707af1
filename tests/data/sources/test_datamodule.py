"""Real-dataset sources inside MemeDataModule: folds, the fold=null guard, on_error wiring, shard reuse, train.py."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest

import crossmod.data.conversion as conversion
from crossmod.data.memes import MemeDataModule
from tests.data.sources import layouts
from tests.data.sources.helpers import source
from tests.data.test_memes import IdsOnly


def datamodule(src, tmp_path, **kwargs) -> MemeDataModule:
    dm = MemeDataModule(heads=src.heads, source=src, shard_root=str(tmp_path / "shards"), preprocessor=IdsOnly(), **kwargs)
    dm.prepare_data()
    dm.trainer = SimpleNamespace(global_rank=0, world_size=1, lightning_module=None)
    dm.setup("fit")
    return dm


def ids(loader) -> list[str]:
    return [i for batch in loader for i in batch["ids"]]


def test_multi3hate_three_folds_keep_translations_together(tmp_path):
    src = source("multi3hate", layouts.multi3hate(tmp_path / "raw", memes=9))
    folds_of = defaultdict(set)
    for fold in range(3):
        dm = datamodule(src, tmp_path, fold=fold, num_folds=3, train_splits=["all"], val_splits=[])
        held_out, selection = ids(dm.test_dataloader()), ids(dm.val_dataloader())
        assert len(held_out) == dm.num_samples("test") and len(selection) == dm.num_samples("val") > 0
        assert not {i.rsplit("/", 1)[0] for i in selection} & {i.rsplit("/", 1)[0] for i in held_out}  # inner split: other memes
        for sample_id in held_out:
            folds_of[sample_id.rsplit("/", 1)[0]].add(fold)
    assert len(folds_of) == 9 and all(len(f) == 1 for f in folds_of.values())  # every language version in one fold
    assert {f for fs in folds_of.values() for f in fs} == {0, 1, 2}


def test_fold_null_on_a_dataset_without_splits_says_to_cross_validate(tmp_path):
    src = source("mhc", layouts.mhc(tmp_path / "raw"))
    with pytest.raises(ValueError, match=r"has splits \['all'\].*fold=0 num_folds=3"):
        datamodule(src, tmp_path, fold=None, train_splits=["all"], val_splits=[])


def test_on_error_skip_in_the_source_allows_skipping_in_the_datamodule(tmp_path):
    raw = layouts.toxictags(tmp_path / "raw")
    (raw / "images" / "tt2.jpg").unlink()
    with pytest.raises(ValueError, match=r"toxictags.jsonl, line 3: id tt2: image file not found"):
        datamodule(source("toxictags", raw, val_share=0.5), tmp_path)
    dm = datamodule(source("toxictags", raw, on_error="skip", val_share=0.5), tmp_path)
    assert dm.manifest["skipped"] == [
        {"input": "toxictags.jsonl:3", "reason": f"id tt2: image file not found: {raw / 'images' / 'tt2.jpg'}"}
    ]
    assert dm.manifest["inputs_read"] == 8 == dm.manifest["samples_written"] + 1


def test_a_second_datamodule_reuses_the_shards(tmp_path, monkeypatch):
    raw = layouts.hateful_memes(tmp_path / "raw")
    first = datamodule(source("hateful_memes", raw), tmp_path)

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again although the shards exist")

    monkeypatch.setattr(conversion, "write_shards", no_conversion)
    second = datamodule(source("hateful_memes", raw), tmp_path)
    assert second.dataset_dir == first.dataset_dir
    assert sorted(ids(second.val_dataloader())) == sorted(ids(first.val_dataloader()))


def test_train_py_converts_multi3hate_on_first_use_and_reuses_it(train_run, data_dir, tmp_path, monkeypatch):
    raw = layouts.multi3hate(tmp_path / "raw")
    overrides = ("data=multi3hate", f"data.raw_dir={raw}", "fold=0", "num_folds=3", "debug=fdr", "data.num_workers=0")
    result = train_run(*overrides)
    assert "Converting multi3hate" in result.stdout
    assert "multi3hate: 30 inputs read = 30 samples written + 0 skipped" in result.stdout
    src = source("multi3hate", raw)
    monkeypatch.setattr(conversion, "write_shards", lambda *a, **k: pytest.fail("converted again"))
    dm = MemeDataModule(
        heads=src.heads, source=src, shard_root=str(data_dir / "shards"), fold=0, num_folds=3, train_splits=["all"], val_splits=[]
    )
    dm.prepare_data()
    assert dm.dataset_dir.is_dir()
    again = train_run(*overrides)
    assert "Converting multi3hate" not in again.stdout

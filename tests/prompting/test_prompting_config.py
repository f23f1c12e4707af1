"""The prompting jobs compose their own config (configs/prompting.yaml): the memes, the model that answers, the trainer
whose predict loop runs it and the run folder, and none of training's schedule, logging, checkpointing or decisions."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from crossmod.cli import JOBS
from crossmod.launch.command_line import config_name
from tests.conftest import ROOT

PROTOCOLS = {"zeroshot": "qwen_zeroshot", "fewshot": "toxictags_fewshot", "memebridge": "memebridge_prompting"}
TRAINING_KEYS = {"logger", "callbacks", "calibration", "abstention", "baselines", "ckpt_path", "keep_resume_checkpoints"}
TRAINING_KEYS |= {"optimized_metric", "cv_metric", "eval_data", "policy", "transfer", "plots", "print_table", "test"}


@pytest.mark.parametrize("job", sorted(PROTOCOLS))
def test_a_prompting_job_composes_its_own_config_without_trainings_keys(job):
    assert config_name(JOBS[job].module) == "prompting"
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("prompting", overrides=[f"experiment={PROTOCOLS[job]}"])
        trained = compose("train", overrides=[f"experiment={PROTOCOLS[job]}"])  # the same protocol, composed for training
    assert job in cfg and {"data", "model", "trainer", "paths", "seed", "fold", "name"} <= set(cfg)
    assert not TRAINING_KEYS & set(cfg) and TRAINING_KEYS - {"eval_data", "policy"} <= set(trained)  # groups null by default
    assert set(cfg.cv) == {"selection", "inner_share"}  # what the data configs read, none of cross_validate's extras
    # the same memes as a training run with the same fold=: the keys the data configs read are train.yaml's values
    for key in ("fold", "num_folds", "cv.selection", "cv.inner_share"):
        assert OmegaConf.select(cfg, key) == OmegaConf.select(trained, key), key
    if job != "zeroshot":  # qwen_zeroshot also scores through train.py (train=false: the zero-shot row of its table)
        assert "train" not in cfg

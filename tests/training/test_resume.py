"""Resuming from last.ckpt continues at the saved step and epoch."""

from __future__ import annotations

import csv
import json

import torch

from tests.conftest import SMALL_DATA


def _train_steps(run_dir) -> list[int]:
    rows = csv.DictReader(open(run_dir / "csv" / "metrics.csv"))
    return [int(r["step"]) for r in rows if r.get("train/loss")]


def test_resume_from_last_checkpoint_continues_at_the_saved_step(train_run):
    common = (*SMALL_DATA, "trainer.log_every_n_steps=1", "fold=0", "num_folds=3")
    # Monitoring the epoch number with mode=min makes epoch 0 the best and epoch 1 an epoch without
    # improvement: `last.ckpt` must still hold epoch 1, and the run scores the best one (epoch 0).
    never_improves = ("callbacks.model_checkpoint.monitor=epoch", "callbacks.model_checkpoint.mode=min")
    train_run(*common, *never_improves, "trainer.max_epochs=2", "test=false", "keep_resume_checkpoints=true")
    (first,) = train_run.run_dirs("synthetic_concat")
    last = first / "checkpoints" / "last.ckpt"
    saved = torch.load(last, map_location="cpu", weights_only=False)
    saved_step, saved_epoch = saved["global_step"], saved["epoch"]
    assert saved_step > 0
    best = train_run.metrics(first)["best_checkpoint"]
    assert best.endswith("epoch000.ckpt") and torch.load(best, map_location="cpu", weights_only=False)["epoch"] == 0

    result = train_run(*common, "trainer.max_epochs=3", f"ckpt_path={last}", env={"CROSSMOD_RUN_ID": "resumed"})
    console = result.stdout + result.stderr
    assert "train epoch 3/3: " in console  # progress lines go on after the resume
    assert "not resumable" not in console  # crossmod's loaders resume exactly: Lightning's warning would contradict it
    resumed = train_run.log_dir / "synthetic_concat" / "runs" / "resumed"
    steps = _train_steps(resumed)
    assert steps and min(steps) >= saved_step, f"resumed run logged step {min(steps)} before the saved step {saved_step}"
    metrics = train_run.metrics(resumed)
    assert metrics["epochs"] == 3 and saved_epoch == 1
    steps_per_epoch = saved_step // 2
    assert metrics["global_step"] == saved_step + steps_per_epoch
    # the cross-validation history travels in the checkpoint: the resumed fold reports all three epochs
    history = json.loads((resumed / "fold_result.json").read_text())["history"]
    assert [entry["epoch"] for entry in history] == [0, 1, 2]

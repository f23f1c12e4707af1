"""The best checkpoint holds weights only (it is scored, exported and evaluated, never resumed from); `last.ckpt` stays
full for resuming, and without a full `last.ckpt` the best checkpoint keeps the optimizer state after all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, SMALL_DATA, TrainRun, scaled
from tests.zygote import run_python

TRAINING_STATE = ("optimizer_states", "lr_schedulers", "callbacks")


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.fixture(scope="module")
def run(data_dir, tmp_path_factory) -> tuple[Path, TrainRun]:
    train_run = TrainRun(data_dir, tmp_path_factory.mktemp("best") / "runs")
    # the whole test split, as evaluate.py scores it
    train_run(
        *SMALL_DATA,
        "debug=limit",
        "trainer.limit_test_batches=1.0",
        "print_table=false",
        "keep_resume_checkpoints=true",
        env={"CROSSMOD_RUN_ID": "w"},
    )
    return train_run.log_dir / "synthetic_concat" / "runs" / "w", train_run


def test_best_checkpoint_has_weights_only_and_last_keeps_the_training_state(run):
    run_dir, _ = run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    best, last = Path(metrics["best_checkpoint"]), run_dir / "checkpoints" / "last.ckpt"
    assert best.parent == last.parent and best != last
    best_ckpt, last_ckpt = _load(best), _load(last)
    assert not set(TRAINING_STATE) & set(best_ckpt), sorted(best_ckpt)
    assert set(TRAINING_STATE) <= set(last_ckpt) and last_ckpt["optimizer_states"][0]["state"]
    assert {"state_dict", "hyper_parameters", "epoch", "global_step"} <= set(best_ckpt)  # what scoring and export load
    assert best.stat().st_size < 0.5 * last.stat().st_size  # Adam's two moments per weight are gone


def test_evaluate_scores_the_weights_only_checkpoint_as_the_run_did(run, tmp_path):
    run_dir, train_run = run
    result = run_python(
        [sys.executable, str(ROOT / "evaluate.py"), f"ckpt={run_dir}", *SMALL_DATA, f"paths.data_dir={train_run.data_dir}", f"out={tmp_path / 'r'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=scaled(600),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    entry = next(iter(json.loads((tmp_path / "r" / "report.json").read_text())["runs"].values()))
    tested = json.loads((run_dir / "metrics.json").read_text())["best"]["test"]
    for head in ("US", "DE"):
        assert entry["metrics"][head]["auroc"] == pytest.approx(tested[head]["auroc"], abs=1e-5)


def test_without_a_full_last_checkpoint_the_best_one_stays_resumable(train_run):
    train_run(
        *SMALL_DATA, "debug=limit", "trainer.max_epochs=1", "print_table=false", "test=false", "callbacks.last_checkpoint=null",
        env={"CROSSMOD_RUN_ID": "only"},
    )  # fmt: skip
    (best,) = (train_run.log_dir / "synthetic_concat" / "runs" / "only" / "checkpoints").glob("*.ckpt")
    assert best.name != "last.ckpt" and set(TRAINING_STATE) <= set(_load(best))


def test_a_run_without_validation_batches_scores_its_final_weights(data_dir, tmp_path):
    """`trainer.limit_val_batches=0`: nothing to rank, so the final weights are tested (and said to be), no crash."""
    train_run = TrainRun(data_dir, tmp_path / "runs")
    train_run(*SMALL_DATA, "debug=limit", "trainer.limit_val_batches=0", "print_table=false", env={"CROSSMOD_RUN_ID": "n"})
    metrics = json.loads((train_run.log_dir / "synthetic_concat" / "runs" / "n" / "metrics.json").read_text())
    assert metrics["selection"]["weights"] == "final" and "no checkpoint selected" in metrics["selection"]["description"]
    assert metrics["best"]["test"]["mean"]["auroc"] == metrics["best"]["test"]["mean"]["auroc"]  # scored, not NaN

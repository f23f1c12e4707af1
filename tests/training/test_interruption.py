"""A run stopped by a signal looks stopped: exit 128 + signal, a resumable checkpoint, `status.json` saying so; the
resume (`ckpt_path=`) continues in the same run folder and finishes it; a finished run keeps no resume-only state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT, SMALL_DATA, scaled

RUN = (
    *SMALL_DATA,
    "trainer.max_epochs=3",
    "print_table=false",
    "callbacks.progress_bar.mode=lines",
    "callbacks.progress_bar.every_n_steps=1",
)


def _stop_during_training(train_run, run_id: str, signum: int) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = train_run.log_dir / "synthetic_concat" / "runs" / run_id
    command = [sys.executable, str(ROOT / "train.py"), f"paths.data_dir={train_run.data_dir}", f"paths.log_dir={train_run.log_dir}", *RUN]
    env = {**os.environ, "CROSSMOD_RUN_ID": run_id, "WANDB_MODE": "offline"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + scaled(300)
    log = run_dir / "train.log"
    while "train epoch 2/3: 2/" not in (log.read_text() if log.is_file() else ""):  # mid-epoch, a few steps in
        assert process.poll() is None and time.monotonic() < deadline, (
            process.communicate()[0] if process.poll() is not None else "no progress"
        )
        time.sleep(0.2)
    process.send_signal(signum)
    output, _ = process.communicate(timeout=scaled(120))
    return subprocess.CompletedProcess(command, process.returncode, output), run_dir


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_saves_a_checkpoint_exits_nonzero_and_the_resume_finishes_the_same_run(train_run, signum):
    stopped, run_dir = _stop_during_training(train_run, f"stopped-{signum}", signum)
    assert stopped.returncode == 128 + signum, stopped.stdout[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    last = run_dir / "checkpoints" / "last.ckpt"
    assert status["state"] == "interrupted" and status["signal"] == signal.Signals(signum).name
    assert status["checkpoint"] == str(last) and status["resume"].endswith(f"ckpt_path={last}")
    assert not (run_dir / "metrics.json").exists()
    state = torch.load(last, map_location="cpu", weights_only=True)
    assert state["optimizer_states"] and state["epoch"] == 1, "the full training state, mid-epoch 2"
    assert f"resume with: {status['resume']}" in stopped.stdout
    if signum == signal.SIGINT:  # a Ctrl-C is named as one, though Lightning stops the ranks through SIGTERM
        assert "Received SIGINT" in stopped.stdout and "Received SIGTERM" not in stopped.stdout, stopped.stdout[-3000:]
        return
    # the resume continues the same folder (no new run), its best tracking and status, and finishes
    before = sorted(p.name for p in (train_run.log_dir / "synthetic_concat" / "runs").iterdir())
    train_run(*RUN, f"ckpt_path={last}", env={"CROSSMOD_RUN_ID": "would-be-new"})
    assert sorted(p.name for p in (train_run.log_dir / "synthetic_concat" / "runs").iterdir()) == before
    metrics = train_run.metrics(run_dir)
    assert metrics["epochs"] == 3 and json.loads((run_dir / "status.json").read_text())["state"] == "finished"
    log = (run_dir / "train.log").read_text()
    assert "Resuming the training stream at epoch 1, batch " in log and "the same batches in the same order" in log
    assert "not resumable" not in log and "train epoch 3/3" in log, "progress lines continue after the resume"
    assert Path(metrics["best_checkpoint"]).parent == run_dir / "checkpoints"
    assert not last.exists(), "a finished run keeps no optimizer state (keep_resume_checkpoints=false)"


def test_a_finished_run_keeps_the_weights_it_scored_and_no_more(train_run):
    train_run(*SMALL_DATA, "trainer.max_epochs=1", "print_table=false", env={"CROSSMOD_RUN_ID": "slim"})
    train_run(*SMALL_DATA, "trainer.max_epochs=1", "print_table=false", "keep_resume_checkpoints=true", env={"CROSSMOD_RUN_ID": "kept"})
    runs = train_run.log_dir / "synthetic_concat" / "runs"
    slim, kept = (sorted(f.name for f in (runs / name / "checkpoints").iterdir()) for name in ("slim", "kept"))
    assert slim == [Path(train_run.metrics(runs / "slim")["best_checkpoint"]).name]
    assert sorted(kept) == sorted([*slim, "last.ckpt"])
    best = runs / "slim" / "checkpoints" / slim[0]
    on_disk = sum(f.stat().st_size for f in (runs / "slim" / "checkpoints").iterdir())
    assert on_disk <= 1.2 * best.stat().st_size
    assert (runs / "kept" / "checkpoints" / "last.ckpt").stat().st_size > 2 * best.stat().st_size  # Adam's two moments


def test_final_weights_runs_keep_a_weights_only_last_checkpoint(train_run):
    train_run(
        *SMALL_DATA,
        "fold=0",
        "num_folds=3",
        "cv.selection=last",
        "trainer.max_epochs=1",
        "print_table=false",
        env={"CROSSMOD_RUN_ID": "final"},
    )
    run_dir = train_run.log_dir / "synthetic_concat" / "runs" / "final"
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert "optimizer_states" not in state and state["state_dict"]
    assert json.loads((run_dir / "status.json").read_text())["removed_resume_checkpoints"]


# A signal raised at a chosen place of the run (setup, the baselines, testing): the place's function, patched to
# send SIGTERM to its own process before it runs, as a user's kill would arrive there.
STOP_AT = {
    "model setup": ("transformers", "AutoTokenizer", "from_pretrained"),  # inside Hydra's instantiate of the model
    "baselines": ("crossmod.results.baselines", None, "compute"),
    "testing": ("lightning.pytorch", "Trainer", "test"),
}
STOPPER = """
import importlib, os, signal, sys
module, owner, name = sys.argv[1:4]
target = importlib.import_module(module)
holder = getattr(target, owner) if owner != "-" else target
original = getattr(holder, name)
def stop(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    return original(*args, **kwargs)
setattr(holder, name, staticmethod(stop) if isinstance(holder, type) and name == "from_pretrained" else stop)
sys.argv = ["train.py", *sys.argv[4:]]
from crossmod.recipes.train import main
main()
"""


@pytest.mark.parametrize("place", list(STOP_AT))
def test_a_signal_anywhere_in_the_run_exits_143_and_says_interrupted(train_run, place):
    module, owner, name = STOP_AT[place]
    run_id = f"stopped-at-{place.replace(' ', '-')}"
    overrides = [f"paths.data_dir={train_run.data_dir}", f"paths.log_dir={train_run.log_dir}", *RUN, "trainer.max_epochs=1"]
    env = {**os.environ, "CROSSMOD_RUN_ID": run_id, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", STOPPER, module, owner or "-", name, *overrides],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(600),
    )  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, (done.stdout[-2000:], done.stderr[-3000:])
    status = json.loads((train_run.log_dir / "synthetic_concat" / "runs" / run_id / "status.json").read_text())
    assert status["state"] == "interrupted" and status["signal"] == "SIGTERM", status

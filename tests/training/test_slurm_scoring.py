"""After a SLURM requeue the run directory holds `checkpoints/requeue/hpc_ckpt_<n>.ckpt`: fit resumes from the newest,
and validate/test with ckpt_path=None still score the weights in memory (the final or restored best ones), not the
preemption point's (src/crossmod/training/slurm.py). Lightning substitutes its own `<default_root_dir>/hpc_ckpt_<n>.ckpt`
for ckpt_path=None under SLURM; crossmod's never lie there."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from crossmod.runtime.resolvers import run_folder
from crossmod.training.slurm import next_requeue_path, requeue_checkpoint

SLURM_JOB = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "crossmod-train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


def _parsed(trainer: L.Trainer, fn: TrainerFn) -> object:
    # Lightning's own resolution of ckpt_path=None (private: the only way to ask it without running a loop)
    return trainer._checkpoint_connector._parse_ckpt_path(fn, None, model_provided=True, model_connected=True)


def test_in_memory_weights_are_scored_although_a_requeue_checkpoint_exists(tmp_path, monkeypatch):
    for key, value in SLURM_JOB.items():
        monkeypatch.setenv(key, value)
    trainer = L.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    saved = next_requeue_path(tmp_path)
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"")
    assert _parsed(trainer, TrainerFn.TESTING) is None and _parsed(trainer, TrainerFn.VALIDATING) is None
    # where Lightning's would lie, it substitutes it: the reason crossmod's are kept elsewhere
    (tmp_path / "hpc_ckpt_1.ckpt").write_bytes(b"")
    assert _parsed(trainer, TrainerFn.TESTING) == str(tmp_path / "hpc_ckpt_1.ckpt")


def test_the_newest_requeue_checkpoint_is_the_highest_number(tmp_path):
    assert requeue_checkpoint(tmp_path) is None
    assert next_requeue_path(tmp_path) == tmp_path / "checkpoints" / "requeue" / "hpc_ckpt_1.ckpt"
    folder = tmp_path / "checkpoints" / "requeue"
    folder.mkdir(parents=True)
    for n in (1, 2, 9, 10):
        (folder / f"hpc_ckpt_{n}.ckpt").write_bytes(b"")
    (folder / "hpc_ckpt_x.ckpt").write_bytes(b"")  # not a number: not crossmod's
    assert requeue_checkpoint(tmp_path) == folder / "hpc_ckpt_10.ckpt"  # numerically, not by name
    assert next_requeue_path(tmp_path) == folder / "hpc_ckpt_11.ckpt"


def test_a_requeue_checkpoint_resumes_in_its_run_folder(tmp_path):
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "config.yaml").write_text("{}")
    hpc = next_requeue_path(run)
    assert run_folder(str(hpc), "new") == str(run)
    (run / "metrics.json").write_text("{}")  # a finished run trained further keeps its results
    assert run_folder(str(hpc), "new") == "new"


def test_a_finished_run_drops_its_requeue_checkpoints_unless_kept(tmp_path):
    from crossmod.artifacts.finished_run import finished_run_checkpoints

    hpc = next_requeue_path(tmp_path)
    hpc.parent.mkdir(parents=True)
    hpc.write_bytes(b"")
    assert finished_run_checkpoints(tmp_path, None, keep=True) == [] and hpc.exists()
    assert finished_run_checkpoints(tmp_path, None) == [str(hpc)]
    assert not hpc.parent.exists()  # the emptied folder goes too

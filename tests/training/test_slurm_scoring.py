"""After a SLURM requeue the run directory holds `hpc_ckpt_<n>.ckpt`; validate/test with ckpt_path=None must still
score the weights in memory (the final or restored best ones), not the preemption point's (src/crossmod/training/slurm.py)."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.trainer.states import TrainerFn

from crossmod.training.slurm import scoring_weights_in_memory

SLURM_JOB = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "crossmod-train", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


def test_in_memory_weights_are_scored_although_an_hpc_checkpoint_exists(tmp_path, monkeypatch):
    for key, value in SLURM_JOB.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "hpc_ckpt_1.ckpt").write_bytes(b"")
    trainer = L.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    connector = trainer._checkpoint_connector
    # what Lightning does by itself under SLURM: ckpt_path=None becomes the newest hpc checkpoint
    assert connector._parse_ckpt_path(TrainerFn.TESTING, None, model_provided=True, model_connected=True) == str(
        tmp_path / "hpc_ckpt_1.ckpt"
    )
    with scoring_weights_in_memory(trainer):
        assert connector._parse_ckpt_path(TrainerFn.TESTING, None, model_provided=True, model_connected=True) is None
        assert connector._parse_ckpt_path(TrainerFn.VALIDATING, None, model_provided=True, model_connected=True) is None
    assert type(connector)._hpc_resume_path.fget(connector) == str(tmp_path / "hpc_ckpt_1.ckpt")  # restored after the block

"""SLURM support for `train.py`: the allocation check and preemption (SIGUSR1 → checkpoint → requeue → resume).

`check_allocation` stops every rank at startup when the trainer's nodes × devices disagree with the job.

`SlurmRequeue` replaces Lightning's in-signal-handler checkpointing (which runs collectives from inside a
signal handler, wherever each rank happens to be: ranks can deadlock or exchange mismatched buffers) with a
deferred one: SIGUSR1 only sets a flag; at the next training-batch boundary the ranks agree on it (one
tiny all-reduce per step), all save `checkpoints/requeue/hpc_ckpt_<n>.ckpt` in the run directory (keyed by the job
id), rank 0 runs `scontrol requeue <job>` and the ranks wait to be stopped by SLURM. The requeued job starts with the
same job id, hence the same run directory, and the pipeline resumes fit from the newest of them (`requeue_checkpoint`,
passed as fit's `ckpt_path`): model, optimizer, scheduler, loops (epoch, batch, global step), callbacks, and the
datamodule's training-stream position (src/crossmod/data/stream_position.py). The RNG states travel in the same checkpoint (src/crossmod/training/callbacks/rng_states.py):
the resumed run sees exactly the batches and draws of the uninterrupted one.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)
REQUEUE_DIR = Path("checkpoints") / "requeue"  # inside the run directory


class AllocationMismatch(RuntimeError):
    pass


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def check_allocation(trainer_cfg: DictConfig | dict, env: dict[str, str] | None = None) -> None:
    """Under `srun`, fail unless trainer.num_nodes × trainer.devices matches the job step's tasks.

    Lightning would otherwise hang in the rendezvous (too few processes) or compare only some of the
    numbers; the message names both sides and how to fix them.
    """
    env = dict(os.environ if env is None else env)
    if "SLURM_NTASKS" not in env or "SLURM_STEP_ID" not in env and "SLURM_PROCID" not in env:
        return  # not inside an srun job step
    if env.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return  # Lightning's convention: an interactive allocation, processes launched by Lightning itself
    nodes, devices = _as_int(trainer_cfg.get("num_nodes", 1)), _as_int(trainer_cfg.get("devices", 1))
    ntasks = int(env["SLURM_NTASKS"])
    job_nodes = _as_int(env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES"))
    per_node = env.get("SLURM_NTASKS_PER_NODE")
    problems = []
    if nodes is not None and devices is not None and nodes * devices != ntasks:
        problems.append(
            f"trainer.num_nodes={nodes} x trainer.devices={devices} = {nodes * devices} processes, "
            f"but SLURM started SLURM_NTASKS={ntasks} tasks"
        )
    if nodes is not None and job_nodes is not None and nodes != job_nodes:
        problems.append(f"trainer.num_nodes={nodes}, but the job has {job_nodes} nodes (SLURM_NNODES)")
    if devices is not None and per_node is not None and _as_int(per_node) is not None and devices != int(per_node):
        problems.append(f"trainer.devices={devices}, but the job has --ntasks-per-node={per_node}")
    if problems:
        hint_nodes = job_nodes or nodes
        hint_devices = ntasks // hint_nodes if hint_nodes else ntasks
        raise AllocationMismatch(
            "SLURM allocation and trainer disagree: "
            + "; ".join(problems)
            + f". Run one task per device: set trainer.num_nodes={hint_nodes} trainer.devices={hint_devices}"
            " (slurm/train.sbatch derives both from the allocation unless overridden) or change"
            " sbatch --nodes/--ntasks-per-node."
        )


def _job_id() -> str:
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ["SLURM_JOB_ID"]


class SlurmRequeue(Callback):
    """Deferred SIGUSR1 → hpc checkpoint at a batch boundary → `scontrol requeue` (see module)."""

    def __init__(self, enabled: bool | None = None, signum: int = signal.SIGUSR1, check_every_n_steps: int = 5) -> None:
        self.enabled = SLURMEnvironment.detect() if enabled is None else enabled
        self.check_every_n_steps = check_every_n_steps
        self.signum = signum
        self._requested = False
        if self.enabled:
            # Installed now, for the whole process: Lightning then leaves SIGUSR1 alone (it only installs
            # its own handler where none is set) and restores this one after each fit/validate/test.
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("Received signal %s: checkpoint and requeue at the next training batch boundary", signum)
        self._requested = True

    # ------------------------------------------------------------------ preemption
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.enabled:
            return
        # The ranks agree on a pending signal every `check_every_n_steps` steps, not every step: the
        # all-reduce is a host sync, and SLURM's --signal=USR1@90 leaves far more time than that.
        if (trainer.global_step % self.check_every_n_steps) or not trainer.strategy.reduce_boolean_decision(self._requested, all=False):
            return
        if batch_idx + 1 >= trainer.num_training_batches:
            return  # last batch of the epoch: save after the next one (a mid-epoch position resumes exactly)
        self._preempt(trainer)

    def _preempt(self, trainer: L.Trainer) -> None:
        for logger in trainer.loggers:
            logger.save()
        path = str(next_requeue_path(Path(trainer.default_root_dir)))
        trainer.save_checkpoint(path)  # on every rank: the RNG states of all ranks are gathered into it
        requeued = False
        if trainer.is_global_zero:
            job = _job_id()
            result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
            requeued = result.returncode == 0
            if requeued:
                log.info("Saved %s at step %d; requeued SLURM job %s", path, trainer.global_step, job)
            else:
                log.warning("Saved %s but `scontrol requeue %s` failed: %s", path, job, result.stderr.strip())
        requeued = trainer.strategy.broadcast(requeued, src=0)
        self._requested = False
        if requeued:
            while True:  # SLURM stops the job steps (SIGTERM, then SIGKILL after KillWait) and starts it again
                time.sleep(1)


def requeue_checkpoint(run_dir: Path) -> Path | None:
    """The newest requeue checkpoint of a run (the highest `<n>`), or None.

    They are kept under `checkpoints/requeue/`, not where Lightning looks for its own `hpc_ckpt_<n>.ckpt` (the
    trainer's default_root_dir): Lightning would otherwise substitute the newest one for `ckpt_path=None` in
    validate/test under SLURM, and score the preemption point's weights instead of the final or best ones."""
    found = [(int(m[1]), p) for p in (run_dir / REQUEUE_DIR).glob("hpc_ckpt_*.ckpt") if (m := re.fullmatch(r"hpc_ckpt_(\d+)\.ckpt", p.name))]
    return max(found)[1] if found else None


def next_requeue_path(run_dir: Path) -> Path:
    newest = requeue_checkpoint(run_dir)
    number = int(newest.stem.rsplit("_", 1)[1]) + 1 if newest else 1
    return run_dir / REQUEUE_DIR / f"hpc_ckpt_{number}.ckpt"

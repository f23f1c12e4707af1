"""SLURM support for `train.py`: the allocation check and preemption (SIGUSR1 → checkpoint → requeue → resume).

`check_allocation` stops every rank at startup when the trainer's nodes × devices disagree with the job.

`SlurmRequeue` replaces Lightning's in-signal-handler checkpointing (which runs collectives from inside a
signal handler, wherever each rank happens to be: ranks can deadlock or exchange mismatched buffers) with a
deferred one: SIGUSR1 only sets a flag; at the next training-batch boundary the ranks agree on it (one
tiny all-reduce per step), all save `hpc_ckpt_<n>.ckpt` in `trainer.default_root_dir` (the run directory,
keyed by the job id), rank 0 runs `scontrol requeue <job>` and the ranks wait to be stopped by SLURM. The
requeued job starts with the same job id, hence the same run directory, and Lightning restores the newest
`hpc_ckpt_*.ckpt` there by itself (checkpoint_connector `_hpc_resume_path`): model, optimizer, scheduler,
loops (epoch, batch, global step), callbacks. This callback adds what Lightning does not restore:

- the RNG states of every rank (dropout), saved with the checkpoint and set again when training resumes
  (validation during fit is kept from moving the training RNG, so resumed and uninterrupted runs agree);
- the position in the training stream. The datamodule's stream is resampled shards seeded per
  (seed, rank, epoch), whose epoch counter lives in the (fresh) dataset object; on resume it is set to the
  checkpoint's epoch and the batches of that epoch that were already trained on are skipped, so the
  resumed run sees exactly the batches the uninterrupted run would have seen ("data position within
  tolerance": exact with `data.num_workers` <= 1; with more workers the rest of the interrupted epoch is
  the same batches in a rotated worker order). Resuming from an epoch-end checkpoint (`ckpt_path=last`)
  keeps the datamodule's own behaviour.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig

log = logging.getLogger(__name__)


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


def _rng_states() -> dict[str, Any]:
    """Lightning's RNG snapshot with numpy's array as a tensor: checkpoints must load with weights_only=True."""
    states = _collect_rng_states(include_cuda=torch.cuda.is_available())
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    states["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss))
    return states


def _set_states(states: dict[str, Any]) -> None:
    states = dict(states)
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    states["numpy"] = (kind, keys.numpy().astype("uint32"), pos, has_gauss, gauss)
    _set_rng_states(states)


def _job_id() -> str:
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    return os.environ["SLURM_JOB_ID"]


class _SkipOnce:
    """Pipeline stage: drops the first `counts[worker]` items of the next iteration only."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def __call__(self, src):
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else 0
        skip, self.counts = self.counts[worker] if worker < len(self.counts) else 0, [0] * len(self.counts)
        for i, item in enumerate(src):
            if i >= skip:
                yield item


class SlurmRequeue(Callback):
    """Deferred SIGUSR1 → hpc checkpoint at a batch boundary → `scontrol requeue`; exact resume (see module)."""

    def __init__(self, enabled: bool | None = None, signum: int = signal.SIGUSR1, check_every_n_steps: int = 5) -> None:
        self.enabled = SLURMEnvironment.detect() if enabled is None else enabled
        self.check_every_n_steps = check_every_n_steps
        self.signum = signum
        self._requested = False
        self._rng_states: list[dict[str, Any]] | None = None
        self._restore_rng: list[dict[str, Any]] | None = None
        self._rng_before_val: dict[str, Any] | None = None
        if self.enabled:
            # Installed now, for the whole process: Lightning then leaves SIGUSR1 alone (it only installs
            # its own handler where none is set) and restores this one after each fit/validate/test.
            signal.signal(signum, self._on_signal)

    @property
    def state_key(self) -> str:
        return "SlurmRequeue"

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("Received signal %s: checkpoint and requeue at the next training batch boundary", signum)
        self._requested = True

    # ------------------------------------------------------------------ preemption
    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Validation during fit must not move the training RNG: building the val loader's iterator draws a
        # worker seed from torch's RNG the first time only, which a resumed run does at a different epoch.
        self._rng_before_val = _collect_rng_states(include_cuda=torch.cuda.is_available())
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
        states = _rng_states()
        if trainer.world_size > 1 and torch.distributed.is_initialized():
            gathered: list[Any] = [None] * trainer.world_size
            torch.distributed.all_gather_object(gathered, states)
            self._rng_states = gathered
        else:
            self._rng_states = [states]
        for logger in trainer.loggers:
            logger.save()
        path = trainer._checkpoint_connector.hpc_save_path(trainer.default_root_dir)
        trainer.save_checkpoint(path)
        self._rng_states = None
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

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and getattr(self, "_rng_before_val", None) is not None:
            _set_rng_states(self._rng_before_val)
            self._rng_before_val = None

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict[str, Any]:
        # Every rank's RNG state (checkpoints are dumped on every rank; DDP writes rank 0's file only).
        if self._rng_states is not None:
            return {"rng": self._rng_states}
        states = _rng_states()
        if torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, states)
            return {"rng": gathered}
        return {"rng": [states]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restore_rng = state_dict.get("rng")

    # ------------------------------------------------------------------ resume
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # After the checkpoint's loop state is restored and before the first batch. The train loader and its
        # iterator (workers included) were built earlier (Lightning sizes the scheduler from it), so the
        # stream is repositioned and its iterator rebuilt here; then the RNG states are set. A checkpoint
        # loaded for fitting (mid-epoch or at an epoch boundary) is recognised by its RNG states.
        if self._restore_rng is None:
            return
        states = self._restore_rng[trainer.global_rank % len(self._restore_rng)]
        self._restore_rng = None
        loader = trainer.train_dataloader
        # A loader without persistent workers builds a new iterator (one draw from torch's RNG) at every
        # epoch start: at an epoch boundary the saved states must be in place before that draw.
        new_iterator_each_epoch = not (getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0)
        restore_first = new_iterator_each_epoch and _at_epoch_boundary(trainer, loader)
        if restore_first:
            _set_states(states)
        if _reposition_stream(trainer, loader):
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
            if hasattr(loader, "_iterator"):
                loader._iterator = None
            iter(trainer.fit_loop._data_fetcher)
        if not restore_first:
            _set_states(states)


def _batches_done(trainer: L.Trainer) -> int:
    """Training batches of the current epoch already done according to the restored loop state."""
    current = trainer.fit_loop.epoch_loop.batch_progress.current
    if current.ready == current.started == current.processed == current.completed + 1:
        return current.processed  # saved in on_train_batch_end: that batch is done
    return current.completed


def _at_epoch_boundary(trainer: L.Trainer, loader: Any) -> bool:
    """Whether the restored loop state sits between epochs (no batch of the next epoch done yet)."""
    done = _batches_done(trainer)
    try:
        length = len(loader)
    except TypeError:
        length = None
    return done <= 0 or (length is not None and done >= length)


def _reposition_stream(trainer: L.Trainer, loader: Any) -> bool:
    """Put the resampled training stream where the restored loop state says training was (True if moved).

    The stream's shard order depends on its epoch counter, which a fresh process starts at zero: it is
    set to the epoch about to run, and within an epoch the batches already done are skipped.
    """
    done = _batches_done(trainer)
    at_boundary = _at_epoch_boundary(trainer, loader)
    pipeline = getattr(getattr(loader, "dataset", None), "pipeline", None)
    if not pipeline:
        log.warning("Resuming, but the training loader is not a webdataset pipeline: its data order is not restored")
        return False
    import webdataset as wds

    shards = [stage for stage in pipeline if isinstance(stage, wds.ResampledShards)]
    if len(shards) != 1:
        log.warning("Resuming, but found %d resampled shard lists: the data order is not restored", len(shards))
        return False
    epoch = trainer.current_epoch
    shards[0].epoch = epoch - 1  # incremented when the epoch's iteration starts
    if at_boundary:
        rank_zero_info(f"Resuming the training stream at the start of epoch {epoch}")
        return True
    workers = max(1, getattr(loader, "num_workers", 0))
    pipeline.append(_SkipOnce([done // workers + (1 if w < done % workers else 0) for w in range(workers)]))
    rank_zero_info(f"Resuming the training stream at epoch {epoch}, batch {done}")
    return True

"""A finished run keeps the weights it scored, not the state it could have resumed from.

`last.ckpt` (weights + optimizer and scheduler state: about 3× the weights under Adam) and the SLURM requeue
checkpoints `checkpoints/requeue/hpc_ckpt_*.ckpt` exist to resume a run; once it has finished they only take disk (6.1 GB for one small
Table 11). With a best checkpoint (weights only, configs/callbacks/default.yaml) both go; without one (the run
scored its final weights: `cv.selection=last`, no ranked validation) `last.ckpt` is those weights and is rewritten
without its optimizer and scheduler state. `keep_resume_checkpoints=true` keeps everything (to train on from a
finished run). A DeepSpeed checkpoint directory that holds the scored weights stays whole: its fp32 weights live
in the optimizer shards.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from crossmod.data.cache_files import atomic_file

log = logging.getLogger(__name__)
RESUME_STATE = ("optimizer_states", "lr_schedulers", "callbacks")  # what a weights-only Lightning checkpoint leaves out


def finished_run_checkpoints(run_dir: Path, best: str | None, keep: bool = False) -> list[str]:
    """Remove (or slim) the resume-only checkpoints of a finished run; return what was removed or slimmed."""
    if keep or rank_zero_only.rank != 0:
        return []
    changed: list[str] = []
    requeue = Path(run_dir) / "checkpoints" / "requeue"  # crossmod.training.slurm's REQUEUE_DIR (a room above this one)
    for hpc in sorted(requeue.glob("hpc_ckpt_*.ckpt")):
        _remove(hpc)
        changed.append(str(hpc))
    if requeue.is_dir() and not requeue.is_symlink() and not any(requeue.iterdir()):
        requeue.rmdir()
    last = Path(run_dir) / "checkpoints" / "last.ckpt"
    if best and last.exists() and last.resolve() != Path(best).resolve():
        _remove(last)
        changed.append(str(last))
    elif not best and last.is_file() and weights_only(last):
        changed.append(f"{last} (optimizer and scheduler state)")
    if changed:
        log.info("Run finished: removed the resume-only checkpoint state (%s); keep_resume_checkpoints=true keeps it", ", ".join(changed))
    return changed


def weights_only(path: Path) -> bool:
    """Rewrite a Lightning checkpoint file without its resume state, atomically; False when it has none."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    if not any(key in checkpoint for key in RESUME_STATE):
        return False
    for key in RESUME_STATE:
        checkpoint.pop(key, None)
    # an exclusively created temporary name: a link planted in a shared run folder is never written through
    with atomic_file(path, "checkpoint", user_folder=True) as handle:
        torch.save(checkpoint, handle)
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()

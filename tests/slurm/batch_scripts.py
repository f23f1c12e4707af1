"""Runs a batch script of slurm/ as SLURM would start it on an allocation, with `srun`, `scontrol` (and the environment's python)
replaced by stand-ins that record the command each task would run (no GPUs or cluster needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, scaled

# each stand-in writes its arguments, one per line, to $RECORD_DIR/<name> and exits
RECORDER = """#!/bin/bash
printf '%s\\n' "$@" > "$RECORD_DIR/$(basename "$0")"
"""
SCONTROL = """#!/bin/bash
echo gpu-node-01
"""


def run_batch_script(
    tmp_path: Path,
    script: str,
    args: list[str],
    nodes: int = 2,
    tasks_per_node: int = 4,
    gpus_per_node: int = 4,
    array_task: int | None = None,
    record_python: bool = False,
) -> dict[str, list[str]]:
    """{'srun': [...], 'python': [...]}: what the script started, as recorded by the stand-ins (`python` only with
    `record_python`, for scripts that run the environment's python directly, as sweep_agent.sbatch runs wandb)."""
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    bin_dir.mkdir(exist_ok=True)
    record.mkdir(exist_ok=True)
    for name, body in (("srun", RECORDER), ("python", RECORDER), ("scontrol", SCONTROL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")},
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RECORD_DIR": str(record),
        "SLURM_SUBMIT_DIR": str(ROOT),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        "SLURM_GPUS_ON_NODE": str(gpus_per_node),
        "SLURM_CPUS_PER_TASK": "8",
        "CROSSMOD_PYTHON": str(bin_dir / "python") if record_python else sys.executable,
    }
    if array_task is not None:
        env |= {"SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": str(array_task)}
    done = subprocess.run(["bash", f"slurm/{script}", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, f"slurm/{script} {' '.join(args)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return {path.name: path.read_text().splitlines() for path in record.iterdir()}


def job_command(srun_argv: list[str]) -> tuple[str, list[str]]:
    """(program, Hydra overrides) of the `srun … python <program> <overrides>` line a batch script ran."""
    program = list(srun_argv)
    options = []
    while program and program[0].startswith("--"):
        options.append(program.pop(0))
    assert "--kill-on-bad-exit=1" in options and program[0] == sys.executable, srun_argv
    return program[1], program[2:]


def train_overrides(srun_argv: list[str]) -> list[str]:
    """The Hydra overrides of a batch script's `srun … python train.py <overrides>` line."""
    program, overrides = job_command(srun_argv)
    assert program == "train.py", srun_argv
    return overrides

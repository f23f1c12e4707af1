"""What a run's numbers depend on beyond its config and seed, recorded in metrics.json (`environment`).

docs/reproducibility.md says which of these move a number and by how much: compute threads, ranks, precision,
deterministic kernels, library versions and the CPU. Loader workers and the machine's load do not (recorded so a
reader can see that two runs differed only there).
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import lightning as L
import torch

# the packages whose kernels or defaults reach a number
PACKAGES = ("torch", "lightning", "torchmetrics", "transformers", "peft", "timm", "numpy", "webdataset", "deepspeed", "scikit-learn")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    if torch.version.cuda:
        found["cuda"] = torch.version.cuda
    if torch.backends.cudnn.is_available():
        found["cudnn"] = str(torch.backends.cudnn.version())
    return found


def cpu() -> str:
    """The CPU model as the kernel reports it, with the vector capability PyTorch chose its kernels for
    (`AMD EPYC (AVX512)`): two machines of one model name can differ there, and then in their numbers."""
    import torch

    return f"{_cpu_model()} ({torch.backends.cpu.get_cpu_capability()})"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_environment(trainer: L.Trainer, loader_workers: int) -> dict[str, Any]:
    devices = [str(trainer.strategy.root_device)]
    if trainer.strategy.root_device.type == "cuda":
        devices = [torch.cuda.get_device_name(trainer.strategy.root_device)]
    return {
        "threads": torch.get_num_threads(),
        "threads_from": "OMP_NUM_THREADS"
        if os.environ.get("OMP_NUM_THREADS")
        else "cores / processes on the node (src/crossmod/runtime/threads.py)",
        "loader_workers": loader_workers,
        "world_size": trainer.world_size,
        "num_nodes": trainer.num_nodes,
        "devices": devices,
        "precision": str(trainer.precision),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "cpu": cpu(),
        "platform": f"{platform.system()} {platform.machine()}",
        "versions": versions(),
    }

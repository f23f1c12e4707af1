"""The device of the single-process generation jobs (zeroshot.py, few-shot and MemeBridge prompting), taken from
the same `trainer=` group as train.py, so `trainer=gpu` means the GPU and `trainer=cpu` the CPU on every job."""

from __future__ import annotations

import torch
from omegaconf import DictConfig

from training.strategies import process_count


def inference_device(trainer_cfg: DictConfig, job: str) -> torch.device:
    """`trainer.accelerator` gpu/cuda → the first CUDA device, cpu → the CPU, auto → CUDA when one is visible.

    These jobs run in one process: a trainer asking for several devices or nodes is refused rather than
    silently run on one."""
    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    processes = process_count(trainer_cfg)
    if processes is not None and processes > 1:
        raise SystemExit(
            f"{job} runs in one process on one device; trainer asks for {processes} "
            f"(trainer.devices={trainer_cfg.get('devices')}, trainer.num_nodes={trainer_cfg.get('num_nodes')}): "
            "set trainer.devices=1 trainer.num_nodes=1"
        )
    if accelerator in ("gpu", "cuda"):
        if not torch.cuda.is_available():
            raise SystemExit(
                f"{job}: trainer.accelerator={accelerator} but no CUDA device is visible: run it on a GPU node or with trainer=cpu"
            )
        return torch.device("cuda")
    if accelerator == "cpu":
        return torch.device("cpu")
    if accelerator == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    raise SystemExit(f"{job}: trainer.accelerator={accelerator} is not supported here: gpu, cpu or auto")

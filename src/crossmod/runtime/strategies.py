"""DeepSpeed with the ZeRO code paths runnable on CPU, and small queries about the active strategy.

DeepSpeed's engine runs on CPU (its CPU accelerator, gloo for collectives); Lightning's strategy
refuses anything but CUDA in one environment check. Lifting only that check lets sharded
initialisation, partitioned checkpoints, consolidation and gathered adapter export run in CPU tests
and on laptops exactly as they run on GPUs, where this class is Lightning's strategy unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies import DeepSpeedStrategy as LightningDeepSpeedStrategy
from lightning.pytorch.utilities import rank_zero_warn
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import nn
from torchmetrics import Metric


class DeepSpeedStrategy(LightningDeepSpeedStrategy):
    """Lightning's DeepSpeed strategy; on a CPU accelerator it runs with gloo instead of refusing."""

    def __init__(self, *args: Any, config: dict[str, Any] | DictConfig | str | None = None, **kwargs: Any) -> None:
        if isinstance(config, DictConfig):  # composed by Hydra: DeepSpeed and Lightning expect a plain dict
            config = OmegaConf.to_container(config, resolve=True)
        super().__init__(*args, config=config, **kwargs)

    def setup_environment(self) -> None:
        if isinstance(self.accelerator, CPUAccelerator):
            rank_zero_warn("DeepSpeed on CPU (gloo): for tests and debugging of the ZeRO code paths, not for speed.")
            DDPStrategy.setup_environment(self)  # everything the parent does except its CUDA-only check
            return
        super().setup_environment()

    @property
    def root_device(self) -> torch.device:
        device = super().root_device
        # DeepSpeed's engine takes the device index as its rank's device; CPU devices carry none.
        return torch.device("cpu", 0) if device.type == "cpu" else device

    def setup_distributed(self) -> None:
        if isinstance(self.accelerator, CPUAccelerator):  # CPU devices have no index to validate against ranks
            reset_seed()
            self.set_world_ranks()
            self._init_deepspeed_distributed()
            return
        super().setup_distributed()

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        if self.zero_stage_3:
            place_unpartitioned_state(self.lightning_module, self.root_device)

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """Checkpoints written with `exclude_frozen_parameters` lack the frozen base by design: loading
        them must not demand it (the base comes from its own folder when the model is built)."""
        module = self.lightning_module
        strict = module.strict_loading
        if self.exclude_frozen_parameters:
            module.strict_loading = False
        try:
            return super().load_checkpoint(checkpoint_path, weights_only)
        finally:
            module.strict_loading = strict


def place_unpartitioned_state(module: nn.Module, device: torch.device) -> None:
    """Move what ZeRO-3 does not partition to `device`: metric states, buffers, and the parameters it keeps whole.

    Under ZeRO-3 the engine places the parameters it partitioned and Lightning moves nothing else (a whole-module move
    would touch the partitions), so state made outside `deepspeed.zero.Init` stayed on the CPU: on an H200 the loss
    metric then met a GPU loss ("Encountered different devices in metric calculation"). And Lightning's teardown after
    each stage moves the module to the CPU, which carries off the parameters ZeRO-3 keeps gathered on every rank (those
    under `stage3_param_persistence_threshold`: norms, biases, LoRA, a small model's embeddings); the engine of the next
    stage (validate or test after fit) never gathers them again, so on an H200 its first forward met a CPU embedding.
    """
    for submodule in module.modules():
        if isinstance(submodule, Metric):
            submodule.to(device)  # its states are neither parameters nor buffers
        for name, buffer in submodule._buffers.items():
            if buffer is not None and buffer.device != device:
                submodule._buffers[name] = buffer.to(device)
    for parameter in module.parameters():
        if _kept_whole_by_zero3(parameter) and parameter.data.device != device:
            parameter.data = parameter.data.to(device)


def _kept_whole_by_zero3(parameter: nn.Parameter) -> bool:
    """A ZeRO-3 parameter whose full value is held on every rank now (persistent, or gathered), not a partition."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    return hasattr(parameter, "ds_id") and parameter.ds_status == ZeroParamStatus.AVAILABLE and parameter.data.numel() > 0


DDP_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "strategy" / "ddp.yaml"


def process_count(trainer_cfg: DictConfig) -> int | None:
    """Processes the trainer config asks for (devices × nodes), or None when Lightning decides (`devices=auto`)."""
    devices, nodes = trainer_cfg.get("devices", 1), trainer_cfg.get("num_nodes", 1)
    if isinstance(devices, str) and devices.lstrip("-").isdigit():
        devices = int(devices)
    if isinstance(devices, int) and devices > 0:
        return devices * int(nodes)
    if OmegaConf.is_list(devices) or isinstance(devices, (list, tuple)):
        return len(devices) * int(nodes)
    return None


def with_default_strategy(trainer_cfg: DictConfig) -> DictConfig:
    """Several processes and no `strategy=`: crossmod's DDP settings (configs/strategy/ddp.yaml, their one home)
    instead of Lightning's auto DDP, whose per-forward buffer broadcast hangs exact evaluation (ranks score
    different numbers of batches). A strategy chosen anywhere (`strategy=…`, `trainer.strategy=…`) is kept."""
    if trainer_cfg.get("strategy") not in (None, "auto") or (process_count(trainer_cfg) or 1) <= 1:
        return trainer_cfg
    trainer_cfg = trainer_cfg.copy()
    with open_dict(trainer_cfg):
        trainer_cfg.strategy = OmegaConf.load(DDP_CONFIG)
    return trainer_cfg

"""A callback the ZeRO-3 tests add to `train.py` runs: records, per rank, how the model was built."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L


class ShardingProbe(L.Callback):
    """Writes `probe_rank<r>.json`: partitioned parameter counts, Transformers' ZeRO-3 flag, LoRA B at start."""

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        import deepspeed
        from transformers.integrations import is_deepspeed_zero3_enabled

        params = list(pl_module.parameters())
        lora_b = [p for name, p in pl_module.named_parameters() if "lora_B" in name]
        with deepspeed.zero.GatheredParameters(lora_b):
            lora_b_abs_sum = float(sum(p.detach().abs().sum() for p in lora_b))
        record = {
            "partitioned": sum(hasattr(p, "ds_id") for p in params),
            "parameters": len(params),
            "full_numel": sum(int(p.ds_numel) for p in params if hasattr(p, "ds_id")),
            "local_numel": sum(int(p.ds_tensor.numel()) for p in params if hasattr(p, "ds_id")),
            "transformers_zero3": is_deepspeed_zero3_enabled(),
            "lora_b_tensors": len(lora_b),
            "lora_b_abs_sum_at_start": lora_b_abs_sum,
        }
        out = Path(trainer.default_root_dir) / f"probe_rank{trainer.global_rank}.json"
        out.write_text(json.dumps(record))

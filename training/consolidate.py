"""Consolidate a sharded DeepSpeed (ZeRO-2/3) checkpoint into one safetensors state dict.

    python -m training.consolidate <run>/checkpoints/epoch=2-step=300.ckpt  model.safetensors

A DeepSpeed checkpoint is a directory of per-rank shards; DeepSpeed's own reader
(`zero_to_fp32`) merges the fp32 partitions, and the result is written as safetensors with the
module's parameter names (Lightning's wrapper prefix removed). Checkpoints saved with
`exclude_frozen_parameters` (the LoRA strategies) hold the trainable weights only: the adapter and
heads, which is what `export.py` needs, while the frozen base stays in its own folder. The same
reader restores the best checkpoint's weights into a ZeRO-3 model before it is scored.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from models.module import rename_head_keys
from models.sharding import gathered

WRAPPER_PREFIX = "_forward_module."


def is_deepspeed_checkpoint(path: str | Path) -> bool:
    """A directory with a `latest` tag file, as DeepSpeed's save_checkpoint leaves it."""
    return Path(path).is_dir() and (Path(path) / "latest").is_file()


def zero_state_dict(checkpoint_dir: str | Path) -> dict[str, torch.Tensor]:
    """The fp32 weights a sharded checkpoint holds, keyed by the LightningModule's parameter names."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    checkpoint_dir = Path(checkpoint_dir)
    if not is_deepspeed_checkpoint(checkpoint_dir):
        raise FileNotFoundError(f"{checkpoint_dir} is not a DeepSpeed checkpoint directory (no 'latest' tag file inside)")
    state = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_dir))
    return {key.removeprefix(WRAPPER_PREFIX): value for key, value in state.items()}


def consolidate(checkpoint_dir: str | Path, output: str | Path) -> dict[str, object]:
    """Write the merged weights to `output` (safetensors) and a summary beside it; return the summary."""
    state = zero_state_dict(checkpoint_dir)
    if not state:
        raise RuntimeError(f"{checkpoint_dir}: the checkpoint holds no weights")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # safetensors refuses tensors that share storage (tied weights): each gets its own copy
    save_file({key: value.detach().contiguous().clone() for key, value in state.items()}, str(output))
    summary = {
        "checkpoint": str(checkpoint_dir),
        "output": str(output),
        "tensors": len(state),
        "parameters": int(sum(value.numel() for value in state.values())),
    }
    output.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    return summary


def restore_weights(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy `state` into `module`, gathering ZeRO-3 partitions (collective: every rank calls this).

    Every parameter in `state` must exist in the module and match its shape; parameters the state
    does not name (the frozen base of an `exclude_frozen_parameters` checkpoint) keep their values.
    """
    state = dict(state)
    rename_head_keys(module, state, "")  # files written before the head layers' rename
    params = dict(module.named_parameters())
    unknown = sorted(set(state) - set(params))
    if unknown:
        raise KeyError(f"checkpoint weights not in the model: {unknown[:5]}{' …' if len(unknown) > 5 else ''}")
    for name, value in state.items():
        param = params[name]
        with gathered([param], modifier_rank=0), torch.no_grad():
            if tuple(param.shape) != tuple(value.shape):
                raise ValueError(f"{name}: checkpoint shape {tuple(value.shape)} != model shape {tuple(param.shape)}")
            param.copy_(value.to(param.dtype))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a DeepSpeed checkpoint directory (e.g. <run>/checkpoints/last.ckpt)")
    parser.add_argument("output", help="the safetensors file to write")
    args = parser.parse_args(argv)
    summary = consolidate(args.checkpoint, args.output)
    print(f"{summary['tensors']} tensors, {summary['parameters']:,} parameters → {summary['output']}")


if __name__ == "__main__":
    main()

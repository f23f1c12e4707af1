"""Consolidate a sharded DeepSpeed (ZeRO-2/3) checkpoint into one safetensors state dict.

    crossmod consolidate checkpoint=<run>/checkpoints/epoch002.ckpt output=model.safetensors

A DeepSpeed checkpoint is a directory of per-rank shards; DeepSpeed's own merge (`zero_to_fp32`)
joins the fp32 partitions, and the result is written as safetensors with the module's parameter
names (Lightning's wrapper prefix removed). A run folder may come from someone else, so the shards
are read here as tensors and plain data (`weights_only=True`; DeepSpeed's reader unpickles them,
running whatever they name), and the `latest` tag must name a folder inside the checkpoint.
Checkpoints saved with `exclude_frozen_parameters` (the LoRA strategies) hold the trainable weights
only: the adapter and heads, which is what `export.py` needs, while the frozen base stays in its own
folder. The same reader restores the best checkpoint's weights into a ZeRO-3 model before it is scored.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

from crossmod.data.cache_files import save_weights
from crossmod.data.paths import OutsideRoot, ensure_within, resolve_within
from crossmod.models.module import rename_head_keys
from crossmod.models.sharding import gathered
from crossmod.runtime.user_errors import UserError

WRAPPER_PREFIX = "_forward_module."


def is_deepspeed_checkpoint(path: str | Path) -> bool:
    """A directory with a `latest` tag file, as DeepSpeed's save_checkpoint leaves it."""
    return Path(path).is_dir() and (Path(path) / "latest").is_file()


class UnreadableCheckpoint(UserError, ValueError):
    """A DeepSpeed checkpoint directory crossmod will not read as weights only: names the file and the fix."""


FIX = (
    "consolidate it on the machine that trained it, where its files are your own (crossmod consolidate checkpoint=<dir> output="
    "model.safetensors, or DeepSpeed's <dir>/zero_to_fp32.py <dir> <out> --safe_serialization), and pass that .safetensors file"
)
MAX_TAG_BYTES = 4096  # a `latest` tag names one folder


class _Unread:
    """Stands in for a DeepSpeed object a shard carries beside the weights (loss scaler, slice address): its fields
    arrive as plain data, none of its code runs, and the merge never reads it."""


# What genuine shards hold besides tensors and plain data, read as inert stand-ins (never the classes themselves).
STAND_INS: dict[str, type] = {
    "deepspeed.runtime.zero.config.ZeroStageEnum": int,  # the ZeRO stage, an int enum
    "deepspeed.runtime.fp16.loss_scaler.LossScaler": _Unread,
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler": _Unread,
    "deepspeed.utils.tensor_fragment.fragment_address": _Unread,
    "deepspeed.runtime.bf16_optimizer.fragment_address": _Unread,
}


def _tag_folder(checkpoint_dir: Path) -> Path:
    """The folder the `latest` tag names: inside the checkpoint directory, followed through no symlink out of it."""
    latest = checkpoint_dir / "latest"
    try:
        ensure_within(checkpoint_dir, latest, "the tag file")
        with open(latest, "rb") as handle:
            tag = handle.read(MAX_TAG_BYTES + 1).decode("utf-8", "replace").strip()
        if len(tag) > MAX_TAG_BYTES:
            raise OutsideRoot(f"the tag is over {MAX_TAG_BYTES} bytes")
        folder = resolve_within(checkpoint_dir, tag, "its tag")
    except OutsideRoot as error:
        raise UnreadableCheckpoint(f"{latest}: {error}; refused", FIX) from None
    if not folder.is_dir():
        raise FileNotFoundError(f"{latest} names the folder {tag!r}, which is not in {checkpoint_dir}")
    return folder


def _load_shard(path: Path, checkpoint_dir: Path) -> dict[str, Any]:
    """One shard as tensors and plain data (`weights_only=True`): a pickle that would need code to rebuild is refused."""
    try:
        ensure_within(checkpoint_dir, path, "shard")
    except OutsideRoot as error:
        raise UnreadableCheckpoint(f"{checkpoint_dir}: {error}; refused", FIX) from None
    stand_ins = [(kind, name) for name, kind in STAND_INS.items()]
    try:
        with torch.serialization.safe_globals(stand_ins):
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=path.name.endswith("_optim_states.pt"))
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError) as error:
        found = re.search(r"GLOBAL (\S+)", str(error))
        held = (
            f"names {found[1]!r}, which only unpickling would build (running code)" if found else f"is unreadable as weights only ({error})"
        )
        raise UnreadableCheckpoint(f"{path}: {held}; crossmod reads DeepSpeed shards as tensors and plain data only", FIX) from None
    if not isinstance(state, dict):
        raise UnreadableCheckpoint(f"{path}: holds a {type(state).__name__}, not a DeepSpeed shard's dictionary", FIX)
    return state


def _shards(folder: Path, kind: str) -> list[Path]:
    files = sorted(folder.glob(f"*_{kind}_states.pt"), key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])
    if not files:
        raise FileNotFoundError(f"{folder}: no *_{kind}_states.pt files (not a DeepSpeed checkpoint)")
    return files


def _merged(folder: Path, checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """DeepSpeed's own merge of the fp32 partitions (zero_to_fp32), fed with shards read as weights only."""
    from deepspeed.utils import zero_to_fp32 as ds

    models = []
    for path in _shards(folder, "model"):
        state = _load_shard(path, checkpoint_dir)
        names = state["buffer_names"]
        models.append(
            ds.zero_model_state(
                buffers={k: v.float() if v.is_floating_point() else v for k, v in state["module"].items() if k in names},
                param_shapes=state["param_shapes"],
                shared_params=[[k, v] for k, v in state["shared_params"].items()],
                ds_version=state.get("ds_version"),
                frozen_param_shapes=state.get("frozen_param_shapes"),
                frozen_param_fragments=state.get("frozen_param_fragments"),
            )
        )
    optim_files = _shards(folder, "optim")
    optims = [_load_shard(path, checkpoint_dir)["optimizer_state_dict"] for path in optim_files]
    stage, world_size = int(optims[0]["zero_stage"]), optims[0]["partition_count"]
    world_size = max(world_size) if isinstance(world_size, list) else int(world_size)
    if world_size != len(optim_files) or stage not in (1, 2, 3):
        raise ValueError(f"ZeRO stage {stage} over {world_size} ranks, but {len(optim_files)} optimizer shards")
    if stage <= 2:
        flat = [o["single_partition_of_fp32_groups"] for o in optims]
        paddings = optims[0].get("param_alignment_paddings")
        extra = {"param_alignment_paddings": paddings} if paddings is not None else {}
        state = ds._get_fp32_state_dict_from_zero2_checkpoint(world_size, flat, models, False, **extra)
    else:
        state = ds._get_fp32_state_dict_from_zero3_checkpoint(world_size, [o["fp32_flat_groups"] for o in optims], models, False)
    return ds.to_torch_tensor(state)


def check_resumable(checkpoint_dir: str | Path) -> None:
    """Before DeepSpeed resumes from a checkpoint directory (its reader unpickles every shard, running whatever they
    name): the `latest` tag stays inside it and every shard of the tagged folder reads as tensors and plain data."""
    checkpoint_dir = Path(checkpoint_dir)
    folder = _tag_folder(checkpoint_dir)
    shards = sorted(folder.rglob("*.pt"))
    if not shards:
        raise UnreadableCheckpoint(f"{folder}: no *.pt shards (not a DeepSpeed checkpoint)", FIX)
    for path in shards:
        _load_shard(path, checkpoint_dir)


def zero_state_dict(checkpoint_dir: str | Path) -> dict[str, torch.Tensor]:
    """The fp32 weights a sharded checkpoint holds, keyed by the LightningModule's parameter names.

    A run folder is shared data: its shards are read as tensors and plain data only (DeepSpeed's own reader
    unpickles them, running whatever they name), and its `latest` tag must name a folder inside it."""
    checkpoint_dir = Path(checkpoint_dir)
    if not is_deepspeed_checkpoint(checkpoint_dir):
        raise FileNotFoundError(f"{checkpoint_dir} is not a DeepSpeed checkpoint directory (no 'latest' tag file inside)")
    folder = _tag_folder(checkpoint_dir)
    try:
        state = _merged(folder, checkpoint_dir)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
        if isinstance(error, UnreadableCheckpoint):
            raise
        raise UnreadableCheckpoint(f"{folder}: not a ZeRO checkpoint crossmod can merge ({type(error).__name__}: {error})", FIX) from None
    return {key.removeprefix(WRAPPER_PREFIX): value for key, value in state.items()}


def consolidate(checkpoint_dir: str | Path, output: str | Path) -> dict[str, object]:
    """Write the merged weights to `output` (safetensors) and a summary beside it; return the summary."""
    state = zero_state_dict(checkpoint_dir)
    if not state:
        raise RuntimeError(f"{checkpoint_dir}: the checkpoint holds no weights")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # safetensors refuses tensors that share storage (tied weights): each gets its own copy
    save_weights({key: value.detach().contiguous().clone() for key, value in state.items()}, str(output))
    summary = {
        "checkpoint": str(checkpoint_dir),
        "output": str(output),
        "tensors": len(state),
        "parameters": int(sum(value.numel() for value in state.values())),
    }
    output.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    return summary


REFIX = "consolidate the run's checkpoint again (crossmod consolidate checkpoint=<checkpoint dir> output=<file>), or load the run folder"


class WeightsMismatch(UserError, KeyError):
    """Weights that are not the model's: a key it does not have, or a trained weight the file lacks."""

    def __str__(self) -> str:  # KeyError would quote the message
        return Exception.__str__(self)


def _some(names: list[str]) -> str:
    return f"{names[:5]}{' …' if len(names) > 5 else ''}"


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
        raise WeightsMismatch(f"checkpoint weights not in the model: {_some(unknown)}", REFIX)
    # what the format may leave out is the frozen base (exclude_frozen_parameters); a trained weight it lacks would be
    # scored at its random initial value under the run's name
    missing = sorted(name for name, param in params.items() if param.requires_grad and name not in state)
    if missing:
        raise WeightsMismatch(
            f"the checkpoint lacks {len(missing)} of the model's {sum(p.requires_grad for p in params.values())} trained "
            f"weights: {_some(missing)} (only a frozen base may be left out)",
            REFIX,
        )
    for name, value in state.items():
        param = params[name]
        with gathered([param], modifier_rank=0), torch.no_grad():
            if tuple(param.shape) != tuple(value.shape):
                raise ValueError(f"{name}: checkpoint shape {tuple(value.shape)} != model shape {tuple(param.shape)}")
            param.copy_(value.to(param.dtype))

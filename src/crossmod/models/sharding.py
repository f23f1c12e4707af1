"""What building and saving a model needs when DeepSpeed ZeRO-3 partitions its parameters.

Under ZeRO-3 each rank holds a slice of every parameter (`param.ds_id` marks them; `param.data` is
empty). Three things then need care: Transformers' `from_pretrained` must know the DeepSpeed config
so it loads weights straight into the partitions (no rank materialises the whole model); in-place
initialisation after construction (PEFT zeroing LoRA B) must run on gathered weights; and saving
(adapters, heads) must gather first, on every rank, or it writes empty tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from torch import nn

from crossmod.data.even_batches import is_zero3  # the data layer asks it too (lockstep evaluation batches)


def is_partitioned(param: nn.Parameter) -> bool:
    """True for a parameter ZeRO-3 has split across ranks."""
    return hasattr(param, "ds_id")


def zero3_config(strategy: Any) -> dict[str, Any] | None:
    """The DeepSpeed config of a ZeRO-3 strategy, else None (any other strategy, or none yet)."""
    config = getattr(strategy, "config", None)
    return config if is_zero3(strategy) and isinstance(config, dict) else None


def tell_transformers(config: dict[str, Any]) -> Any:
    """Register the ZeRO-3 config with Transformers (`from_pretrained` then loads into partitions).

    Transformers keeps only a weak reference: the returned object must stay alive as long as the model
    is used (generation under ZeRO-3 also consults it), so callers keep it on the model.
    """
    from transformers.integrations import HfDeepSpeedConfig

    return HfDeepSpeedConfig(config)


@contextlib.contextmanager
def gathered(params: Iterable[nn.Parameter], modifier_rank: int | None = None) -> Iterator[None]:
    """Full tensors of partitioned parameters inside the block (a no-op for ordinary ones).

    Collective: every rank must enter. `modifier_rank=0` broadcasts rank 0's in-place changes on exit;
    None is read-only.
    """
    partitioned = [p for p in params if is_partitioned(p)]
    if not partitioned:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=modifier_rank):
        yield


def parameter_counts(params: Iterable[nn.Parameter]) -> dict[str, int]:
    """Trained and total parameters, whole-model counts also when ZeRO-3 holds them partitioned."""
    trained = total = 0
    for param in params:
        count = param.ds_numel if is_partitioned(param) else param.numel()
        total += count
        trained += count if param.requires_grad else 0
    return {"trained": trained, "total": total}


def partition_summary(params: Iterable[nn.Parameter], rank: int, world_size: int) -> str:
    """One line saying the model was built partitioned, and how much of it this rank holds (what proves no rank
    materialised the whole model)."""
    held = total = 0
    for param in params:
        if is_partitioned(param):
            held, total = held + param.ds_tensor.numel(), total + param.ds_numel
        else:
            held, total = held + param.numel(), total + param.numel()
    return f"model built in ZeRO-3 partitions across {world_size} ranks: rank {rank} holds {held:,} of {total:,} parameters"

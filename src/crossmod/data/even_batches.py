"""Evaluation batches in lockstep across ranks, for strategies whose forward pass is a collective.

Exact evaluation gives each val/test shard to one rank, so ranks hold different numbers of batches.
Under ZeRO-3 every forward gathers parameters from all ranks: a rank that has run out of batches
while another still computes leaves that one waiting forever. Here each rank asks the others, once
per batch, whether anyone still has data; a rank whose stream has ended yields filler batches
(flagged `filler`, run through the model but never scored) until every rank is done. Scores stay
exact: each sample is still scored once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

FILLER = "filler"


def is_zero3(strategy: Any) -> bool:
    """The one place that asks whether parameters are partitioned across ranks (DeepSpeed ZeRO stage 3), so that every
    forward pass is a collective. Here, in the lowest layer, because the datamodule asks it of its trainer's strategy."""
    return bool(getattr(strategy, "zero_stage_3", False))


class EvenBatches:
    """Wraps one rank's eval loader; `any_rank_has_data(flag)` is a sum-reduce over ranks."""

    def __init__(
        self,
        loader: Iterable[dict[str, Any]],
        any_rank_has_data: Callable[[bool], bool],
        spare_batch: Callable[[], dict[str, Any]],
    ) -> None:
        self.loader, self.any_rank_has_data, self.spare_batch = loader, any_rank_has_data, spare_batch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        batches = iter(self.loader)
        filler: dict[str, Any] | None = None
        while True:
            batch = next(batches, None)
            if not self.any_rank_has_data(batch is not None):
                return
            if batch is None:
                # the last real batch (or, on a rank that had none, one read for the purpose) stands in
                filler = filler or {**self.spare_batch(), FILLER: True}
                yield filler
            else:
                filler = {**batch, FILLER: True}
                yield batch


def sum_over_ranks(strategy: Any) -> Callable[[bool], bool]:
    """`flag -> any rank's flag`, through the strategy's own reduce (right device, right backend)."""

    def any_rank(flag: bool) -> bool:
        total = strategy.reduce(torch.tensor(float(flag), device=strategy.root_device), reduce_op="sum")
        return bool(total.item() > 0)

    return any_rank

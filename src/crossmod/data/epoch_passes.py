"""Training epochs as passes: every training meme once per epoch (`data.epoch=pass`, the default).

The rule, for epoch e of a run with seed s over N training memes, `world` ranks and `workers` loader processes:
1. the training shards are put in an order drawn from (s, e), without replacement, and their training memes laid end
   to end in that order (a meme's place within its shard is its order there);
2. rank r takes the r-th of `world` contiguous slices of C = ceil(N / world) places; places past N wrap to the start
   of the epoch's order, so the first C·world − N memes (at most world − 1) are seen twice and every rank runs the
   same number of batches;
3. a shuffle buffer seeded by (s, e, r) reorders the rank's memes and they are cut into batches (its last batch may be
   short: no meme is dropped);
4. batch i of the rank goes to loader worker i mod `workers`, which is the order a DataLoader takes batches from its
   workers in: the training process sees the same batches in the same order whatever `data.num_workers` is.
Every worker reads the rank's records (the shard's JSON and image bytes, no decoding) to know the batches; only a
worker's own batches are prepared (images decoded, text tokenized, collated), the work that costs. So a loader setting
chosen for speed never changes a run's numbers (tests/training/test_same_seed.py). `data.epoch=resampled` keeps the
stream of shards drawn with replacement and epochs of a fixed length (`data.epoch_samples`), for streams too large to
pass over; its batches depend on the number of workers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import webdataset as wds
from torch.utils.data import IterableDataset

Piece = tuple[str, int, int]  # a shard's url and the range [start, stop) of its training memes


def epoch_pieces(counts: list[tuple[str, int]], seed: int, epoch: int, rank: int, world: int) -> list[Piece]:
    """What one rank reads in an epoch: shard pieces in order (see the module's rule)."""
    order = list(counts)
    random.Random(f"{seed}:{epoch}").shuffle(order)
    total = sum(count for _, count in order)
    if total == 0:
        return []
    per_rank = math.ceil(total / world)
    start, stop = rank * per_rank, (rank + 1) * per_rank
    pieces: list[Piece] = []
    for lap_start in range(0, stop, total):  # wrapping places repeat the epoch's order from its start
        offset = lap_start
        for url, count in order:
            low, high = max(start, offset), min(stop, offset + count)
            if low < high:
                pieces.append((url, low - offset, high - offset))
            offset += count
    return pieces


class EpochPasses(IterableDataset):
    """Pipeline source: each pass over it is the next epoch, yielding this rank's training memes (as records: JSON read,
    image bytes undecoded), shuffled in a buffer seeded by (seed, epoch, rank), in every loader worker alike (the
    worker's share is taken after batching). `epoch` is what a resumed stream sets (crossmod.data.stream_position.ResumeAt)."""

    def __init__(
        self,
        counts: list[tuple[str, int]],
        read: Callable[[Iterable[dict[str, Any]]], Iterator[dict[str, Any]]],
        keep: Callable[[dict[str, Any]], bool] | None,
        seed: int,
        rank: int,
        world: int,
        buffer: int,
    ) -> None:
        self.counts, self.read, self.keep, self.buffer = counts, read, keep, buffer
        self.seed, self.rank, self.world = seed, rank, world
        self.epoch = -1  # incremented as a pass starts

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # a generator: the epoch advances when the first meme is asked for, after a resume stage downstream has set it
        self.epoch += 1
        pieces = epoch_pieces(self.counts, self.seed, self.epoch, self.rank, self.world)
        order = wds.shuffle(self.buffer, self.buffer, seed=f"{self.seed}:{self.epoch}:{self.rank}")
        yield from order(self._memes(pieces))

    def _memes(self, pieces: list[Piece]) -> Iterator[dict[str, Any]]:
        for url, start, stop in pieces:
            index = 0
            for sample in self.read([{"url": url}]):
                if self.keep is not None and not self.keep(sample):
                    continue
                if index >= stop:
                    break
                if index >= start:
                    yield sample
                index += 1


def batches_per_rank(total: int, world: int, batch_size: int) -> int:
    """Batches each rank runs in an epoch: its slice cut into batches (the last one may be short)."""
    return math.ceil(math.ceil(total / world) / batch_size)

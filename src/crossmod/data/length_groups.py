"""Training batches of memes of similar length, so a batch computes few padding tokens.

A batch is padded to its longest meme: captions of five languages differ several-fold in tokens, so
shuffled batches spend much of their compute on padding (bench/vlm_training.py measures the share).
`LengthGroupedBatches` is the streaming form of Transformers' `group_by_length`
(`LengthGroupedSampler`): it fills a buffer of `groups × batch_size` samples from the (already shuffled)
stream, sorts it by the model's token count, cuts it into batches and emits those batches in a seeded
random order. Every sample that enters leaves once, in one batch (a finite stream's last incomplete batch is
kept with `partial=True`, as an epoch that is a pass keeps it, else dropped as `wds.batched(partial=False)` drops
it); the order
depends only on the stream and the seed, so a resumed run replays the same batches
(src/crossmod/data/stream_position.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

Sample = dict[str, Any]


class LengthGroupedBatches:
    """A stream stage: samples in, lists of `batch_size` samples out (a stream's last, incomplete buffer is cut into
    the batches it fills, plus its short last batch when `partial`, as `wds.batched`)."""

    def __init__(self, batch_size: int, groups: int, length: Callable[[Sample], int], seed: int, partial: bool = False) -> None:
        if batch_size < 1 or groups < 1:
            raise ValueError(f"length grouping needs batch_size >= 1 and groups >= 1, got {batch_size} and {groups}")
        self.batch_size, self.groups, self.length, self.seed, self.partial = batch_size, groups, length, seed, partial

    def __call__(self, samples: Iterator[Sample]) -> Iterator[list[Sample]]:
        rng = random.Random(self.seed)  # per pass, as webdataset's shuffle: a replayed pass is the same
        buffer: list[tuple[int, int, Sample]] = []
        for sample in samples:
            buffer.append((self.length(sample), len(buffer), sample))
            if len(buffer) == self.batch_size * self.groups:
                yield from self._cut(buffer, rng)
                buffer = []
        if buffer:
            yield from self._cut(buffer, rng)

    def _cut(self, buffer: list[tuple[int, int, Sample]], rng: random.Random) -> Iterator[list[Sample]]:
        ordered = [sample for _, _, sample in sorted(buffer, key=lambda entry: entry[:2])]  # ties keep arrival order
        last = len(ordered) if self.partial else len(ordered) - self.batch_size + 1
        batches = [ordered[i : i + self.batch_size] for i in range(0, last, self.batch_size)]
        rng.shuffle(batches)
        yield from batches

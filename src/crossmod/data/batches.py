"""The one way sample dicts become a model batch: training, evaluation, prediction and zero-shot alike.

The model's preprocessor prepares each sample (image decoding, resizing) and collates the prepared
samples once per batch (tokenizing, stacking). `SamplesToBatch` is picklable, so a loader runs it
inside its worker processes (as the collation function of a batching stage or a DataLoader).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, Protocol


class Preprocessor(Protocol):
    """What the model's side hands the data: per-sample preparation and batch collation, and which of a
    meme's inputs (`text`, `image`) the model needs (a meme without one would be scored on nothing)."""

    @property
    def needs(self) -> frozenset[str]: ...

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]: ...
    def collate(self, features: list[dict[str, Any]]) -> dict[str, Any]: ...

    # Optional: `length(sample) -> int`, the tokens a meme takes in a batch, for `data.group_by_length`.


class SamplesToBatch:
    """Sample dicts → one batch: each sample prepared by the preprocessor, then collated together."""

    def __init__(self, preprocessor: Preprocessor) -> None:
        self.preprocessor = preprocessor

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        return self.preprocessor.collate([self.preprocessor(sample) for sample in samples])


class BatchesWithinShards:
    """Pipeline stage: shard items → batches that never span two shards.

    A batch's members, and the padding they share, then depend only on the shard, never on which rank or loader
    worker reads it: evaluation scores are the same bits for any `data.num_workers` and number of ranks (a batch
    that mixed two shards' memes padded them to another length, and scores moved in the last float digits). The cost
    is one short batch per shard.
    """

    def __init__(
        self,
        read: Callable[[Iterable[dict[str, Any]]], Iterator[dict[str, Any]]],
        decode: Callable[[dict[str, Any]], dict[str, Any]],
        keep: Callable[[dict[str, Any]], bool] | None,
        batch_size: int,
        to_batch: Callable[[list[dict[str, Any]]], Any],
    ) -> None:
        self.read, self.decode, self.keep, self.batch_size, self.to_batch = read, decode, keep, batch_size, to_batch

    def __call__(self, shards: Iterable[dict[str, Any]]) -> Iterator[Any]:
        for shard in shards:
            samples = map(self.decode, self.read([shard]))
            if self.keep is not None:
                samples = filter(self.keep, samples)
            while chunk := list(islice(samples, self.batch_size)):
                yield self.to_batch(chunk)

"""The one way sample dicts become a model batch: training, evaluation, prediction and zero-shot alike.

The model's preprocessor prepares each sample (image decoding, resizing) and collates the prepared
samples once per batch (tokenizing, stacking). `SamplesToBatch` is picklable, so a loader runs it
inside its worker processes (as the collation function of a batching stage or a DataLoader).
"""

from __future__ import annotations

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

"""The datamodule's settings, grouped by what they govern and checked once, before anything is read.

`Streaming`: how memes become batches (sizes, workers, epochs, shuffling, length grouping, lockstep evaluation, a
modality ablation). `Folds`: which splits and folds a run reads and how its weights are selected without its held-out
fold. `RemoteReading`: how shards behind a URL are read. `Conversion`: how a raw source becomes shards (shard size,
bad-input policy, checksums, OCR of image-only memes). The data configs keep one flat list of keys
(`data.batch_size=…`, `data.fold_seed=…`): each key belongs to exactly one group, which declares its type and default,
so an unknown key is named with the keys there are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from crossmod.data.ablation import check_ablation
from crossmod.data.folds import INNER_SHARE
from crossmod.data.remote import BACKOFF_S, RETRIES
from crossmod.data.selection_rules import check_selection, fold_splits

EPOCHS = ("pass", "resampled")
ON_ERROR = ("raise", "skip")


@dataclass(frozen=True)
class Streaming:
    """`epoch`: `pass` shows every training meme once per epoch (src/crossmod/data/epoch_passes.py); `resampled` draws
    shards with replacement, `epoch_samples` (default: the training set's size) per epoch. `eval_batch_size`: defaults
    to `batch_size`. `even_eval_batches` (auto: when the trainer's strategy shards parameters and there are several
    ranks) keeps evaluation batches in lockstep (src/crossmod/data/even_batches.py). `group_by_length` batches training
    memes of similar token counts from buffers of `length_groups` batches (src/crossmod/data/length_groups.py).
    `ablate` (`image` | `text`) removes one modality of every meme as it is read (src/crossmod/data/ablation.py)."""

    batch_size: int = 32
    eval_batch_size: int | None = None
    num_workers: int = 0
    shuffle_buffer: int = 1000
    epoch: str = "pass"
    epoch_samples: int | None = None
    seed: int = 0
    even_eval_batches: bool | str = "auto"
    group_by_length: bool = False
    length_groups: int = 50
    ablate: str | None = None

    def __post_init__(self) -> None:
        if self.epoch not in EPOCHS:
            raise ValueError(f"data.epoch must be 'pass' (every training meme once per epoch) or 'resampled', got {self.epoch!r}")
        if self.epoch == "pass" and self.epoch_samples is not None:
            raise ValueError(
                f"data.epoch_samples={self.epoch_samples} sets the length of a resampled epoch; an epoch is a pass over the "
                "training memes (data.epoch=pass): drop epoch_samples, or set data.epoch=resampled"
            )
        if self.even_eval_batches not in (True, False, "auto"):
            raise ValueError(f"even_eval_batches must be true, false or auto, got {self.even_eval_batches!r}")
        check_ablation(self.ablate)
        object.__setattr__(self, "eval_batch_size", self.eval_batch_size or self.batch_size)


@dataclass(frozen=True)
class Folds:
    """`fold`: the held-out fold of a k-fold run (null: the dataset's own splits); folds divide the training splits,
    assigned by `fold_seed`. `selection` and `inner_share` (`cv.selection`, `cv.inner_share`) say how a fold run's
    weights are chosen without its held-out fold (src/crossmod/data/selection_rules.py)."""

    fold: int | None = None
    num_folds: int = 5
    fold_seed: int = 0
    train_splits: list[str] = field(default_factory=lambda: ["train"])
    val_splits: list[str] = field(default_factory=lambda: ["val"])
    test_splits: list[str] = field(default_factory=lambda: ["test"])
    selection: str = "inner"
    inner_share: float = INNER_SHARE

    def __post_init__(self) -> None:
        if self.fold is not None and not 0 <= self.fold < self.num_folds:
            raise ValueError(f"fold={self.fold} is outside 0..{self.num_folds - 1} (num_folds={self.num_folds})")
        check_selection(self.selection)
        for name in ("train_splits", "val_splits", "test_splits"):
            object.__setattr__(self, name, list(getattr(self, name)))  # a config's ListConfig, a tuple: a plain list

    @property
    def fold_splits(self) -> list[str]:
        """The splits folds divide: the training splits (a dataset's own validation split stays a validation split)."""
        return fold_splits(self.train_splits)

    @property
    def split_roles(self) -> dict[str, list[str]]:
        """The splits a run trains, validates and tests on, and those its folds divide (recorded in the manifest)."""
        return {"train": self.train_splits, "val": self.val_splits, "test": self.test_splits, "folds": self.fold_splits}


@dataclass(frozen=True)
class RemoteReading:
    """A dataset behind a URL (`shard_dir=https://…`, src/crossmod/data/remote.py): each shard downloaded once into
    `cache_dir` when one is given; `remote_retries` and `remote_backoff` govern reading after a failure."""

    cache_dir: str | None = None
    remote_retries: int = RETRIES
    remote_backoff: float = BACKOFF_S


@dataclass(frozen=True)
class Conversion:
    """`raw_dir` and `on_error` are config handles the data configs pass on to their source; skipping bad inputs is
    allowed when `allow_skip` or `on_error=skip` says so (the source's own `on_error` too). `verify`: check the shards'
    checksums when they exist. `ocr` ({engine, langs, cache}) reads the caption of every meme without text off its image
    (src/crossmod/data/ocr.py), for datasets that ship images only."""

    samples_per_shard: int = 500
    allow_skip: bool = False
    verify: bool = True
    on_error: str = "raise"
    raw_dir: str | None = None
    ocr: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")


GROUPS: dict[str, type] = {"streaming": Streaming, "folds": Folds, "remote": RemoteReading, "conversion": Conversion}


@dataclass(frozen=True)
class DataSettings:
    """Every group, from the flat keys a data config gives."""

    streaming: Streaming
    folds: Folds
    remote: RemoteReading
    conversion: Conversion

    @classmethod
    def of(cls, **keys: Any) -> DataSettings:
        owner = {f.name: group for group, kind in GROUPS.items() for f in fields(kind)}
        unknown = sorted(set(keys) - set(owner))
        if unknown:
            known = "; ".join(f"{group}: {', '.join(f.name for f in fields(kind))}" for group, kind in GROUPS.items())
            raise TypeError(f"data.{unknown[0]} is not a key of the datamodule (src/crossmod/data/data_settings.py). Its keys: {known}")
        parts = {group: kind(**{k: v for k, v in keys.items() if owner[k] == group}) for group, kind in GROUPS.items()}
        return cls(**parts)


def default(key: str) -> Any:
    """The declared default of a data key: what a run whose config left the key out used."""
    for kind in GROUPS.values():
        for f in fields(kind):
            if f.name == key:
                return f.default_factory() if f.default is dataclasses.MISSING else f.default
    raise KeyError(f"data.{key} is not a key of the datamodule")

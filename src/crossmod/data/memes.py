"""MemeDataModule: converts a source to shards once, then streams them with webdataset.

An epoch of training is a pass: every training meme once, in a seeded order, the same number of batches on every
rank (src/crossmod/data/epoch_passes.py; `epoch=resampled` streams shards drawn with replacement in epochs of a fixed
length instead); the stream's position travels in checkpoints (`state_dict`), so a resumed run sees the batches
the uninterrupted run would (src/crossmod/data/stream_position.py). Evaluation is exact: each val/test shard
goes to exactly one (rank, worker) consumer, so every sample is scored once, whatever the number of
ranks, workers and shards, in batches that never span two shards (the same batches, so the same scores, for any
number of ranks and workers). Training batches do not depend on the number of loader workers either. What each stage reads in a fold run, and which rule chose the scored
weights, is src/crossmod/data/selection_rules.py.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import lightning as L
import torch
import webdataset as wds
from torch.utils.data import DataLoader, get_worker_info

from crossmod.data.ablation import DecodeAblated
from crossmod.data.batches import BatchesWithinShards, Preprocessor, SamplesToBatch
from crossmod.data.conversion import ShardConversion
from crossmod.data.data_settings import DataSettings
from crossmod.data.epoch_passes import EpochPasses, batches_per_rank
from crossmod.data.even_batches import EvenBatches, is_zero3, sum_over_ranks
from crossmod.data.folds import (
    find_folds,
    iter_records,
)
from crossmod.data.heads import Head, parse_heads
from crossmod.data.length_groups import LengthGroupedBatches
from crossmod.data.ocr import CaptionsFromImages
from crossmod.data.one_block import one_block
from crossmod.data.remote import is_remote
from crossmod.data.selection_rules import NO_SELECTION, RoleFilter, StagePlan, rule_for
from crossmod.data.shards import (
    fingerprint,
    read_manifest,
    read_samples,
    shard_items,
)
from crossmod.data.stream_position import StreamResume, training_position
from crossmod.data.tar_reader import shard_samples


class Source(Protocol):
    """What a raw-dataset converter or generator offers the datamodule."""

    name: str
    heads: dict[str, dict[str, Any]]

    def params(self) -> dict[str, Any]: ...
    def __iter__(self): ...


class ShardsForConsumer:
    """Pipeline stage giving shard i to the consumer (rank, worker) with i % consumers == its index."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size

    def __call__(self, src):
        info = get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info else (0, 1)
        consumer, consumers = self.rank * num_workers + worker, self.world_size * num_workers
        for index, item in enumerate(src):
            if index % consumers == consumer:
                yield item


def cannot_train_on_own_splits(train_splits: list[str], val_splits: list[str], present: set[str] | None) -> bool:
    """Whether fold=null cannot train on a dataset's own splits: no validation split named, none of the training
    splits present, or an evaluation-only set (split `all`). `present`: the manifest's splits, None before conversion."""
    if not val_splits:
        return True
    return present is not None and (present == {"all"} or not present & set(train_splits))


class MemeDataModule(L.LightningDataModule):
    """Streams memes from WebDataset shards built (once, under a lock) from a source.

    Its settings come grouped and checked (src/crossmod/data/data_settings.py): `streaming`, `folds` (with selection),
    `remote` and `conversion`; the data configs give them as flat keys (`data.batch_size=…`). Converting a source is
    `conversion` (src/crossmod/data/conversion.py); this module only streams what it wrote.
    """

    def __init__(
        self,
        heads: dict[str, dict[str, Any]],
        source: Source | None = None,
        shard_root: str | None = None,
        shard_dir: str | None = None,
        preprocessor: Preprocessor | None = None,
        describe: Callable[[Source], dict[str, Any] | None] | None = None,
        **settings: Any,
    ) -> None:
        """`source`: a raw dataset to convert into `shard_root` (a folder named by its fingerprint); or `shard_dir`:
        prepared shards, a folder or a URL (`crossmod.data.remote`). `describe(source)` adds facts about the raw data to
        the manifest's summary at conversion. `settings`: the data config's keys, each a field of one settings group."""
        super().__init__()
        groups = DataSettings.of(**settings)
        self.streaming, self.folds, self.remote_reading = groups.streaming, groups.folds, groups.remote
        if source is None and shard_dir is None:
            raise ValueError("MemeDataModule needs a source to convert or a shard_dir with prepared shards")
        if source is not None and shard_root is None and shard_dir is None:
            raise ValueError("MemeDataModule needs shard_root (where converted shards are cached) or shard_dir")
        if groups.conversion.ocr and source is not None:
            source = CaptionsFromImages(source, **groups.conversion.ocr)
        self.decode = DecodeAblated(self.streaming.ablate)  # every stream decodes through it: an ablation holds for every stage
        self.heads = parse_heads(heads)
        self.source, self.preprocessor = source, preprocessor
        self.dataset_dir: Path | str
        if shard_dir is not None:
            self.dataset_dir = str(shard_dir) if is_remote(shard_dir) else Path(shard_dir)
        else:
            self.dataset_dir = Path(shard_root) / f"{source.name}-{fingerprint(source.params())}"
        self.conversion = ShardConversion(source, self.dataset_dir, groups.conversion, self.folds, describe)
        self.manifest: dict[str, Any] = {}
        self.plan: StagePlan | None = None  # what each stage reads; set by `setup`
        self.resume = StreamResume()  # where the training stream starts (from a checkpoint)

    def prepare_data(self) -> None:
        """Convert the source to shards if they are missing; add the fold assignment if new."""
        self.conversion.convert()

    @property
    def remote(self) -> dict[str, Any] | None:
        """How shards of a remote dataset are read (cache folder, retries, backoff); None for a local one."""
        if not isinstance(self.dataset_dir, str):
            return None
        cache, settings = None, self.remote_reading
        if settings.cache_dir is not None:
            manifest = self.manifest or read_manifest(self.dataset_dir)
            cache = str(Path(settings.cache_dir) / f"{manifest['dataset']}-{manifest['fingerprint']}")
        return {"cache_dir": cache, "retries": settings.remote_retries, "backoff": settings.remote_backoff}

    def _reader(self) -> Callable[..., Any]:
        """The shard-reading pipeline stage; remote shards carry their manifest records and reading settings."""
        if self.remote is None:
            return shard_samples
        items = shard_items(self.dataset_dir, self.manifest, None, self.remote)
        return partial(shard_samples, records={item["url"]: item for item in items})

    @property
    def selection_rule(self) -> str:
        """Which rule chose the weights scored on the test stage (a key of selection_rules.RULES); needs `setup`."""
        return self._plan().rule

    @property
    def roles(self) -> dict[str, str] | None:
        """Group → train / val / test in a fold run (None otherwise); needs `setup`."""
        return self._plan().roles

    def _plan(self) -> StagePlan:
        if self.plan is None:
            raise RuntimeError("MemeDataModule.setup has not run: the stages are read from the manifest there")
        return self.plan

    def connect(self, preprocessor: Preprocessor) -> None:
        """The model's preprocessor turns this module's sample dicts into batches (the driver connects them)."""
        self.preprocessor = preprocessor

    # ---------------------------------------------------------------- setup
    def setup(self, stage: str | None = None) -> None:
        self.manifest = read_manifest(self.dataset_dir)
        self._check_heads()
        if self.preprocessor is None:
            raise RuntimeError("MemeDataModule has no preprocessor: call datamodule.connect(model.preprocessor) first (train.py does)")
        self._check_splits()
        folds = None
        if self.folds.fold is not None:
            folds = find_folds(self.manifest, self.folds.num_folds, self.folds.fold_seed, self.folds.fold_splits)
            if folds is None:
                raise RuntimeError(
                    f"{self.dataset_dir}: no fold assignment for num_folds={self.folds.num_folds}, seed={self.folds.fold_seed}; run prepare_data first"
                )
        self.plan = StagePlan(
            {"train": self.folds.train_splits, "val": self.folds.val_splits, "test": self.folds.test_splits},
            self.manifest["counts"]["split"],
            rule_for(self.folds.fold, self.folds.selection, self.manifest, self.folds.val_splits),
            self.folds.fold,
            folds,
            self.folds.inner_share,
        )

    def _check_splits(self) -> None:
        """fold=null trains on the dataset's own splits; an evaluation-only set needs cross-validation."""
        if self.folds.fold is not None:
            return
        present = set(self.manifest["counts"]["split"])
        if cannot_train_on_own_splits(self.folds.train_splits, self.folds.val_splits, present):
            raise ValueError(
                f"dataset {self.manifest['dataset']} has splits {sorted(present)}, but fold=null trains on "
                f"{self.folds.train_splits} and validates on {self.folds.val_splits}: cross-validate instead with fold=k, "
                f"e.g. fold=0 num_folds=3 (or set data.train_splits / data.val_splits)"
            )
        if not present & set(self.folds.val_splits):
            warnings.warn(
                f"dataset {self.manifest['dataset']} has no samples in the validation splits {self.folds.val_splits}", stacklevel=2
            )

    def _check_heads(self) -> None:
        available = self.manifest["heads"]
        for name, head in self.heads.items():
            if name not in available:
                raise ValueError(f"head {name!r} is not in the dataset {self.manifest['dataset']} (heads there: {sorted(available)})")
            if (kind := Head.from_spec(name, available[name]).kind) != head.kind:
                raise ValueError(f"head {name!r} is {kind} in the dataset, but the config says {head.kind}")

    def _shards(self, splits: list[str]) -> list[str]:
        return [item["url"] for item in shard_items(self.dataset_dir, self.manifest, splits, self.remote)]

    def _rank_world(self) -> tuple[int, int]:
        if self.trainer is not None:
            return self.trainer.global_rank, self.trainer.world_size
        return 0, 1

    @property
    def has_test_stage(self) -> bool:
        """A fold run always tests its held-out fold; otherwise only a dataset with a test split has a test stage."""
        return self.roles is not None or bool(self._shards(self.folds.test_splits))

    def num_samples(self, stage: str) -> int:
        """Samples in a stage's stream (train / val / test) under the current split or fold."""
        return self._plan().num_samples(stage)

    def held_out_labels(self) -> dict[str, dict[str, Any]]:
        """Every dataset head's label for each held-out sample of this fold run (id → head → label).

        Reports score a single-culture model against every culture's labels with it (Table 11).
        """
        if self.roles is None:
            raise RuntimeError("held_out_labels needs a fold run (fold=k) after setup")
        names = [s["name"] for s in self.manifest["shards"] if s["split"] in self.folds.fold_splits]
        return {r["id"]: r["labels"] for r in iter_records(self.dataset_dir, names, self.remote) if self.roles[r["group"]] == "test"}

    def stage_records(self, stage: str, images: bool = False) -> list[dict[str, Any]]:
        """The records of the memes a stage reads (`train`, `val`, `test`), in manifest order, without their images
        unless asked: what the baselines (src/crossmod/results/baselines.py) fit and score on and a retrieval export's
        vote is scored on, the same memes the model trains and is scored on."""
        if stage == "val" and self.folds.selection in NO_SELECTION:
            return []
        splits, role = self._plan().reads(stage)
        names = [s["name"] for s in self.manifest["shards"] if s["split"] in splits]
        keep = RoleFilter(self.roles, role) if role is not None else None
        rows = (
            read_samples(self.dataset_dir, sorted(set(splits)), self.remote)
            if images
            else iter_records(self.dataset_dir, names, self.remote)
        )
        return [r for r in rows if keep is None or keep(r)]

    # ---------------------------------------------------------------- resume state
    def state_dict(self) -> dict[str, Any]:
        """The training stream's position, saved in every checkpoint written while fitting."""
        if self.trainer is None or self.trainer.state.fn != "fit":
            return {}
        epoch, batches = training_position(self.trainer)
        return {"train_stream": {"epoch": epoch, "batches": batches}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume the training stream where the checkpoint was written (only when fitting from it)."""
        stream = state_dict.get("train_stream")
        if stream is not None and self.trainer is not None and self.trainer.state.fn == "fit":
            exact = self.streaming.epoch == "pass" or self.streaming.num_workers <= 1  # a resampled stream rotates its workers' order
            self.resume.load(int(stream["epoch"]), int(stream["batches"]), self.streaming.num_workers, exact)

    def teardown(self, stage: str) -> None:
        if stage == "fit":
            self.resume.stopped()

    # ---------------------------------------------------------------- loaders
    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        splits, role = self._plan().reads("train")
        urls = self._shards(splits)
        if not urls:
            raise ValueError(f"{self.dataset_dir}: no shards for training splits {splits}")
        workers = max(1, self.streaming.num_workers)
        keep = RoleFilter(self.roles, role) if role is not None else None
        if self.streaming.epoch == "pass":
            counts = self._training_counts(urls, splits, keep)
            source = EpochPasses(counts, self._decoded_reader(), keep, self.streaming.seed, rank, world, self.streaming.shuffle_buffer)
            resume = self.resume.stage(source, shared=True)  # every worker batches the rank's memes, then keeps its share
            stages: list[Any] = [source, *self._training_batches(rank, partial=True, collate=False), resume]
            stages.append(wds.map(SamplesToBatch(self.preprocessor)))
            length = batches_per_rank(sum(count for _, count in counts), world, self.streaming.batch_size)
        else:
            samples = self.streaming.epoch_samples or self.num_samples("train")
            batches = max(1, math.ceil(samples / (self.streaming.batch_size * world)))
            source = wds.ResampledShards(urls, seed=self.streaming.seed + 7919 * rank, deterministic=True)
            stages = [
                source,
                self._reader(),
                wds.shuffle(
                    self.streaming.shuffle_buffer, initial=min(self.streaming.shuffle_buffer, 100), seed=self.streaming.seed + rank
                ),
                wds.map(self.decode),
            ]
            if keep is not None:
                stages.append(wds.select(keep))
            stages += self._training_batches(rank, partial=False)
            length = math.ceil(batches / workers) * workers
            resume = self.resume.stage(source)
            stages.append(resume)
        pipeline = wds.DataPipeline(*stages, *self._handover())
        if self.streaming.epoch == "resampled":
            pipeline = pipeline.with_epoch(length // workers)
        loader = self._loader(pipeline.with_length(length))
        self.resume.running(loader, resume)
        return loader

    def _decoded_reader(self) -> Callable[[Any], Any]:
        return partial(_decoded, self._reader(), self.decode)

    def _training_counts(self, urls: list[str], splits: list[str], keep: RoleFilter | None) -> list[tuple[str, int]]:
        """Training memes per shard (url, count), in manifest order: the shard's count, or in a fold run its memes whose
        group trains (read once per run from the records, no image decoded)."""
        shards = [s for s in self.manifest["shards"] if s["split"] in splits]
        if keep is None:
            return [(url, int(shard["count"])) for url, shard in zip(urls, shards)]
        if getattr(self, "_counts_for", None) != (self.folds.fold, id(self.roles)):
            self._counts = [
                (url, sum(keep(r) for r in iter_records(self.dataset_dir, [shard["name"]], self.remote)))
                for url, shard in zip(urls, shards)
            ]
            self._counts_for = (self.folds.fold, id(self.roles))
        return self._counts

    def _training_batches(self, rank: int, partial: bool, collate: bool = True) -> list[Any]:
        """The batching stages: shuffled order, or memes of similar length together (`group_by_length`). `partial`: a
        pass's last, short batch is kept (no meme dropped). `collate=False`: batches stay lists of records (prepared
        later, by the worker that keeps them)."""
        to_batch = SamplesToBatch(self.preprocessor) if collate else None
        if not self.streaming.group_by_length:
            return [wds.batched(self.streaming.batch_size, collation_fn=to_batch, partial=partial)]
        length = getattr(self.preprocessor, "length", None)
        if length is None:
            raise ValueError(
                f"data.group_by_length needs the model's preprocessor to count a meme's tokens; {type(self.preprocessor).__name__} has no `length`"
            )
        grouped = LengthGroupedBatches(self.streaming.batch_size, self.streaming.length_groups, length, self.streaming.seed + rank, partial)
        return [grouped, wds.map(to_batch)] if to_batch is not None else [grouped]

    def _eval_dataloader(self, stage: str) -> DataLoader:
        rank, world = self._rank_world()
        splits, role = self._plan().reads(stage)
        urls = self._shards(splits)
        if not urls:
            raise ValueError(
                f"{self.dataset_dir}: no shards for {stage} splits {list(splits)}; give the dataset that split (e.g. the "
                "source's val_share) or run a fold (fold=k: validation is carved from the training folds)"
            )
        keep = RoleFilter(self.roles, role) if role is not None else None
        to_batch = SamplesToBatch(self.preprocessor)
        stages: list[Any] = [
            wds.SimpleShardList(urls),
            ShardsForConsumer(rank, world),
            BatchesWithinShards(self._reader(), self.decode, keep, self.streaming.eval_batch_size, to_batch),
            *self._handover(),
        ]
        loader = self._loader(wds.DataPipeline(*stages))
        if not self._lockstep_eval(world):
            return loader
        return EvenBatches(loader, sum_over_ranks(self.trainer.strategy), lambda: self._spare_batch(urls))

    def _lockstep_eval(self, world: int) -> bool:
        """Whether eval batches must stay in lockstep across ranks (forward passes are collectives)."""
        if world == 1 or self.streaming.even_eval_batches is False:
            return False
        strategy = self.trainer.strategy if self.trainer is not None else None
        return self.streaming.even_eval_batches is True or is_zero3(strategy)  # sharded forwards are collectives

    def _spare_batch(self, urls: list[str]) -> dict[str, Any]:
        """One batch from the split's first shard: filler for a rank that was given no shards."""
        pipeline = wds.DataPipeline(
            wds.SimpleShardList(urls[:1]),
            self._reader(),
            wds.map(self.decode),
            wds.batched(self.streaming.eval_batch_size, collation_fn=SamplesToBatch(self.preprocessor), partial=True),
        )
        return next(iter(pipeline))

    def val_dataloader(self) -> DataLoader | list:
        """Under cv.selection=last a fold run has no validation set: nothing (Lightning skips the loop, even
        where a debug mode such as fast_dev_run would otherwise force one batch of it)."""
        if self.selection_rule in NO_SELECTION:
            return []
        return self._eval_dataloader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_dataloader("test")

    def bank_dataloader(self) -> DataLoader:
        """The training memes, each once, as evaluation reads them: what RGCL mines and retrieval classifies from. In a
        fold run only the groups that train (never the held-out fold or the inner validation split)."""
        return self._eval_dataloader("train")

    def _handover(self) -> list[Any]:
        """Batches made in worker processes cross to the training process as one shared-memory block."""
        return [wds.map(one_block)] if self.streaming.num_workers > 0 else []

    def _loader(self, dataset: torch.utils.data.IterableDataset) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=None,
            num_workers=self.streaming.num_workers,
            persistent_workers=self.streaming.num_workers > 0,
            prefetch_factor=4 if self.streaming.num_workers > 0 else None,
        )


def _decoded(read: Callable[[Any], Any], decode: Callable[[Any], Any], shards: Any) -> Any:
    """Decoded samples of the given shards (picklable for loader workers)."""
    return map(decode, read(shards))

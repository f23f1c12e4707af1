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
from filelock import FileLock
from torch.utils.data import DataLoader, get_worker_info

from crossmod.data.ablation import DecodeAblated
from crossmod.data.batches import BatchesWithinShards, Preprocessor, SamplesToBatch
from crossmod.data.epoch_passes import EpochPasses, batches_per_rank
from crossmod.data.even_batches import EvenBatches, sum_over_ranks
from crossmod.data.folds import (
    INNER_SHARE,
    ensure_folds,
    ensure_inner_validation,
    find_folds,
    find_inner_validation,
    iter_records,
    missing_folds,
)
from crossmod.data.heads import Head, parse_heads
from crossmod.data.length_groups import LengthGroupedBatches
from crossmod.data.ocr import CaptionsFromImages
from crossmod.data.one_block import one_block
from crossmod.data.remote import BACKOFF_S, RETRIES, is_remote
from crossmod.data.selection_rules import NO_SELECTION, RoleFilter, StagePlan, check_selection, fold_splits, rule_for
from crossmod.data.shards import (
    MANIFEST,
    conversion_summary,
    fingerprint,
    read_manifest,
    shard_items,
    verify_shards,
    write_json_atomic,
    write_shards,
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
    """Streams memes from WebDataset shards built (once, under a lock) from a source."""

    def __init__(
        self,
        heads: dict[str, dict[str, Any]],
        source: Source | None = None,
        shard_root: str | None = None,
        shard_dir: str | None = None,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        fold: int | None = None,
        num_folds: int = 5,
        fold_seed: int = 0,
        train_splits: list[str] = ("train",),
        val_splits: list[str] = ("val",),
        test_splits: list[str] = ("test",),
        samples_per_shard: int = 500,
        shuffle_buffer: int = 1000,
        epoch: str = "pass",
        epoch_samples: int | None = None,
        allow_skip: bool = False,
        verify: bool = True,
        seed: int = 0,
        even_eval_batches: bool | str = "auto",
        preprocessor: Preprocessor | None = None,
        raw_dir: str | None = None,
        on_error: str = "raise",
        selection: str = "inner",
        inner_share: float = INNER_SHARE,
        describe: Callable[[Source], dict[str, Any] | None] | None = None,
        cache_dir: str | None = None,
        remote_retries: int = RETRIES,
        remote_backoff: float = BACKOFF_S,
        ocr: dict[str, Any] | None = None,
        group_by_length: bool = False,
        length_groups: int = 50,
        ablate: str | None = None,
    ) -> None:
        """`raw_dir` and `on_error` are config handles (`data.raw_dir=…`, `data.on_error=skip`) that data
        configs pass on to their source; skipping bad inputs is allowed when `allow_skip`, `on_error`
        or the source's own `on_error` says so. `even_eval_batches` (auto: when the driver says parameters are
        sharded (ZeRO-3) and there are several
        ranks) keeps evaluation batches in lockstep across ranks (src/crossmod/data/even_batches.py).
        `selection` and `inner_share` (`cv.selection`, `cv.inner_share`) say how a fold run's weights
        are chosen without its held-out fold (src/crossmod/data/selection_rules.py). `describe(source)` adds
        facts about the raw data to the manifest's summary when shards are converted (configs wire it, e.g.
        Multi3Hate's annotation statistics from evaluation; data code imports nothing above it).
        `shard_dir` may be a URL (`crossmod.data.remote`): shards stream from it, each downloaded once into
        `cache_dir` when one is given; `remote_retries` / `remote_backoff` govern reading after a failure.
        `ocr` ({engine, langs, cache}) reads the caption of every meme without text off its image during
        conversion (src/crossmod/data/ocr.py), for datasets that ship images only. `group_by_length` batches
        training memes of similar token counts from buffers of `length_groups` batches
        (src/crossmod/data/length_groups.py), so batches compute less padding; evaluation batches are unchanged.
        `ablate` (`image` | `text`) removes one modality of every meme as it is read (src/crossmod/data/ablation.py).
        `epoch`: `pass` shows every training meme once per epoch (src/crossmod/data/epoch_passes.py has the rule);
        `resampled` draws shards with replacement, `epoch_samples` (default: the training set's size) per epoch.
        """
        super().__init__()
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if source is None and shard_dir is None:
            raise ValueError("MemeDataModule needs a source to convert or a shard_dir with prepared shards")
        if source is not None and shard_root is None and shard_dir is None:
            raise ValueError("MemeDataModule needs shard_root (where converted shards are cached) or shard_dir")
        if fold is not None and not 0 <= fold < num_folds:
            raise ValueError(f"fold={fold} is outside 0..{num_folds - 1} (num_folds={num_folds})")
        check_selection(selection)
        if epoch not in ("pass", "resampled"):
            raise ValueError(f"data.epoch must be 'pass' (every training meme once per epoch) or 'resampled', got {epoch!r}")
        if epoch == "pass" and epoch_samples is not None:
            raise ValueError(
                f"data.epoch_samples={epoch_samples} sets the length of a resampled epoch; an epoch is a pass over the training "
                "memes (data.epoch=pass): drop epoch_samples, or set data.epoch=resampled"
            )
        self.epoch = epoch
        self.decode = DecodeAblated(ablate)  # every stream decodes through it: an ablation holds for every stage
        if ocr and source is not None:
            source = CaptionsFromImages(source, **ocr)
        self.selection, self.inner_share = selection, inner_share
        self.heads = parse_heads(heads)
        self.source, self.fold, self.num_folds, self.fold_seed = source, fold, num_folds, fold_seed
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.num_workers, self.samples_per_shard = num_workers, samples_per_shard
        self.train_splits, self.val_splits, self.test_splits = list(train_splits), list(val_splits), list(test_splits)
        self.shuffle_buffer, self.epoch_samples, self.seed = shuffle_buffer, epoch_samples, seed
        self.allow_skip = allow_skip or "skip" in (on_error, getattr(source, "on_error", "raise"))
        self.verify, self.raw_dir, self.describe = verify, raw_dir, describe
        if even_eval_batches not in (True, False, "auto"):
            raise ValueError(f"even_eval_batches must be true, false or auto, got {even_eval_batches!r}")
        self.even_eval_batches = even_eval_batches
        self.preprocessor = preprocessor
        # Set by the driver: whether the strategy shards parameters, so eval forwards are collectives.
        self.lockstep_eval_under_sharding = False
        self.cache_dir, self.remote_retries, self.remote_backoff = cache_dir, remote_retries, remote_backoff
        self.group_by_length, self.length_groups = group_by_length, length_groups
        self.dataset_dir: Path | str
        if shard_dir is not None:
            self.dataset_dir = str(shard_dir) if is_remote(shard_dir) else Path(shard_dir)
        else:
            self.dataset_dir = Path(shard_root) / f"{source.name}-{fingerprint(source.params())}"
        self.manifest: dict[str, Any] = {}
        self.plan: StagePlan | None = None  # what each stage reads; set by `setup`
        self.resume = StreamResume()  # where the training stream starts (from a checkpoint)

    # ---------------------------------------------------------------- preparation
    def prepare_data(self) -> None:
        """Convert the source to shards if they are missing; add the fold assignment if new (`convert`)."""
        self.convert()

    def convert(self, force: bool = False, folds: int | None = None) -> dict[str, Any]:
        """The one conversion path: `train.py` (through `prepare_data`) and `prepare.py` both come here.

        Converts unless the manifest is there (then verifies checksums if `verify`), and stores the fold
        assignment of a fold run (or `folds` folds, for `crossmod prepare … folds=k`). Runs on one process per node
        under Lightning; the file lock also covers every rank of a SLURM job, and a login-node `prepare.py`,
        calling it at once (the first converts, the others wait and reuse). Returns the manifest.
        """
        if isinstance(self.dataset_dir, str):
            return self._remote_manifest()
        self.dataset_dir.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.dataset_dir) + ".lock"):
            if force or not (self.dataset_dir / "manifest.json").is_file():
                if self.source is None:
                    raise FileNotFoundError(f"no manifest.json in shard_dir {self.dataset_dir}; prepare the shards first")
                print(f"Converting {self.source.name} from {self.raw_dir or 'its source'} to {self.dataset_dir} …", flush=True)
                manifest = write_shards(
                    self.source,
                    self.dataset_dir,
                    dataset=self.source.name,
                    heads=self.source.heads,
                    params=self.source.params(),
                    maxcount=self.samples_per_shard,
                    allow_skip=self.allow_skip,
                    extra={"split_roles": self.split_roles, **self._source_summary()},
                    progress_every=1000,
                )
                print(conversion_summary(manifest), flush=True)
                if isinstance(self.source, CaptionsFromImages):
                    found = self.source
                    print(
                        f"{found.filled} captions read off their images by {found.reader.engine.identity} ({found.empty} found no text)",
                        flush=True,
                    )
            elif self.verify:
                verify_shards(self.dataset_dir)
            self._record_split_roles()
            if folds:  # crossmod prepare … folds=k: the outer folds and, where the rule needs one, each fold's inner split
                entry = ensure_folds(self.dataset_dir, folds, self.fold_seed, self.fold_splits)
                for fold in range(folds):
                    if rule_for(fold, self.selection, read_manifest(self.dataset_dir), self.val_splits) == "inner":
                        ensure_inner_validation(self.dataset_dir, entry, fold, self.inner_share)
            if self.fold is not None:
                entry = ensure_folds(self.dataset_dir, self.num_folds, self.fold_seed, self.fold_splits)
                if rule_for(self.fold, self.selection, read_manifest(self.dataset_dir), self.val_splits) == "inner":
                    ensure_inner_validation(self.dataset_dir, entry, self.fold, self.inner_share)
            return read_manifest(self.dataset_dir)

    def _remote_manifest(self) -> dict[str, Any]:
        """A remote dataset is read, never written: its manifest must already hold what a fold run needs
        (`crossmod prepare … folds=k` stores the folds and their inner splits before the upload)."""
        manifest = read_manifest(self.dataset_dir)
        if self.fold is None:
            return manifest
        entry = find_folds(manifest, self.num_folds, self.fold_seed, self.fold_splits)
        share = self.inner_share if rule_for(self.fold, self.selection, manifest, self.val_splits) == "inner" else None
        if entry is None or (share is not None and find_inner_validation(entry, self.fold, share) is None):
            raise ValueError(
                missing_folds(str(self.dataset_dir), manifest, self.num_folds, self.fold_seed, self.fold_splits, self.fold, share)
            )
        return manifest

    def _record_split_roles(self) -> None:
        """Give a manifest written before datasets recorded their split roles the record (call under the lock).

        Only a dataset's own config (it has a source) knows them; a reader of the folder alone never writes its guess.
        """
        if self.source is None:
            return
        manifest = read_manifest(self.dataset_dir)
        if "split_roles" not in manifest:
            manifest["split_roles"] = self.split_roles
            write_json_atomic(self.dataset_dir / MANIFEST, manifest)

    @property
    def remote(self) -> dict[str, Any] | None:
        """How shards of a remote dataset are read (cache folder, retries, backoff); None for a local one."""
        if not isinstance(self.dataset_dir, str):
            return None
        cache = None
        if self.cache_dir is not None:
            manifest = self.manifest or read_manifest(self.dataset_dir)
            cache = str(Path(self.cache_dir) / f"{manifest['dataset']}-{manifest['fingerprint']}")
        return {"cache_dir": cache, "retries": self.remote_retries, "backoff": self.remote_backoff}

    def _reader(self) -> Callable[..., Any]:
        """The shard-reading pipeline stage; remote shards carry their manifest records and reading settings."""
        if self.remote is None:
            return shard_samples
        items = shard_items(self.dataset_dir, self.manifest, None, self.remote)
        return partial(shard_samples, records={item["url"]: item for item in items})

    def _source_summary(self) -> dict[str, Any]:
        """Facts about the raw data for the manifest: the source's own, and what the config's `describe` adds
        (e.g. Multi3Hate's annotation statistics, computed in evaluation)."""
        summary = getattr(self.source, "summary", None)
        own = summary() if callable(summary) else {}
        extra = self.describe(self.source) if self.describe is not None else None
        merged = {**(extra or {}), **own}
        return {"source_summary": merged} if merged else {}

    @property
    def split_roles(self) -> dict[str, list[str]]:
        """The splits this module trains, validates and tests on, and those its folds divide: recorded in the
        manifest at conversion, so `data=shards` reads the folder as the dataset's config does."""
        return {"train": self.train_splits, "val": self.val_splits, "test": self.test_splits, "folds": self.fold_splits}

    @property
    def fold_splits(self) -> list[str]:
        """The splits folds divide: the training splits (a dataset's own validation split stays a validation split)."""
        return fold_splits(self.train_splits)

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
        if self.fold is not None:
            folds = find_folds(self.manifest, self.num_folds, self.fold_seed, self.fold_splits)
            if folds is None:
                raise RuntimeError(
                    f"{self.dataset_dir}: no fold assignment for num_folds={self.num_folds}, seed={self.fold_seed}; run prepare_data first"
                )
        self.plan = StagePlan(
            {"train": self.train_splits, "val": self.val_splits, "test": self.test_splits},
            self.manifest["counts"]["split"],
            rule_for(self.fold, self.selection, self.manifest, self.val_splits),
            self.fold,
            folds,
            self.inner_share,
        )

    def _check_splits(self) -> None:
        """fold=null trains on the dataset's own splits; an evaluation-only set needs cross-validation."""
        if self.fold is not None:
            return
        present = set(self.manifest["counts"]["split"])
        if cannot_train_on_own_splits(self.train_splits, self.val_splits, present):
            raise ValueError(
                f"dataset {self.manifest['dataset']} has splits {sorted(present)}, but fold=null trains on "
                f"{self.train_splits} and validates on {self.val_splits}: cross-validate instead with fold=k, "
                f"e.g. fold=0 num_folds=3 (or set data.train_splits / data.val_splits)"
            )
        if not present & set(self.val_splits):
            warnings.warn(f"dataset {self.manifest['dataset']} has no samples in the validation splits {self.val_splits}", stacklevel=2)

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
        return self.roles is not None or bool(self._shards(self.test_splits))

    def num_samples(self, stage: str) -> int:
        """Samples in a stage's stream (train / val / test) under the current split or fold."""
        return self._plan().num_samples(stage)

    def held_out_labels(self) -> dict[str, dict[str, Any]]:
        """Every dataset head's label for each held-out sample of this fold run (id → head → label).

        Reports score a single-culture model against every culture's labels with it (Table 11).
        """
        if self.roles is None:
            raise RuntimeError("held_out_labels needs a fold run (fold=k) after setup")
        names = [s["name"] for s in self.manifest["shards"] if s["split"] in self.fold_splits]
        return {r["id"]: r["labels"] for r in iter_records(self.dataset_dir, names, self.remote) if self.roles[r["group"]] == "test"}

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
            exact = self.epoch == "pass" or self.num_workers <= 1  # a resampled stream rotates its workers' order
            self.resume.load(int(stream["epoch"]), int(stream["batches"]), self.num_workers, exact)

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
        workers = max(1, self.num_workers)
        keep = RoleFilter(self.roles, role) if role is not None else None
        if self.epoch == "pass":
            counts = self._training_counts(urls, splits, keep)
            source = EpochPasses(counts, self._decoded_reader(), keep, self.seed, rank, world, self.shuffle_buffer)
            resume = self.resume.stage(source, shared=True)  # every worker batches the rank's memes, then keeps its share
            stages: list[Any] = [source, *self._training_batches(rank, partial=True, collate=False), resume]
            stages.append(wds.map(SamplesToBatch(self.preprocessor)))
            length = batches_per_rank(sum(count for _, count in counts), world, self.batch_size)
        else:
            samples = self.epoch_samples or self.num_samples("train")
            batches = max(1, math.ceil(samples / (self.batch_size * world)))
            source = wds.ResampledShards(urls, seed=self.seed + 7919 * rank, deterministic=True)
            stages = [
                source,
                self._reader(),
                wds.shuffle(self.shuffle_buffer, initial=min(self.shuffle_buffer, 100), seed=self.seed + rank),
                wds.map(self.decode),
            ]
            if keep is not None:
                stages.append(wds.select(keep))
            stages += self._training_batches(rank, partial=False)
            length = math.ceil(batches / workers) * workers
            resume = self.resume.stage(source)
            stages.append(resume)
        pipeline = wds.DataPipeline(*stages, *self._handover())
        if self.epoch == "resampled":
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
        if getattr(self, "_counts_for", None) != (self.fold, id(self.roles)):
            self._counts = [
                (url, sum(keep(r) for r in iter_records(self.dataset_dir, [shard["name"]], self.remote)))
                for url, shard in zip(urls, shards)
            ]
            self._counts_for = (self.fold, id(self.roles))
        return self._counts

    def _training_batches(self, rank: int, partial: bool, collate: bool = True) -> list[Any]:
        """The batching stages: shuffled order, or memes of similar length together (`group_by_length`). `partial`: a
        pass's last, short batch is kept (no meme dropped). `collate=False`: batches stay lists of records (prepared
        later, by the worker that keeps them)."""
        to_batch = SamplesToBatch(self.preprocessor) if collate else None
        if not self.group_by_length:
            return [wds.batched(self.batch_size, collation_fn=to_batch, partial=partial)]
        length = getattr(self.preprocessor, "length", None)
        if length is None:
            raise ValueError(
                f"data.group_by_length needs the model's preprocessor to count a meme's tokens; {type(self.preprocessor).__name__} has no `length`"
            )
        grouped = LengthGroupedBatches(self.batch_size, self.length_groups, length, self.seed + rank, partial)
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
            BatchesWithinShards(self._reader(), self.decode, keep, self.eval_batch_size, to_batch),
            *self._handover(),
        ]
        loader = self._loader(wds.DataPipeline(*stages))
        if not self._lockstep_eval(world):
            return loader
        return EvenBatches(loader, sum_over_ranks(self.trainer.strategy), lambda: self._spare_batch(urls))

    def _lockstep_eval(self, world: int) -> bool:
        """Whether eval batches must stay in lockstep across ranks (forward passes are collectives)."""
        if world == 1 or self.even_eval_batches is False:
            return False
        return self.even_eval_batches is True or self.lockstep_eval_under_sharding

    def _spare_batch(self, urls: list[str]) -> dict[str, Any]:
        """One batch from the split's first shard: filler for a rank that was given no shards."""
        pipeline = wds.DataPipeline(
            wds.SimpleShardList(urls[:1]),
            self._reader(),
            wds.map(self.decode),
            wds.batched(self.eval_batch_size, collation_fn=SamplesToBatch(self.preprocessor), partial=True),
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
        return [wds.map(one_block)] if self.num_workers > 0 else []

    def _loader(self, dataset: torch.utils.data.IterableDataset) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=None,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            prefetch_factor=4 if self.num_workers > 0 else None,
        )


def _decoded(read: Callable[[Any], Any], decode: Callable[[Any], Any], shards: Any) -> Any:
    """Decoded samples of the given shards (picklable for loader workers)."""
    return map(decode, read(shards))

"""Conversion: a raw source to WebDataset shards, once, under a lock; and the fold assignments a run needs stored beside.

Separate from streaming (src/crossmod/data/memes.py), which only reads what this wrote: `train` reaches it through the
datamodule's `prepare_data`, `crossmod prepare` directly. A remote dataset is never written: its manifest must already
hold what a fold run needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from filelock import FileLock

from crossmod.data.data_settings import Conversion, Folds
from crossmod.data.folds import ensure_folds, ensure_inner_validation, find_folds, find_inner_validation, missing_folds
from crossmod.data.ocr import CaptionsFromImages
from crossmod.data.selection_rules import rule_for
from crossmod.data.shards import MANIFEST, conversion_summary, read_manifest, verify_shards, write_json_atomic, write_shards


class ShardConversion:
    """Converts `source` into `dataset_dir` (a local folder, or a URL that is only read) with the conversion settings,
    and stores the fold assignment of the run the fold settings describe. `describe(source)` adds facts about the raw
    data to the manifest's summary (configs wire it, e.g. Multi3Hate's annotation statistics from evaluation; data code
    imports nothing above it)."""

    def __init__(
        self,
        source: Any,
        dataset_dir: Path | str,
        settings: Conversion,
        folds: Folds,
        describe: Callable[[Any], dict[str, Any] | None] | None = None,
    ) -> None:
        self.source, self.dataset_dir, self.settings, self.folds, self.describe = source, dataset_dir, settings, folds, describe
        source_policy = getattr(source, "on_error", "raise")  # a source's own config may allow skipping too
        self.allow_skip = settings.allow_skip or "skip" in (settings.on_error, source_policy)

    def convert(self, force: bool = False, folds: int | None = None) -> dict[str, Any]:
        """Converts unless the manifest is there (then verifies checksums if `verify`), and stores the fold assignment
        of a fold run (or `folds` folds, for `crossmod prepare … folds=k`). Runs on one process per node under
        Lightning; the file lock also covers every rank of a SLURM job, and a login-node `crossmod prepare`, calling it
        at once (the first converts, the others wait and reuse). Returns the manifest."""
        if isinstance(self.dataset_dir, str):
            return self._remote_manifest()
        self.dataset_dir.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.dataset_dir) + ".lock"):
            if force or not (self.dataset_dir / "manifest.json").is_file():
                self._write()
            elif self.settings.verify:
                verify_shards(self.dataset_dir)
            self._record_split_roles()
            f = self.folds
            if folds:  # crossmod prepare … folds=k: the outer folds and, where the rule needs one, each fold's inner split
                entry = ensure_folds(self.dataset_dir, folds, f.fold_seed, f.fold_splits)
                for fold in range(folds):
                    if rule_for(fold, f.selection, read_manifest(self.dataset_dir), f.val_splits) == "inner":
                        ensure_inner_validation(self.dataset_dir, entry, fold, f.inner_share)
            if f.fold is not None:
                entry = ensure_folds(self.dataset_dir, f.num_folds, f.fold_seed, f.fold_splits)
                if rule_for(f.fold, f.selection, read_manifest(self.dataset_dir), f.val_splits) == "inner":
                    ensure_inner_validation(self.dataset_dir, entry, f.fold, f.inner_share)
            return read_manifest(self.dataset_dir)

    def _write(self) -> None:
        if self.source is None:
            raise FileNotFoundError(f"no manifest.json in shard_dir {self.dataset_dir}; prepare the shards first")
        print(f"Converting {self.source.name} from {self.settings.raw_dir or 'its source'} to {self.dataset_dir} …", flush=True)
        manifest = write_shards(
            self.source,
            self.dataset_dir,
            dataset=self.source.name,
            heads=self.source.heads,
            params=self.source.params(),
            maxcount=self.settings.samples_per_shard,
            allow_skip=self.allow_skip,
            extra={"split_roles": self.folds.split_roles, **self._source_summary()},
            progress_every=1000,
        )
        print(conversion_summary(manifest), flush=True)
        if isinstance(self.source, CaptionsFromImages):
            found = self.source
            print(
                f"{found.filled} captions read off their images by {found.reader.engine.identity} ({found.empty} found no text)", flush=True
            )

    def _remote_manifest(self) -> dict[str, Any]:
        """A remote dataset is read, never written: its manifest must already hold what a fold run needs
        (`crossmod prepare … folds=k` stores the folds and their inner splits before the upload)."""
        manifest, f = read_manifest(self.dataset_dir), self.folds
        if f.fold is None:
            return manifest
        entry = find_folds(manifest, f.num_folds, f.fold_seed, f.fold_splits)
        share = f.inner_share if rule_for(f.fold, f.selection, manifest, f.val_splits) == "inner" else None
        if entry is None or (share is not None and find_inner_validation(entry, f.fold, share) is None):
            raise ValueError(missing_folds(str(self.dataset_dir), manifest, f.num_folds, f.fold_seed, f.fold_splits, f.fold, share))
        return manifest

    def _record_split_roles(self) -> None:
        """Give a manifest written before datasets recorded their split roles the record (call under the lock).

        Only a dataset's own config (it has a source) knows them; a reader of the folder alone never writes its guess.
        """
        if self.source is None:
            return
        manifest = read_manifest(self.dataset_dir)
        if "split_roles" not in manifest:
            manifest["split_roles"] = self.folds.split_roles
            write_json_atomic(self.dataset_dir / MANIFEST, manifest)

    def _source_summary(self) -> dict[str, Any]:
        """Facts about the raw data for the manifest: the source's own, and what the config's `describe` adds
        (e.g. Multi3Hate's annotation statistics, computed in evaluation)."""
        summary = getattr(self.source, "summary", None)
        own = summary() if callable(summary) else {}
        extra = self.describe(self.source) if self.describe is not None else None
        merged = {**(extra or {}), **own}
        return {"source_summary": merged} if merged else {}

"""Write Sample records into WebDataset tar shards plus a manifest, atomically.

A dataset directory only appears under its final name once every shard and the manifest are
complete: writing happens in a sibling `.partial` directory that is renamed at the end, so an
interrupted conversion never leaves something that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import webdataset as wds

from crossmod.data.cache_files import exclusive_dir, refuse_links, write_file
from crossmod.data.heads import parse_heads
from crossmod.data.manifest_checks import check_manifest, parse_manifest
from crossmod.data.paths import OutsideRoot, resolve_within
from crossmod.data.remote import fetch, file_url, is_remote
from crossmod.data.sample import Sample, decode_shard_entry
from crossmod.data.tar_reader import shard_samples

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
# How a manifest without a `split_roles` record (written before datasets recorded it) is read: MemeDataModule's defaults.
DEFAULT_SPLIT_ROLES: dict[str, list[str]] = {"train": ["train"], "val": ["val"], "test": ["test"], "folds": ["train"]}
TAR_MTIME = 0  # fixed member times: a rerun writes byte-identical shards

NO_SPLIT = "all"  # the shard split of a release without a split column (Multi3Hate, MHC): its samples' `split` is None


def shard_split(record: dict[str, Any]) -> str:
    """The split a sample record's shards were written under: its own, or NO_SPLIT where the release has none."""
    return record.get("split") or NO_SPLIT


@dataclass
class Skipped:
    """An input a source could not turn into a Sample; recorded in the manifest, never dropped silently."""

    input: str
    reason: str


def fingerprint(params: dict[str, Any]) -> str:
    """Stable short hash of a source's parameters: the cache key of its shards."""
    blob = json.dumps(params, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The checked manifest of a dataset folder, local or remote (`crossmod.data.remote`)."""
    if is_remote(directory):
        url = file_url(str(directory), MANIFEST)
        manifest = parse_manifest(url, fetch(url))
        for index, shard in enumerate(manifest.get("shards") if isinstance(manifest.get("shards"), list) else []):
            name = shard.get("name") if isinstance(shard, dict) else None
            try:
                file_url(str(directory), name if isinstance(name, str) else "")
            except ValueError as error:
                raise ValueError(f"{url}: shard {index}: {error}") from None
        check_manifest(manifest, url)  # type: ignore[arg-type]
        return manifest
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"no {MANIFEST} in {directory}: the shards were never completed")
    manifest = parse_manifest(path)
    check_shard_names(manifest, path)
    check_manifest(manifest, path)
    return manifest


def split_roles(manifest: dict[str, Any]) -> dict[str, list[str]]:
    """Which splits the dataset trains (`train`), validates (`val`) and tests (`test`) on, and which its folds divide
    (`folds`), as its config said at conversion: a reader of the folder alone (`data=shards`, possibly remote) then
    needs no split keys. An older manifest without the record reads as the datamodule's defaults, as it always did."""
    return manifest.get("split_roles") or DEFAULT_SPLIT_ROLES


def check_shard_names(manifest: dict[str, Any], path: Path) -> None:
    """Every shard a manifest lists is a file of its own directory: a shared manifest naming
    `../elsewhere.tar`, an absolute path or a symlink out of the directory is refused before any read."""
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    for index, shard in enumerate(shards if isinstance(shards, list) else []):
        name = shard.get("name") if isinstance(shard, dict) else None
        if not isinstance(name, str) or "/" in name or "\\" in name:
            raise ValueError(f"{path}: shard {index} has name {name!r}; shard names are plain file names in {path.parent}")
        try:
            resolve_within(path.parent, name, "shard name")
        except OutsideRoot as error:
            raise ValueError(f"{path}: shard {index}: {error}") from None


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON through an exclusively created temporary file and rename, so readers never see half a file
    and a link planted at a temporary name is never followed (src/crossmod/data/cache_files.py)."""
    write_file(path, json.dumps(payload, indent=1, ensure_ascii=False).encode(), "manifest", user_folder=True)


class _SplitWriter:
    """Rolls shards of at most `maxcount` samples for one split."""

    def __init__(self, directory: Path, split: str, maxcount: int) -> None:
        self.directory, self.split, self.maxcount = directory, split, maxcount
        self.shards: list[dict[str, Any]] = []
        self._writer: wds.TarWriter | None = None
        self._count = 0

    def write(self, entry: dict[str, Any]) -> None:
        if self._writer is None or self._count >= self.maxcount:
            self.close()
            name = f"{self.split}-{len(self.shards):06d}.tar"
            self.shards.append({"name": name, "split": self.split, "count": 0})
            self._writer = wds.TarWriter(str(self.directory / name), mtime=TAR_MTIME)
            self._count = 0
        self._writer.write(entry)
        self._count += 1
        self.shards[-1]["count"] += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


PROGRESS_SECONDS = 30.0  # conversion progress: a line per `progress_every` samples, and at least this often


def write_shards(
    records: Iterable[Sample | Skipped],
    out_dir: str | Path,
    *,
    dataset: str,
    heads: dict[str, dict[str, Any]],
    params: dict[str, Any],
    maxcount: int = 500,
    allow_skip: bool = False,
    extra: dict[str, Any] | None = None,
    progress_every: int = 0,
) -> dict[str, Any]:
    """Validate and write `records` as `<split>-NNNNNN.tar` shards with a manifest; return the manifest.

    A `Skipped` record stops the conversion unless `allow_skip`, in which case it is counted in the
    manifest. Inputs read always equal samples written plus skipped.
    """
    typed_heads = parse_heads(heads)  # a bad declaration stops before anything is written
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(out_dir, "shard folder")
    remove_stale_partials(out_dir)
    partial = exclusive_dir(out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}"), "shard folder")
    writers: dict[str, _SplitWriter] = {}
    counts: dict[str, Any] = {"split": Counter(), "lang": Counter(), "label": defaultdict(Counter)}
    skipped: list[dict[str, str]] = []
    seen_ids: set[str] = set()
    written = 0
    start = last_line = time.time()
    try:
        for record in records:
            if isinstance(record, Skipped):
                if not allow_skip:
                    raise ValueError(f"{dataset}: cannot convert {record.input}: {record.reason} (allow skipping to count it instead)")
                skipped.append({"input": record.input, "reason": record.reason})
                continue
            record.validate(typed_heads)
            if record.id in seen_ids:
                raise ValueError(f"{dataset}: duplicate sample id {record.id}")
            seen_ids.add(record.id)
            split = record.split or NO_SPLIT
            writer = writers.get(split) or writers.setdefault(split, _SplitWriter(partial, split, maxcount))
            writer.write(record.to_shard_entry(f"{written:09d}"))
            written += 1
            counts["split"][split] += 1
            counts["lang"][record.lang] += 1
            for head in heads:
                counts["label"][head][json.dumps(record.labels.get(head))] += 1
            now = time.time()
            if progress_every and (written % progress_every == 0 or now - last_line >= PROGRESS_SECONDS):
                last_line = now  # a plain line at least every PROGRESS_SECONDS: readable in a SLURM output file
                rate = written / max(now - start, 1e-9)
                print(
                    f"[{dataset}] {written} samples written, {len(skipped)} skipped ({now - start:.0f}s, {rate:.1f} samples/s)", flush=True
                )
    except BaseException:
        for writer in writers.values():
            writer.close()
        shutil.rmtree(partial, ignore_errors=True)
        raise
    for writer in writers.values():
        writer.close()
    shards = [shard for writer in writers.values() for shard in writer.shards]
    for shard in shards:
        shard["sha256"] = sha256_file(partial / shard["name"])
        shard["bytes"] = (partial / shard["name"]).stat().st_size
    manifest = {
        "dataset": dataset,
        "schema_version": SCHEMA_VERSION,
        "fingerprint": fingerprint(params),
        "params": params,
        "heads": heads,
        "inputs_read": written + len(skipped),
        "samples_written": written,
        "counts": {
            "split": dict(counts["split"]),
            "lang": dict(counts["lang"]),
            "label": {head: dict(c) for head, c in counts["label"].items()},
        },
        "skipped": skipped,
        "shards": shards,
        "folds": [],
        **(extra or {}),
    }
    write_json_atomic(partial / "manifest.json", manifest)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(partial, out_dir)
    return manifest


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(out_dir: Path) -> None:
    """Delete `.partial-<pid>` leftovers of killed conversions (their process is gone) beside `out_dir`."""
    for leftover in out_dir.parent.glob(f"{out_dir.name}.partial-*"):
        pid = leftover.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)


def shard_items(
    directory: str | Path,
    manifest: dict[str, Any],
    splits: list[str] | None = None,
    remote: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Reader items for the shards of `splits` (None: all): each carries what its manifest record says
    (sample count, sha256, size in bytes), so the tar reader checks the shard against it while reading.
    A remote dataset's items carry its URLs and `remote`'s reading settings (`cache_dir`, `retries`, `backoff`)."""
    if is_remote(directory):
        settings = {k: v for k, v in (remote or {}).items() if v is not None}
        return [
            {"url": file_url(str(directory), shard["name"]), "name": shard["name"], **settings, **_record(shard)}
            for shard in manifest["shards"]
            if splits is None or shard["split"] in splits
        ]
    directory = Path(directory)
    items = []
    for shard in manifest["shards"]:
        if splits is None or shard["split"] in splits:
            path = directory / shard["name"]
            if not path.is_file():
                raise FileNotFoundError(f"shard {path} listed in the manifest is missing")
            items.append({"url": str(path), **_record(shard)})
    return items


def _record(shard: dict[str, Any]) -> dict[str, Any]:
    return {key: shard[key] for key in ("count", "sha256", "bytes") if key in shard}


def verify_shards(directory: str | Path) -> dict[str, Any]:
    """Read every shard once: complete tar, checksum, size and sample count as the manifest records them;
    raise naming the first shard that differs."""
    manifest = read_manifest(directory)
    for _ in shard_samples(shard_items(directory, manifest)):
        pass
    return manifest


def conversion_summary(manifest: dict[str, Any], show_skipped: int = 20) -> str:
    """Human-readable counts of a manifest: inputs, samples, splits, languages, label shares, skips."""
    counts = manifest["counts"]
    lines = [
        f"{manifest['dataset']}: {manifest['inputs_read']} inputs read = {manifest['samples_written']} samples written"
        f" + {len(manifest['skipped'])} skipped",
        "  split: " + ", ".join(f"{k} {v}" for k, v in sorted(counts["split"].items())),
        "  lang: " + ", ".join(f"{k} {v}" for k, v in sorted(counts["lang"].items())),
    ]
    for head, values in counts["label"].items():
        total = sum(values.values()) or 1
        shares = ", ".join(f"{label} {n} ({100 * n / total:.1f}%)" for label, n in sorted(values.items()))
        lines.append(f"  label {head}: {shares}")
    skipped = manifest["skipped"]
    if skipped:
        lines.append(f"  skipped inputs ({len(skipped)}, all listed in {MANIFEST}):")
        lines += [f"    {entry['input']}: {entry['reason']}" for entry in skipped[:show_skipped]]
        if len(skipped) > show_skipped:
            lines.append(f"    … and {len(skipped) - show_skipped} more")
    return "\n".join(lines)


def read_samples(directory: str | Path, splits: list[str] | None = None, remote: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every sample (image bytes included) of the given splits (None: all), in shard order: for scoring
    whole splits outside a training loop (evaluation, zero-shot, prediction). Each shard is checked
    against its manifest record (complete tar, checksum, size, sample count) in the same pass."""
    manifest = read_manifest(directory)
    items = shard_items(directory, manifest, splits, remote)
    if not items:
        raise ValueError(f"{directory}: no shards in splits {splits} (splits: {sorted(manifest['counts']['split'])})")
    return [decode_shard_entry(entry) for entry in shard_samples(items)]

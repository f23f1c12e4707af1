"""Projected image features on disk, one safetensors file per image, so a frozen vision tower runs once per image.

An entry's name is the image key the preprocessor computed (sha256 of the image's bytes and of every
preprocessor setting that changes its pixels); its folder is the namespace of what turns pixels into
features (sha256 of the base model's weight files and config, the family, the dtype and the Transformers
version). Change any of them and the cache is a different folder: stale features are never read.

Each entry is written once: it is staged in an exclusively created temporary file and takes its name with
`os.link`, which fails when the name exists, so ranks that met the same image (Multi3Hate shows one image
under five captions) never replace each other's file, and a reader never sees half a file. An entry is
data: it must parse as safetensors, name its own key and namespace, hold finite tensors of the model's
dtype, match the checksum of its tensors stored in its header, and carry the HMAC of its name and content under
this user's cache key (src/crossmod/data/cache_keys.py: a checksum anyone can recompute, a key binds the entry to the
image it was computed from). An entry that fails any of these is treated as missing: the image is encoded again,
the entry replaced, and the refusal counted and named in a warning. Links are refused where they would redirect a
write (src/crossmod/data/cache_files.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as safetensors_bytes

from crossmod.data.cache_files import refuse_links, write_file
from crossmod.data.cache_keys import entry_mac, mac_matches
from crossmod.models.vlm.image_features import LAYOUT, ImageEntry

log = logging.getLogger(__name__)

FORMAT = "crossmod-vision-features/1"
# Files of a checkpoint folder that decide what the vision tower and projector compute.
WEIGHT_FILES = ("config.json", "*.safetensors")


class DamagedCacheEntry(ValueError):
    """A cache entry that does not parse or does not hold what its name promises."""


def checkpoint_folder(name_or_path: str) -> Path:
    """A local folder as given; a hub id's snapshot folder in the local hub cache."""
    folder = Path(name_or_path)
    if folder.is_dir():
        return folder
    from transformers.utils import cached_file

    return Path(cached_file(name_or_path, "config.json")).parent


def _file_digest(path: Path, memo: dict[str, Any]) -> str:
    """sha256 of a file, remembered by (real path, size, mtime) so a 5 GB checkpoint is hashed once per machine."""
    stat = path.stat()
    real = str(path.resolve())
    known = memo.get(real)
    if known and known.get("size") == stat.st_size and known.get("mtime_ns") == stat.st_mtime_ns:
        return str(known["sha256"])
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    memo[real] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest.hexdigest()}
    return digest.hexdigest()


def weights_digest(folder: Path, memo_file: Path) -> str:
    """One sha256 over the checkpoint's config and weight files (names and contents)."""
    try:
        memo = json.loads(memo_file.read_text(encoding="utf-8")) if memo_file.is_file() else {}
    except ValueError:
        memo = {}  # a damaged memo only costs rehashing
    memo = memo if isinstance(memo, dict) else {}
    before = json.dumps(memo, sort_keys=True)
    files = sorted({p for pattern in WEIGHT_FILES for p in folder.glob(pattern) if p.is_file()})
    if not any(p.suffix == ".safetensors" for p in files):
        raise ValueError(f"{folder}: no *.safetensors weights; the vision cache names features by the weights that made them")
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}\0{_file_digest(path, memo)}\0".encode())
    if json.dumps(memo, sort_keys=True) != before:
        write_file(memo_file, json.dumps(memo, indent=1, sort_keys=True).encode(), "vision cache's file digests")
    return digest.hexdigest()


def _tensor_checksum(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclass
class CacheStats:
    """What the cache did in this process: entries read, entries written, images encoded, bytes written."""

    hits: int = 0
    writes: int = 0
    encoded: int = 0
    bytes_written: int = 0
    already_written: int = 0  # another rank or run wrote the entry first
    refused: int = 0  # entries that failed their checks: encoded again and replaced

    def reset(self) -> None:
        self.hits = self.writes = self.encoded = self.bytes_written = self.already_written = self.refused = 0

    def line(self, root: Path) -> str:
        refused = f", {self.refused} refused and encoded again" if self.refused else ""
        return (
            f"vision cache {root}: {self.hits} images read, {self.encoded} encoded{refused}, "
            f"{self.writes} written ({self.bytes_written / 2**20:.1f} MiB)"
        )


@dataclass
class VisionFeatureStore:
    """Entries of one namespace under `root/<namespace[:16]>/<key[:2]>/<key>.safetensors`."""

    root: Path
    namespace: str
    dtype: torch.dtype
    stats: CacheStats = field(default_factory=CacheStats)
    _verified: set[str] = field(default_factory=set)
    _replace: set[str] = field(default_factory=set)  # keys whose entry was refused: the next put replaces it

    @classmethod
    def open(cls, root: str | Path, name_or_path: str, family: str, dtype: torch.dtype) -> VisionFeatureStore:
        """The store of a checkpoint's features; writes its namespace description (once) for people reading the folder."""
        import transformers

        root = Path(root)
        folder = checkpoint_folder(name_or_path)
        identity = {
            "format": FORMAT,
            "weights_sha256": weights_digest(folder, root / "file_digests.json"),
            "family": family,
            "dtype": str(dtype),
            "transformers": transformers.__version__,
        }
        namespace = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        store = cls(root, namespace, dtype)
        description = store.folder / "namespace.json"
        if not description.is_file():
            write_file(description, json.dumps({**identity, "checkpoint": str(folder)}, indent=1).encode(), "vision cache")
        return store

    @property
    def folder(self) -> Path:
        return self.root / self.namespace[:16]

    def path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"vision cache key {key!r} is not a sha256 hex digest")
        return self.folder / key[:2] / f"{key}.safetensors"

    def get(self, key: str) -> tuple[ImageEntry, str] | None:
        """The entry and the layout the family reads it in (`image_features.layout`); None when the image was never
        encoded, or when its entry is refused (then it is encoded again and `put` replaces the entry)."""
        path = self.path(key)
        if not path.is_file():
            return None
        refuse_links(path, "vision cache entry")
        try:
            tensors, layout = self.read(path, key)
        except DamagedCacheEntry as error:
            self.stats.refused += 1
            self._replace.add(key)
            log.warning("%s; the image is encoded again and the entry replaced", error)
            return None
        self.stats.hits += 1
        return tensors, layout

    def read(self, path: Path, key: str) -> tuple[ImageEntry, str]:
        """The entry at `path` after every check; DamagedCacheEntry naming the file and what failed otherwise."""
        try:
            with safe_open(str(path), "pt") as handle:
                meta = handle.metadata() or {}
                tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 - safe_open has no iterator
        except (SafetensorError, OSError, ValueError) as error:
            raise DamagedCacheEntry(f"{path}: not a readable vision cache entry ({error})") from None
        self._check(path, key, meta, tensors)
        return tensors, meta["layout"]

    def _check(self, path: Path, key: str, meta: dict[str, str], tensors: dict[str, torch.Tensor]) -> None:
        def refuse(reason: str) -> None:
            raise DamagedCacheEntry(f"{path}: {reason}")

        if meta.get("format") != FORMAT or meta.get("key") != key or meta.get("namespace") != self.namespace:
            refuse(f"its header names format {meta.get('format')!r}, key {meta.get('key')!r}, another namespace or none")
        if not LAYOUT.fullmatch(meta.get("layout") or ""):
            refuse(f"its header names layout {meta.get('layout')!r}, not sequence, tensor or blocks:<tokens>")
        if not mac_matches(meta.get("mac"), self.namespace, key, meta["layout"], meta.get("sha256") or ""):
            refuse("it does not carry this user's cache key's signature of its name and content (planted, swapped or older)")
        if "image" not in tensors or any(not n == "image" and not n.startswith("deepstack.") for n in tensors):
            refuse(f"it holds {sorted(tensors)}, not image features")
        for name, tensor in tensors.items():
            if tensor.dtype != self.dtype or tensor.dim() != 2 or tensor.shape[0] == 0:
                refuse(f"{name} is {tensor.dtype} {tuple(tensor.shape)}, not (tokens, hidden) in {self.dtype}")
        if key not in self._verified:  # entries are never rewritten: checked once per process
            if meta.get("sha256") != _tensor_checksum(tensors):
                refuse("its tensors do not match the checksum in its header")
            if not all(bool(torch.isfinite(t).all()) for t in tensors.values()):
                refuse("it holds non-finite values")
            self._verified.add(key)

    def put(self, key: str, entry: ImageEntry, layout: str) -> None:
        """Write an entry unless one exists; the first writer wins and nobody replaces it."""
        target = self.path(key)
        replace = key in self._replace
        if target.is_file() and not replace:
            self.stats.already_written += 1
            return
        tensors = {name: t.detach().to(self.dtype).contiguous().cpu() for name, t in entry.items()}
        meta = {
            "format": FORMAT,
            "key": key,
            "namespace": self.namespace,
            "layout": layout,
            "sha256": _tensor_checksum(tensors),
        }
        meta["mac"] = entry_mac(self.namespace, key, layout, meta["sha256"])
        data = safetensors_bytes(tensors, metadata=meta)
        target.parent.mkdir(parents=True, exist_ok=True)
        refuse_links(target, "vision cache entry")
        fd, staging = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(staging, 0o644)
            try:
                if replace:  # a refused entry: the new one takes its name (a name is replaced, never a link's target)
                    os.replace(staging, target)
                    self._replace.discard(key)
                    self._verified.discard(key)
                else:
                    os.link(staging, target)  # fails if the name exists: written once
            except FileExistsError:
                self.stats.already_written += 1
                return
        finally:
            if os.path.lexists(staging):
                os.unlink(staging)
        self.stats.writes += 1
        self.stats.bytes_written += len(data)

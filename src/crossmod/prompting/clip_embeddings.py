"""CLIP image and text embeddings for exemplar retrieval, computed once and cached as safetensors.

Any `transformers` CLIP checkpoint (hub id or folder): `get_image_features` of the checkpoint's image
processor output and `get_text_features` of its tokenizer's output (truncated to the model's length).
A cache file is keyed by what its numbers depend on: the dataset's shard fingerprint (or the tag
vocabulary) and the model's identity (the hash of its config and weight files). It is plain data: one
float32 tensor, with the keys it holds (meme ids or tag texts) and the tensor's sha256 in the header.
A file that does not read, or whose numbers or keys differ from what its header records, is refused
with its path: delete it to recompute. So is one whose numbers cannot rank anything (rows not finite, zero,
or all the same: a checksum proves integrity, not validity), and such rows freshly computed are never cached.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from crossmod.data.cache_files import refuse_links, write_file
from crossmod.models.model_folders import refuse_shipped_code

WEIGHT_FILES = ("*.json", "*.safetensors", "*.bin", "*.txt", "*.model")


def model_identity(name_or_path: str) -> str:
    """`<name>@<sha256 of its config, tokenizer and weight files>` (a hub id resolves to its cached snapshot)."""
    folder = Path(name_or_path)
    if not folder.is_dir():
        from transformers.utils import cached_file

        folder = Path(cached_file(name_or_path, "config.json")).parent
    digest = hashlib.sha256()
    files = sorted({f for pattern in WEIGHT_FILES for f in folder.glob(pattern) if f.is_file()})
    if not files:
        raise FileNotFoundError(f"{folder}: no model files (config.json, *.safetensors …)")
    for file in files:
        digest.update(file.name.encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return f"{Path(name_or_path).name}@{digest.hexdigest()[:16]}"


def cache_file(cache_dir: str | Path, kind: str, data_key: str, identity: str) -> Path:
    """`<cache_dir>/<data_key>.<model>-<hash>.<kind>.safetensors`: one file per (data, model, kind)."""
    name, _, digest = identity.partition("@")
    safe = re.sub(r"[^\w.-]", "_", name)[:60]
    return Path(cache_dir) / f"{data_key}.{safe}-{digest}.{kind}.safetensors"


def _tensor_sha(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype=np.float32).tobytes()).hexdigest()


def read_cache(path: Path, keys: Sequence[str]) -> np.ndarray:
    """The cached rows of `keys` (in that order); a damaged file or one holding other keys is refused."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            header = handle.metadata() or {}
            array = handle.get_tensor("embeddings")
        stored_keys = json.loads(header["keys"])
        recorded = header["sha256"]
    except Exception as error:  # noqa: BLE001 - any unreadable file gets the same clear refusal
        raise ValueError(f"{path}: damaged embedding cache ({type(error).__name__}: {error}); delete the file to recompute") from error
    if _tensor_sha(array) != recorded or array.ndim != 2 or len(stored_keys) != array.shape[0]:
        raise ValueError(f"{path}: damaged embedding cache (its numbers differ from the checksum in its header); delete it to recompute")
    problem = cannot_rank(array)
    if problem:
        raise ValueError(f"{path}: embedding cache cannot rank memes: {problem}; delete it to recompute")
    index = {key: row for row, key in enumerate(stored_keys)}
    missing = [key for key in keys if key not in index]
    if missing:
        raise ValueError(f"{path}: the cache lacks {len(missing)} of the keys asked for (first: {missing[0]!r}); delete it to recompute")
    return array[[index[key] for key in keys]]


def cannot_rank(array: np.ndarray) -> str | None:
    """Why these embedding rows cannot rank anything by cosine (None when they can)."""
    count = len(array)
    bad = int((~np.isfinite(array).all(axis=1)).sum()) if count else 0
    if bad:
        return f"{bad} of {count} rows are not finite (NaN or infinite)"
    zero = int((~np.any(array != 0, axis=1)).sum()) if count else 0
    if zero:
        return f"{zero} of {count} rows are zero"
    if count > 1 and bool((array == array[0]).all()):
        return f"all {count} rows are the same"
    return None


def write_cache(path: Path, keys: Sequence[str], array: np.ndarray, identity: str) -> None:
    """Write atomically (a temporary file renamed), so a crash never leaves a half file under the real name."""
    from safetensors.numpy import save

    array = np.ascontiguousarray(array, dtype=np.float32)
    data = save({"embeddings": array}, metadata={"keys": json.dumps(list(keys)), "sha256": _tensor_sha(array), "model": identity})
    write_file(path, data, "embedding cache")


def cached_embeddings(
    path: Path, keys: Sequence[str], compute: Callable[[Sequence[str]], np.ndarray], identity: str
) -> tuple[np.ndarray, bool]:
    """(rows for `keys`, whether they came from the cache): read `path` when it exists, else compute and write it."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(path, "embedding cache")
    with FileLock(str(path) + ".lock"):
        if path.is_file():
            return read_cache(path, keys), True
        array = np.asarray(compute(keys), dtype=np.float32)
        if array.shape[0] != len(keys):
            raise ValueError(f"{len(keys)} keys but {array.shape[0]} embeddings computed")
        problem = cannot_rank(array)
        if problem:
            raise ValueError(
                f"{identity}: the embeddings it computed cannot rank memes ({problem}); nothing cached at {path}: check fewshot.clip"
            )
        write_cache(path, keys, array, identity)
        return array, False


def _features(output: torch.Tensor | object) -> torch.Tensor:
    """`get_*_features` returns a tensor (older transformers) or an output whose pooler_output is projected."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


class ClipEncoder:
    """A CLIP checkpoint's image and text towers, batched, on one device."""

    def __init__(self, name_or_path: str, batch_size: int = 32, device: torch.device | None = None) -> None:
        from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

        self.device = device or torch.device("cpu")
        refuse_shipped_code(name_or_path)
        self.model = CLIPModel.from_pretrained(name_or_path, trust_remote_code=False).to(self.device).eval()
        self.image_processor = AutoImageProcessor.from_pretrained(name_or_path, trust_remote_code=False)
        self.tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False)
        self.batch_size = batch_size
        self.max_length = self.model.config.text_config.max_position_embeddings

    @torch.no_grad()
    def images(self, images: Sequence[bytes], names: Sequence[str]) -> np.ndarray:
        """(n, projection_dim) image embeddings of encoded images; `names` say which meme failed to decode."""
        rows = []
        for start in range(0, len(images), self.batch_size):
            batch = [
                _decode(data, name) for data, name in zip(images[start : start + self.batch_size], names[start : start + self.batch_size])
            ]
            pixels = self.image_processor(images=batch, return_tensors="pt")["pixel_values"].to(self.device)
            rows.append(_features(self.model.get_image_features(pixel_values=pixels)).float().cpu())
        return torch.cat(rows).numpy()

    @torch.no_grad()
    def texts(self, texts: Sequence[str]) -> np.ndarray:
        """(n, projection_dim) text embeddings."""
        rows = []
        for start in range(0, len(texts), self.batch_size):
            tokens = self.tokenizer(
                list(texts[start : start + self.batch_size]), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            ).to(self.device)
            features = self.model.get_text_features(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
            rows.append(_features(features).float().cpu())
        return torch.cat(rows).numpy()


def _decode(data: bytes | None, name: str) -> Image.Image:
    if data is None:
        raise ValueError(f"meme {name} has no image: image retrieval needs one for every meme")
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except Exception as error:  # noqa: BLE001 - re-raised with the meme named
        raise ValueError(f"meme {name}: image cannot be decoded ({error})") from error

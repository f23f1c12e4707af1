"""Caches are shared folders: a symlink planted where crossmod writes must never make it write outside.

For each cache crossmod writes (remote shards, OCR captions, CLIP embeddings, tiny model folders, the
shard conversion's staging folder and manifest), the attacker plants a link at the name the writer
used to open (the predictable temporary name, the cache file itself, or the cache's folder) pointing
at a victim outside the cache. The real writer then runs: the victim is unchanged, and either the
write succeeds inside the cache or a link the writer would have to follow is refused, by name.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from crossmod.data.remote import cached_copy
from tests.fixtures.shard_server import serve
from tests.fixtures.small import small_synthetic

VICTIM = b"victim: a file outside every cache\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "authorized_keys"
    path.parent.mkdir()
    path.write_bytes(VICTIM)
    return path


def untouched(victim: Path) -> bool:
    return victim.read_bytes() == VICTIM and sorted(p.name for p in victim.parent.iterdir()) == [victim.name]


@pytest.fixture(scope="module")
def served_shard(tmp_path_factory):
    directory, manifest = small_synthetic(tmp_path_factory.mktemp("served"), num_groups=6, samples_per_shard=20)
    with serve(directory.parent) as (base, _faults):
        shard = manifest["shards"][0]
        yield {**shard, "url": f"{base}/{directory.name}/{shard['name']}", "retries": 0, "backoff": 0.01}


def test_remote_shard_cache_ignores_a_link_planted_at_its_temporary_name(served_shard, victim, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f".{served_shard['name']}.{os.getpid()}.partial").symlink_to(victim)
    copy = cached_copy(served_shard, cache)
    assert copy == cache / served_shard["name"] and not copy.is_symlink() and copy.stat().st_size == served_shard["bytes"]
    assert untouched(victim)


def test_remote_shard_cache_refuses_a_linked_cache_folder(served_shard, victim, tmp_path):
    (tmp_path / "cache").mkdir()
    linked = tmp_path / "cache" / "ds-fingerprint"
    linked.symlink_to(victim.parent)
    with pytest.raises(OSError, match=r"ds-fingerprint: the remote shard cache is a symbolic link .*remove the link"):
        cached_copy(served_shard, linked)
    assert untouched(victim)


class FixedEngine:
    name, langs, identity = "fixed", ("en",), "fixed[1]"

    def lines(self, image: bytes):
        return [(0.0, 10.0, 0.0, "read off the image")]


def test_ocr_cache_refuses_a_cache_file_that_links_outside(victim, tmp_path):
    from crossmod.data.ocr import CaptionReader

    cache = tmp_path / "ocr" / "captions.jsonl"
    cache.parent.mkdir()
    victim.write_bytes(b"")  # an empty file reads as an empty cache: the writer would append to it
    cache.symlink_to(victim)
    with pytest.raises(OSError, match=r"captions.jsonl: the OCR cache is a symbolic link"):
        CaptionReader(FixedEngine(), cache).read(b"image bytes")
    assert victim.read_bytes() == b""


def test_clip_embedding_cache_ignores_a_link_planted_at_its_temporary_name(victim, tmp_path):
    from crossmod.prompting.clip_embeddings import cached_embeddings

    path = tmp_path / "emb" / "ds.clip-1.images.safetensors"
    path.parent.mkdir()
    path.with_name(path.name + ".partial").symlink_to(victim)
    rows, hit = cached_embeddings(path, ["a", "b"], lambda keys: np.eye(len(keys), 4, dtype=np.float32), "clip@1")
    assert not hit and rows.shape == (2, 4) and path.is_file() and not path.is_symlink()
    assert untouched(victim)


def test_clip_embedding_cache_refuses_a_linked_cache_folder(victim, tmp_path):
    from crossmod.prompting.clip_embeddings import cached_embeddings

    linked = tmp_path / "emb"
    linked.symlink_to(victim.parent, target_is_directory=True)
    with pytest.raises(OSError, match=r"emb: the embedding cache is a symbolic link"):
        cached_embeddings(linked / "ds.clip-1.images.safetensors", ["a"], lambda keys: np.ones((1, 4), np.float32), "clip@1")
    assert untouched(victim)


def test_tiny_model_build_ignores_a_link_planted_at_its_staging_folder(victim, tmp_path):
    from crossmod.models.tiny.folder import build_once

    out = tmp_path / "assets" / "tiny-bert"
    out.parent.mkdir()
    out.with_name(out.name + ".partial").symlink_to(victim.parent, target_is_directory=True)

    def write(staging: Path) -> None:
        staging.mkdir(exist_ok=True)
        (staging / "config.json").write_text("{}")

    assert (build_once(out, write) / "config.json").read_text() == "{}" and not out.is_symlink()
    assert untouched(victim)


def test_shard_conversion_ignores_links_planted_at_its_staging_names(victim, tmp_path):
    from crossmod.data.shards import write_json_atomic

    out = tmp_path / "data" / "synthetic-6-20"
    out.parent.mkdir()
    out.with_name(f"{out.name}.partial-{os.getpid()}").symlink_to(victim.parent, target_is_directory=True)
    directory, manifest = small_synthetic(tmp_path / "data", num_groups=6, samples_per_shard=20)
    assert directory == out and not out.is_symlink() and (out / "manifest.json").is_file()
    (out / f".manifest.json.{os.getpid()}.tmp").symlink_to(victim)
    write_json_atomic(out / "manifest.json", manifest)  # as storing folds rewrites it
    assert not (out / "manifest.json").is_symlink()
    assert untouched(victim)

"""The vision cache's files are data someone else may have written: an entry is written once and never replaced,
and one that is damaged, renamed, crafted or linked elsewhere is refused, naming the file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from crossmod.data.cache_files import LinkedCachePath
from crossmod.data.cache_keys import entry_mac
from crossmod.models.vlm import vision_cache
from crossmod.models.vlm.cached_vision import batch_layout
from crossmod.models.vlm.vision_cache import DamagedCacheEntry, VisionFeatureStore

KEY = hashlib.sha256(b"meme").hexdigest()
OTHER = hashlib.sha256(b"another meme").hexdigest()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2_vl"}))
    save_file({"w": torch.ones(2, 2)}, str(folder / "model.safetensors"))
    return folder


def store_of(root: Path, checkpoint: Path, dtype: torch.dtype = torch.float32) -> VisionFeatureStore:
    return VisionFeatureStore.open(root, str(checkpoint), "qwen2_vl", dtype)


def entry() -> dict[str, torch.Tensor]:
    return {"image": torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7}


def test_an_entry_is_written_once_and_read_back(tmp_path, checkpoint):
    store = store_of(tmp_path / "cache", checkpoint)
    store.put(KEY, entry(), layout="sequence")
    first = os.stat(store.path(KEY))
    store.put(KEY, {"image": torch.zeros(3, 4)}, layout="sequence")  # a second writer (another rank) changes nothing
    assert (store.stats.writes, store.stats.already_written) == (1, 1)
    assert os.stat(store.path(KEY)).st_ino == first.st_ino
    tensors, layout = store.get(KEY)
    assert torch.equal(tensors["image"], entry()["image"]) and layout == "sequence"
    assert store.get(OTHER) is None
    assert not list(store.path(KEY).parent.glob(".*.partial"))


def test_the_namespace_follows_the_weights_and_the_dtype(tmp_path, checkpoint):
    root = tmp_path / "cache"
    first = store_of(root, checkpoint).namespace
    assert store_of(root, checkpoint).namespace == first  # the memo of file digests gives the same answer
    assert store_of(root, checkpoint, torch.bfloat16).namespace != first
    save_file({"w": torch.full((2, 2), 2.0)}, str(checkpoint / "model.safetensors"))  # new weights, same names
    assert store_of(root, checkpoint).namespace != first


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate", "not a readable vision cache entry"),
        ("flip", "do not match the checksum"),
        ("rename", "header names"),
        ("swap", "does not carry this user's cache key's signature"),
        ("nan", "non-finite"),
        ("dtype", "not \\(tokens, hidden\\) in torch.float32"),
        ("extra", "not image features"),
        ("layout", "layout 'blocks:-3'"),
    ],
)
def test_a_damaged_or_crafted_entry_is_refused_encoded_again_and_replaced(damage, message, tmp_path, checkpoint, caplog):
    store = store_of(tmp_path / "cache", checkpoint)
    store.put(KEY, entry(), layout="sequence")
    path = store.path(KEY)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) - 5])
    elif damage == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "rename":  # another image's entry put under this image's name
        store.put(OTHER, entry(), layout="sequence")
        os.replace(store.path(OTHER), path)
    elif damage == "swap":  # another image's features under this name, header and checksum rewritten to match it
        tensors = {"image": torch.full((3, 4), 0.5)}
        meta = {"format": vision_cache.FORMAT, "key": KEY, "namespace": store.namespace, "layout": "sequence"}
        meta["sha256"] = vision_cache._tensor_checksum(tensors)
        save_file(tensors, str(path), metadata=meta)
    else:  # crafted by a writer holding the key (a bug of our own): each content check still holds
        tensors = {
            "nan": {"image": torch.full((3, 4), float("nan"))},
            "dtype": {"image": torch.ones(3, 4, dtype=torch.float64)},
            "extra": {"image": torch.ones(3, 4), "pickle": torch.ones(1, 1)},
            "layout": {"image": torch.ones(3, 4)},
        }[damage]
        layout = "blocks:-3" if damage == "layout" else "sequence"  # a tile size the features would be cut by
        meta = {"format": vision_cache.FORMAT, "key": KEY, "namespace": store.namespace, "layout": layout}
        meta["sha256"] = vision_cache._tensor_checksum(tensors)
        meta["mac"] = entry_mac(store.namespace, KEY, layout, meta["sha256"])
        save_file(tensors, str(path), metadata=meta)
    with pytest.raises(DamagedCacheEntry, match=message):
        store_of(tmp_path / "cache", checkpoint).read(path, KEY)
    fresh = store_of(tmp_path / "cache", checkpoint)  # a new process: nothing verified yet
    with caplog.at_level("WARNING"):
        assert fresh.get(KEY) is None  # treated as missing: the model encodes the image again
    assert fresh.stats.refused == 1 and "1 refused and encoded again" in fresh.stats.line(fresh.root)
    assert str(path) in caplog.text and "encoded again and the entry replaced" in caplog.text
    fresh.put(KEY, entry(), layout="sequence")  # what the model encoded replaces the refused entry
    tensors, layout = store_of(tmp_path / "cache", checkpoint).get(KEY)
    assert torch.equal(tensors["image"], entry()["image"]) and layout == "sequence"
    assert not list(path.parent.glob(".*.partial"))


def test_entries_signed_with_another_users_key_are_not_read(tmp_path, checkpoint, monkeypatch):
    store = store_of(tmp_path / "cache", checkpoint)
    store.put(KEY, entry(), layout="sequence")
    monkeypatch.setenv("CROSSMOD_CACHE_KEY_FILE", str(tmp_path / "someone-else" / "cache_key"))
    assert store_of(tmp_path / "cache", checkpoint).get(KEY) is None


def test_links_planted_in_the_cache_are_refused(tmp_path, checkpoint):
    store = store_of(tmp_path / "cache", checkpoint)
    outside = tmp_path / "outside.safetensors"
    save_file({"image": torch.ones(3, 4)}, str(outside))
    store.path(KEY).parent.mkdir(parents=True)
    store.path(KEY).symlink_to(outside)
    with pytest.raises(LinkedCachePath, match="symbolic link"):
        store.get(KEY)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store.path(OTHER).parent.symlink_to(elsewhere)  # a folder link would redirect the write
    with pytest.raises(LinkedCachePath, match="symbolic link"):
        store.put(OTHER, entry(), layout="sequence")
    assert not list(elsewhere.iterdir())


def test_a_key_must_be_a_digest(tmp_path, checkpoint):
    store = store_of(tmp_path / "cache", checkpoint)
    with pytest.raises(ValueError, match="not a sha256 hex digest"):
        store.path("../../etc/passwd")


def test_a_batch_reads_its_entries_in_one_layout():
    assert batch_layout({"blocks:256"}) == "blocks:256"
    assert batch_layout({"tensor", "blocks:256"}) == "blocks:256"  # a flat entry reads like a tiled one
    assert batch_layout({"sequence"}) == "sequence"
    for mixed in ({"sequence", "tensor"}, {"blocks:64", "blocks:256"}):
        with pytest.raises(DamagedCacheEntry, match="disagree on their layout"):
            batch_layout(mixed)


def test_a_cache_key_file_that_is_a_link_is_refused(tmp_path, monkeypatch):
    from crossmod.data.cache_files import LinkedCachePath
    from crossmod.data.cache_keys import entry_mac

    theirs = tmp_path / "theirs"
    theirs.write_text("ab" * 32 + "\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "cache_key").symlink_to(theirs)
    monkeypatch.setenv("CROSSMOD_CACHE_KEY_FILE", str(tmp_path / "mine" / "cache_key"))
    with pytest.raises(LinkedCachePath, match="symbolic link"):
        entry_mac("anything")

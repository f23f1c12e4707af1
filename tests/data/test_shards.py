"""Shard writing: manifest truthfulness, atomicity, skips, checksums."""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter

import pytest
from PIL import Image

from crossmod.data.folds import iter_records
from crossmod.data.sample import Sample, SampleError, decode_shard_entry
from crossmod.data.shards import Skipped, read_manifest, verify_shards, write_shards
from tests.fixtures.small import small_synthetic

HEADS = {"US": {"kind": "binary"}, "topic": {"kind": "multiclass", "classes": ["a", "b", "c"]}}


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, format="PNG")
    return buffer.getvalue()


def _sample(i: int, **changes) -> Sample:
    fields = dict(
        id=f"d/{i}", group=f"d/{i // 2}", lang="en", text=f"text {i}", image=_png(), labels={"US": i % 2, "topic": i % 3}, split="train"
    )
    fields.update(changes)
    return Sample(**fields)


def test_manifest_counts_equal_what_the_shards_hold(tmp_path):
    directory, manifest = small_synthetic(tmp_path, num_groups=20, samples_per_shard=37)
    records = list(iter_records(directory, [s["name"] for s in manifest["shards"]]))
    assert len(records) == manifest["samples_written"] == manifest["inputs_read"]
    assert Counter(r["split"] for r in records) == Counter(manifest["counts"]["split"])
    assert Counter(r["lang"] for r in records) == Counter(manifest["counts"]["lang"])
    for head in manifest["heads"]:
        assert Counter(json.dumps(r["labels"][head]) for r in records) == Counter(manifest["counts"]["label"][head])
    for shard in manifest["shards"]:
        with tarfile.open(directory / shard["name"]) as tar:
            assert sum(m.name.endswith(".json") for m in tar) == shard["count"]
    assert len({r["id"] for r in records}) == len(records)


def test_image_bytes_are_stored_unchanged(tmp_path):
    image = _png()
    write_shards([_sample(0, image=image)], tmp_path / "d", dataset="d", heads=HEADS, params={})
    with tarfile.open(tmp_path / "d" / "train-000000.tar") as tar:
        members = {m.name.rsplit(".", 1)[1]: tar.extractfile(m).read() for m in tar}
    assert members["png"] == image
    assert decode_shard_entry(members)["image"] == image


def test_interrupted_conversion_leaves_nothing_that_looks_complete(tmp_path):
    def broken():
        yield _sample(0)
        yield _sample(1)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_shards(broken(), tmp_path / "d", dataset="d", heads=HEADS, params={})
    assert not (tmp_path / "d").exists()
    with pytest.raises(FileNotFoundError):
        read_manifest(tmp_path / "d")


def test_skips_stop_the_conversion_unless_allowed_and_are_then_counted(tmp_path):
    records = [_sample(0), Skipped("row 2 of train.jsonl", "image img/2.png missing"), _sample(1)]
    with pytest.raises(ValueError, match="row 2 of train.jsonl: image img/2.png missing"):
        write_shards(records, tmp_path / "a", dataset="d", heads=HEADS, params={})
    manifest = write_shards(records, tmp_path / "b", dataset="d", heads=HEADS, params={}, allow_skip=True)
    assert manifest["skipped"] == [{"input": "row 2 of train.jsonl", "reason": "image img/2.png missing"}]
    assert manifest["inputs_read"] == manifest["samples_written"] + len(manifest["skipped"]) == 3


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"labels": {"US": 2}}, "head US is binary"),
        ({"labels": {"topic": 5}}, "class index < 3"),
        ({"labels": {"XX": 1}}, "unknown heads"),
        ({"image": b"not an image"}, "not JPEG, PNG or WebP"),
    ],
)
def test_bad_samples_are_named(tmp_path, changes, message):
    with pytest.raises(SampleError, match=f"sample d/0: .*{message}"):
        write_shards([_sample(0, **changes)], tmp_path / "d", dataset="d", heads=HEADS, params={})


def test_duplicate_ids_are_refused(tmp_path):
    with pytest.raises(ValueError, match="duplicate sample id d/0"):
        write_shards([_sample(0), _sample(0)], tmp_path / "d", dataset="d", heads=HEADS, params={})


def test_checksums_catch_a_rewritten_shard(tmp_path):
    directory, manifest = small_synthetic(tmp_path, num_groups=4)
    verify_shards(directory)
    shard = directory / manifest["shards"][0]["name"]
    shard.write_bytes(shard.read_bytes()[:-512])
    with pytest.raises(ValueError, match="does not match its manifest checksum"):
        verify_shards(directory)


def test_a_long_conversion_prints_a_plain_progress_line_with_its_rate(tmp_path, capsys, monkeypatch):
    """Between the every-N-samples lines, a line at least every PROGRESS_SECONDS (here: every sample) with the rate,
    as plain text (a SLURM output file has no terminal for a bar)."""
    import crossmod.data.shards as shards

    monkeypatch.setattr(shards, "PROGRESS_SECONDS", 0.0)
    write_shards([_sample(k) for k in range(3)], tmp_path / "d", dataset="d", heads=HEADS, params={}, progress_every=1000)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[d]")]
    assert len(lines) == 3 and all("samples/s)" in line for line in lines)
    assert lines[-1].startswith("[d] 3 samples written, 0 skipped")

"""Shards read from a real HTTP server (and a `pipe:` command) give exactly the samples of the local folder;
a dropped connection is resumed at the same byte, a corrupt byte or a server that keeps failing is a
named error, and the cache keeps one verified copy per shard."""

from __future__ import annotations

import json
import shutil
import tarfile

import pytest

from datamodules.remote import RemoteReadError, RemoteStream, file_url, is_remote
from datamodules.sample import SampleError
from datamodules.shards import read_manifest, read_samples
from datamodules.tar_reader import ShardFormatError
from tests.fixtures.shard_server import serve
from tests.fixtures.small import small_synthetic

FAST = {"retries": 2, "backoff": 0.01}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    directory, manifest = small_synthetic(root, num_groups=12, samples_per_shard=20)
    return directory, manifest


@pytest.fixture
def served(dataset):
    directory, manifest = dataset
    with serve(directory.parent) as (base, faults):
        yield f"{base}/{directory.name}", faults, directory, manifest


def _ids_and_images(samples):
    return [(s["id"], s["image"], json.dumps(s["labels"], sort_keys=True)) for s in samples]


def test_locations_are_told_apart_and_joined_safely():
    assert is_remote("https://h/ds") and is_remote("s3://b/ds") and is_remote("pipe:cat {name}")
    assert not is_remote("/data/shards/ds") and not is_remote("data/ds") and not is_remote("file:///data/ds")
    assert file_url("https://h/ds/", "train-000000.tar") == "https://h/ds/train-000000.tar"
    assert file_url("pipe:cat /d/{name}", "manifest.json") == "pipe:cat /d/manifest.json"
    for hostile in ("a;rm -rf ~.tar", "$(touch x).tar", "../up.tar", "x y.tar", ".hidden"):
        with pytest.raises(ValueError, match="not a plain name"):
            file_url("pipe:cat /d/{name}", hostile)
    with pytest.raises(ValueError, match="needs '\\{name\\}'"):
        file_url("pipe:aws s3 cp s3://b/ds -", "manifest.json")


def test_samples_from_the_server_equal_the_local_ones(served):
    url, faults, directory, manifest = served
    assert read_manifest(url) == manifest
    assert _ids_and_images(read_samples(url, ["train"], FAST)) == _ids_and_images(read_samples(directory, ["train"]))
    assert faults.requests["manifest.json"] >= 1 and all(
        faults.requests[s["name"]] == 1 for s in manifest["shards"] if s["split"] == "train"
    )


def test_a_dropped_connection_resumes_at_the_same_byte(served):
    url, faults, directory, manifest = served
    shard = next(s for s in manifest["shards"] if s["split"] == "train")
    faults.drop_after[shard["name"]] = (shard["bytes"] // 3, 2)  # cut twice mid-shard, then whole
    stream = RemoteStream(f"{url}/{shard['name']}", shard["bytes"], **FAST)
    assert stream.read() == (directory / shard["name"]).read_bytes()
    assert stream.attempts == 2 and faults.requests[shard["name"]] == 3


def test_a_server_that_keeps_dropping_is_a_named_error(served):
    url, faults, _, manifest = served
    shard = next(s for s in manifest["shards"] if s["split"] == "train")
    faults.drop_after[shard["name"]] = (1000, 99)
    with pytest.raises(RemoteReadError, match=rf"{shard['name']}: read failed at byte 1000 after 3 attempts"):
        read_samples(url, ["train"], FAST)


def _member_offset(path, suffix: str) -> int:
    with tarfile.open(path) as tar:
        return next(m.offset_data for m in tar.getmembers() if m.name.endswith(suffix))


def test_a_corrupt_byte_is_a_named_error(served):
    """In image bytes only the shard's checksum can tell; in a record, the record's own check tells first."""
    url, faults, directory, manifest = served
    shard = next(s for s in manifest["shards"] if s["split"] == "train")
    image = next(name for name in tarfile.open(directory / shard["name"]).getnames() if not name.endswith(".json"))
    faults.corrupt_at[shard["name"]] = _member_offset(directory / shard["name"], image) + 10
    with pytest.raises(ShardFormatError, match=rf"shard {url}/{shard['name']} does not match its manifest checksum"):
        read_samples(url, ["train"], FAST)
    faults.corrupt_at[shard["name"]] = _member_offset(directory / shard["name"], ".json")
    with pytest.raises(SampleError, match=rf"shard {url}/{shard['name']}: sample \d+ has a .json record that is not JSON"):
        read_samples(url, ["train"], FAST)


def test_the_cache_downloads_once_and_never_trusts_a_corrupt_copy(served, tmp_path):
    url, faults, directory, manifest = served
    settings = {**FAST, "cache_dir": str(tmp_path / "cache")}
    expected = _ids_and_images(read_samples(directory, ["val"]))
    assert _ids_and_images(read_samples(url, ["val"], settings)) == expected
    assert _ids_and_images(read_samples(url, ["val"], settings)) == expected
    val = [s["name"] for s in manifest["shards"] if s["split"] == "val"]
    assert all(faults.requests[name] == 1 for name in val)  # downloaded once, then read from the cache
    cached = tmp_path / "cache" / val[0]
    data = bytearray(cached.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cached.write_bytes(bytes(data))
    assert _ids_and_images(read_samples(url, ["val"], settings)) == expected
    assert faults.requests[val[0]] == 2  # the corrupt copy was replaced

    faults.corrupt_at[val[0]] = 600
    cached.unlink()
    with pytest.raises(RemoteReadError, match="does not match its manifest checksum"):
        read_samples(url, ["val"], settings)
    assert not cached.exists() and not list(cached.parent.glob(".*partial"))  # nothing corrupt kept under any name


def test_a_pipe_command_reads_the_same_samples(dataset, tmp_path):
    directory, _ = dataset
    if shutil.which("cat") is None:
        pytest.skip("no cat")
    location = f"pipe:cat {directory}/{{name}}"
    assert _ids_and_images(read_samples(location, ["test"], FAST)) == _ids_and_images(read_samples(directory, ["test"]))


def test_a_remote_manifest_naming_a_hostile_shard_is_refused(dataset, tmp_path):
    directory, manifest = dataset
    hostile = tmp_path / "hostile"
    shutil.copytree(directory, hostile)
    bad = json.loads((hostile / "manifest.json").read_text())
    bad["shards"][0]["name"] = "x;touch pwned.tar"
    (hostile / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="shard 0: .*not a plain name"):
        read_manifest(f"pipe:cat {hostile}/{{name}}")
    assert not (tmp_path / "pwned.tar").exists()

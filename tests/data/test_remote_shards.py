"""Shards read from a real HTTP server (and a `pipe:` command) give exactly the samples of the local folder;
a dropped connection is resumed at the same byte, a corrupt byte or a server that keeps failing is a
named error, and the cache keeps one verified copy per shard. A fold run of a served one-split dataset (MHC) reads
the splits its manifest records; where its folds are missing, the error's advice is a step that fixes the run."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import sys
import tarfile

import pytest

from crossmod.data.remote import RemoteReadError, RemoteStream, file_url, is_remote
from crossmod.data.sample import SampleError
from crossmod.data.shards import read_manifest, read_samples, sha256_file
from crossmod.data.tar_reader import ShardFormatError
from tests.conftest import ROOT, scaled
from tests.fixtures.shard_server import serve
from tests.fixtures.small import small_synthetic
from tests.zygote import run_python

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
    """A byte flipped in transit is a checksum mismatch, whether it lands in an image or in a record (a streamed
    shard's record that does not parse is checked against the shard's checksum before it is blamed)."""
    url, faults, directory, manifest = served
    shard = next(s for s in manifest["shards"] if s["split"] == "train")
    image = next(name for name in tarfile.open(directory / shard["name"]).getnames() if not name.endswith(".json"))
    faults.corrupt_at[shard["name"]] = _member_offset(directory / shard["name"], image) + 10
    with pytest.raises(ShardFormatError, match=rf"shard {url}/{shard['name']} does not match its manifest checksum"):
        read_samples(url, ["train"], FAST)
    faults.corrupt_at[shard["name"]] = _member_offset(directory / shard["name"], ".json")
    with pytest.raises(ShardFormatError, match=rf"shard {url}/{shard['name']} does not match its manifest checksum"):
        read_samples(url, ["train"], FAST)


def test_a_record_written_bad_is_still_blamed_on_the_record(tmp_path):
    """A shard whose checksum matches but whose record does not parse: the writer's fault, named as such."""
    dataset, manifest = small_synthetic(tmp_path / "data", num_groups=4, samples_per_shard=40)
    shard = next(s for s in manifest["shards"] if s["split"] == "train")
    path = dataset / shard["name"]
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in members:
            if member.name.endswith(".json") and data.startswith(b"{"):
                data = b"[" + data[1:]  # same size, not JSON
            tar.addfile(member, io.BytesIO(data))
    manifest_path = dataset / "manifest.json"
    record = json.loads(manifest_path.read_text())
    for item in record["shards"]:
        if item["name"] == shard["name"]:
            item["sha256"], item["bytes"] = sha256_file(path), path.stat().st_size
    manifest_path.write_text(json.dumps(record))
    with serve(dataset.parent) as (base, _faults):
        with pytest.raises(SampleError, match=rf"{shard['name']}: sample \d+ has a .json record that is not JSON"):
            read_samples(f"{base}/{dataset.name}", ["train"], FAST)


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


# ------------------------------------------------------------------ fold runs on a one-split dataset (MHC layout)
SHARDS_FOLD0 = ("fold=0", "num_folds=3", "num_workers=0", "remote_retries=1", "remote_backoff=0.01")


def _prepare_mhc(root, folds: int | None = None):
    """`crossmod prepare data=mhc data.raw_dir=… data.shard_root=<root>/shards [folds=…]`'s conversion (the library call
    the job makes) on a tiny MHC layout: (raw dir, shard dir)."""
    from crossmod.recipes.prepare import compose_data, prepare
    from tests.data.sources import layouts

    raw = layouts.mhc(root / "raw", cases=12)  # 2 languages × 6 templates: 12 groups, all in split `all`
    prepare(compose_data("mhc", [f"raw_dir={raw}"]), str(root / "shards"), folds=folds)
    (directory,) = [p for p in (root / "shards").glob("mhc-*") if p.is_dir()]
    return raw, directory


def _shards_datamodule(url: str, *overrides: str):
    """`train.py data=shards data.shard_dir=<url> <overrides>`'s datamodule, set up for fitting."""
    from types import SimpleNamespace

    from hydra.utils import instantiate

    from crossmod.recipes.prepare import compose_data
    from tests.data.test_memes import IdsOnly

    dm = instantiate(compose_data("shards", [f"shard_dir={url}", *overrides]), preprocessor=IdsOnly())
    dm.prepare_data()
    dm.trainer = SimpleNamespace(global_rank=0, world_size=1, lightning_module=None)
    dm.setup("fit")
    return dm


def _loader_ids(loader) -> list[str]:
    return [i for batch in loader for i in batch["ids"]]


@pytest.fixture(scope="module")
def mhc_prepared(tmp_path_factory):
    return _prepare_mhc(tmp_path_factory.mktemp("mhc"), folds=3)


def test_data_shards_runs_a_fold_of_a_one_split_dataset_from_the_server(mhc_prepared):
    """The issue's case: `crossmod prepare data=mhc … folds=3`, served over HTTP, `data=shards fold=0 num_folds=3` without split keys."""
    _, directory = mhc_prepared
    manifest = read_manifest(directory)
    with serve(directory.parent) as (base, faults):
        dm = _shards_datamodule(f"{base}/{directory.name}", *SHARDS_FOLD0)
        held_out, selection = _loader_ids(dm.test_dataloader()), _loader_ids(dm.val_dataloader())
        (entry,) = manifest["folds"]
        assert (
            dm.selection_rule == "inner" and len(held_out) == entry["samples_per_fold"][0] and len(selection) == dm.num_samples("val") > 0
        )
        group_of = {s["id"]: s["group"] for s in read_samples(directory)}
        assert {entry["assignment"][group_of[i]] for i in held_out} == {0}
        assert not {entry["assignment"][group_of[i]] for i in selection} & {0}
        assert all(faults.requests[s["name"]] >= 1 for s in manifest["shards"])  # read from the server
    assert manifest["split_roles"] == {"train": ["all"], "val": [], "test": [], "folds": ["all"]}  # what data=shards read


def _command(error: str, start: str) -> str:
    match = re.search(rf"`({re.escape(start)}[^`]*)`", error)
    assert match, f"no `{start} …` command in: {error}"
    return match.group(1)


def test_an_older_manifest_without_split_roles_says_which_splits_its_folds_divide(mhc_prepared, tmp_path):
    """A manifest written before split roles were recorded: the error names what was searched and what is there,
    and its advice (`data.train_splits=[all]`) makes the run work."""
    _, directory = mhc_prepared
    old = tmp_path / directory.name
    shutil.copytree(directory, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["split_roles"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    with serve(tmp_path) as (base, _):
        url = f"{base}/{old.name}"
        with pytest.raises(ValueError) as caught:
            _shards_datamodule(url, *SHARDS_FOLD0)
        error = str(caught.value)
        for fact in ("num_folds=3", "seed=0", "inner validation share 0.15", "over split(s) ['train']", "num_folds=3, seed=0 over ['all']"):
            assert fact in error, fact
        advice = _command(error, "data.train_splits=")
        assert advice == "data.train_splits=[all]"
        dm = _shards_datamodule(url, *SHARDS_FOLD0, advice)
        assert len(_loader_ids(dm.test_dataloader())) == manifest["folds"][0]["samples_per_fold"][0]


def test_missing_folds_name_the_prepare_command_that_stores_them(tmp_path):
    """Prepared without folds (or with another seed / inner share): the error's `crossmod prepare` command, run on the
    local copy, stores what the run needs, and the served folder then runs."""
    raw, directory = _prepare_mhc(tmp_path)
    overrides = (*SHARDS_FOLD0, "fold_seed=1", "inner_share=0.2")
    with serve(directory.parent) as (base, _):
        url = f"{base}/{directory.name}"
        with pytest.raises(ValueError) as caught:
            _shards_datamodule(url, *overrides)
        error = str(caught.value)
        for fact in ("num_folds=3", "seed=1", "inner validation share 0.2", "over split(s) ['all']", "has no fold assignments"):
            assert fact in error, fact
        command = shlex.split(_command(error, "crossmod prepare "))
        assert command[2:4] == ["data=mhc", f"data.raw_dir={raw}"] and "folds=3" in command
        assert "data.fold_seed=1" in command and "data.inner_share=0.2" in command
        done = run_python(
            [sys.executable, "-m", "crossmod", *command[1:], f"data.shard_root={directory.parent}"],
            cwd=ROOT, capture_output=True, text=True, timeout=scaled(300),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        dm = _shards_datamodule(url, *overrides)
        assert dm.selection_rule == "inner" and _loader_ids(dm.test_dataloader())

"""`train.py data=shards data.shard_dir=http://…`, with shards served by a real HTTP server: two ranks score
every validation and held-out meme once, a resumed run continues the uninterrupted one exactly, predict.py
reads the same URL, and a fold run on a remote dataset without stored folds says how to prepare them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.artifacts.test_export_predict import _cli, _scores
from tests.conftest import TrainRun
from tests.fixtures.shard_server import serve
from tests.training.test_zero3 import _val_history

pytestmark = pytest.mark.slow

COMMON = ("data=shards", "fold=0", "num_folds=3", "print_table=false", "data.num_workers=0", "data.remote_backoff=0.05")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A synthetic dataset prepared with `folds=3` (folds and inner splits in its manifest), then served."""
    from crossmod.recipes.prepare import compose_data, prepare

    root = tmp_path_factory.mktemp("remote_ds")
    overrides = ["data.source.num_groups=40", "data.samples_per_shard=64", f"data.shard_root={root}"]
    directory, manifest = prepare(compose_data("synthetic", overrides), str(root), folds=3)
    bare, _ = prepare(compose_data("synthetic", ["data.source.num_groups=30", f"data.shard_root={root}"]), str(root))  # no folds
    with serve(root) as (base, faults):
        yield {"url": f"{base}/{directory.name}", "bare": f"{base}/{bare.name}", "dir": directory, "manifest": manifest, "faults": faults}


def _ids(path: Path) -> list[str]:
    return [row["id"] for row in csv.DictReader(open(path))]


def test_two_ranks_score_every_meme_once_from_the_server(served, data_dir, tmp_path):
    run = TrainRun(data_dir, tmp_path / "runs")
    cache = tmp_path / "cache"
    val = next(s for s in served["manifest"]["shards"] if s["split"] == "val")
    served["faults"].drop_after[val["name"]] = (val["bytes"] // 2, 1)  # the first download is cut halfway
    result = run(
        *COMMON,
        f"data.shard_dir={served['url']}",
        f"data.cache_dir={cache}",
        "trainer=ddp_cpu",
        "trainer.max_epochs=1",
        env={"CROSSMOD_RUN_ID": "ddp"},
    )
    console = result.stdout + result.stderr
    assert f"{val['name']}: " in console and "retrying from byte" in console  # the retry is reported, then the run goes on
    run_dir = run.log_dir / "shards_concat" / "runs" / "ddp"  # named after data=shards and the default model
    (folds,) = [entry for entry in served["manifest"]["folds"] if entry["num_folds"] == 3]
    heads = len(served["manifest"]["heads"])
    tested, validated = _ids(run_dir / "predictions" / "test.csv"), _ids(run_dir / "predictions" / "val.csv")
    assert len(set(tested)) == folds["samples_per_fold"][0] and len(tested) == len(set(tested)) * heads
    assert len(set(validated)) == served["manifest"]["counts"]["split"]["val"] and len(validated) == len(set(validated)) * heads
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["selection"]["rule"] == "val_split"  # the synthetic memes have their own validation split
    # the cache holds a verified copy of every shard read, byte for byte the served file
    copies = sorted((cache / f"synthetic-{served['manifest']['fingerprint']}").glob("*.tar"))
    assert copies and all(c.read_bytes() == (served["dir"] / c.name).read_bytes() for c in copies)


def test_resume_from_a_url_continues_the_uninterrupted_run(served, data_dir, tmp_path):
    run = TrainRun(data_dir, tmp_path / "runs")
    # a constant learning rate: the default schedule's length depends on max_epochs, so runs of 1 and 2 epochs differ
    source = (*COMMON, f"data.shard_dir={served['url']}", "test=false", "model.scheduler=null")
    run(*source, "trainer.max_epochs=2", env={"CROSSMOD_RUN_ID": "whole"})
    run(*source, "trainer.max_epochs=1", "keep_resume_checkpoints=true", env={"CROSSMOD_RUN_ID": "first"})
    runs = run.log_dir / "shards_concat" / "runs"
    run(*source, "trainer.max_epochs=2", f"ckpt_path={runs / 'first' / 'checkpoints' / 'last.ckpt'}", env={"CROSSMOD_RUN_ID": "resumed"})
    assert _val_history(runs / "resumed")[1] == pytest.approx(_val_history(runs / "whole")[1], abs=1e-6)


def test_predict_reads_the_url_and_gives_the_runs_scores(served, data_dir, tmp_path):
    run = TrainRun(data_dir, tmp_path / "runs")
    run(*COMMON, f"data.shard_dir={served['url']}", "trainer.max_epochs=1", env={"CROSSMOD_RUN_ID": "p"})
    run_dir = run.log_dir / "shards_concat" / "runs" / "p"
    _cli("export.py", f"run={run_dir}", "culture=MX", f"out={tmp_path / 'export'}")
    _cli("predict.py", f"adapters={tmp_path / 'export' / 'MX'}", f"inputs={served['url']}", f"out={tmp_path / 'mx.csv'}")
    predicted = _scores(tmp_path / "mx.csv", "MX", "MX_probability")
    assert len(predicted) == served["manifest"]["samples_written"]
    tested = _scores(run_dir / "predictions" / "test.csv", "MX")
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())


def test_a_fold_run_on_a_remote_dataset_without_folds_says_how_to_prepare(served, data_dir, tmp_path):
    result = TrainRun(data_dir, tmp_path / "runs")(*COMMON, f"data.shard_dir={served['bare']}", check=False)
    assert result.returncode != 0
    assert (
        "no fold assignment for num_folds=3, seed=0 over split(s) ['train']" in result.stderr
        and "It has no fold assignments" in result.stderr
    )
    assert "`crossmod prepare data=synthetic folds=3`" in result.stderr  # generated: no raw folder to name


def test_a_fold_run_of_a_served_one_split_dataset_needs_no_split_keys(data_dir, tmp_path):
    """`crossmod prepare data=mhc … folds=3`, served over HTTP, then `train.py data=shards … fold=0 num_folds=3 model=text`: the
    manifest says its folds divide split `all`, so the run tests fold 0 and selects on its stored inner split."""
    from tests.data.test_remote_shards import _prepare_mhc

    _, directory = _prepare_mhc(tmp_path / "mhc", folds=3)
    run = TrainRun(data_dir, tmp_path / "runs")
    with serve(directory.parent) as (base, _):
        run(*COMMON, f"data.shard_dir={base}/{directory.name}", "model=text", "debug=limit", env={"CROSSMOD_RUN_ID": "mhc"})
    run_dir = run.log_dir / "shards_text" / "runs" / "mhc"
    (entry,) = json.loads((directory / "manifest.json").read_text())["folds"]
    assert json.loads((run_dir / "metrics.json").read_text())["selection"]["rule"] == "inner"
    assert len(set(_ids(run_dir / "predictions" / "test.csv"))) == entry["samples_per_fold"][0]


def test_prepare_with_folds_stores_each_folds_inner_split_for_evaluation_only_data(tmp_path):
    """Multi3Hate has no splits: a fold run selects on an inner split of its training folds, which a read-only
    remote copy cannot add later, so `crossmod prepare … folds=k` stores all k of them."""
    from crossmod.recipes.prepare import compose_data, prepare
    from tests.data.sources import layouts

    raw = layouts.multi3hate(tmp_path / "raw" / "data")
    _, manifest = prepare(
        compose_data("multi3hate", [f"data.raw_dir={raw}", f"data.shard_root={tmp_path}"]), str(tmp_path / "out"), folds=3
    )
    (entry,) = manifest["folds"]
    assert sorted(i["fold"] for i in entry["inner"]) == [0, 1, 2]
    for inner in entry["inner"]:
        assert not {entry["assignment"][g] for g in inner["groups"]} & {inner["fold"]}  # chosen without the held-out fold

"""The benchmarks run (tiny sizes, `--smoke`) and write complete results; the README's benchmark table is
the rendering of the committed results in `bench/results/`, not typed numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.bench_table import ON_ITS_OWN, ORDER, README, RESULTS, load_results, readme_block, render
from tests.conftest import ROOT, scaled
from tests.zygote import run_python

SCRIPTS = ORDER  # every script make bench runs
TIMEOUT = 420


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """Every script with --smoke, one after the other (each is mostly startup: forked, tests/zygote.py), results in a
    temp dir."""
    out = tmp_path_factory.mktemp("bench")
    env = {**os.environ, "WANDB_MODE": "disabled"}
    runs = {"checkout's vision cache before": vision_cache_files()}
    for name in SCRIPTS:
        command = [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--smoke", "--out", str(out / f"{name}.json")]
        done = run_python(command, cwd=ROOT, env=env, timeout=scaled(TIMEOUT))
        runs[name] = (subprocess.CompletedProcess(command, done.returncode, done.stdout + done.stderr, ""), out / f"{name}.json")
    runs["checkout's vision cache after"] = vision_cache_files()
    return runs


def vision_cache_files() -> dict[str, int]:
    """Every file of the checkout's vision cache (where `paths.data_dir` points benchmarks' models), with its mtime."""
    root = ROOT / "data" / "vision_cache"
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def test_benchmarks_keep_their_vision_features_to_themselves(smoke_runs):
    """A benchmark's model caches image features in a folder of the run's own, or not at all: the checkout's cache is
    neither read (a warm cache would time other work than the run's first) nor written."""
    assert smoke_runs["checkout's vision cache after"] == smoke_runs["checkout's vision cache before"]


def check_result(result: dict, name: str) -> None:
    assert result["benchmark"] == name
    machine = result["machine"]
    assert {"platform", "cpu_count", "kind"} <= set(machine)
    assert {"torch", "lightning", "transformers", "webdataset"} <= set(result["versions"])
    assert result["load_average_start"] is not None and result["load_average_end"] is not None
    assert result["parameters"] and result["repetitions"] >= 1
    assert result["variants"] and result["ratios"] and result["rows"]
    for variant in result["variants"].values():
        assert variant["min"] <= variant["median"] <= variant["max"]
        # one value per round, or per language / culture where the variant says what its values range over
        assert len(variant["values"]) == result["repetitions"] or variant.get("over")
    for row in result["rows"]:
        assert row["variant"] in result["variants"] and row["ratio"] in result["ratios"]
        assert row["baseline"] is None or row["baseline"] in result["variants"]
        assert row["target"] is None or row["target"] in {t["name"] for t in result["targets"]}
    for target in result["targets"]:
        assert target["met"] == (
            target["measured"] <= target["threshold"] if target["op"] == "<=" else target["measured"] >= target["threshold"]
        )
    assert result["met"] == (all(t["met"] for t in result["targets"]) if result["targets"] else None)


@pytest.mark.parametrize("name", SCRIPTS)
def test_smoke_run_writes_a_complete_result(name, smoke_runs):
    run, path = smoke_runs[name]
    assert run.returncode == 0, run.stdout[-6000:]
    result = json.loads(path.read_text())
    assert result["smoke"] is True
    check_result(result, name)


def test_committed_results_cover_every_benchmark():
    results = load_results()
    assert [r["benchmark"] for r in results] == [*SCRIPTS, *ON_ITS_OWN], f"bench/results/ holds {[r['benchmark'] for r in results]}"
    for result in results:
        assert not result["smoke"]
        check_result(result, result["benchmark"])


def test_readme_table_is_rendered_from_the_committed_results():
    assert readme_block(README.read_text()) == render(load_results()).strip(), "run python scripts/bench_table.py"
    assert not any(p.name.startswith("smoke") for p in RESULTS.glob("*.json"))


def test_the_file_loader_baseline_makes_the_same_model_inputs_as_crossmod_without_draft(tmp_path):
    """The conventional baseline differs from crossmod's pipeline in how it works, not in what it delivers."""
    import torch

    from crossmod.data.synthetic import SyntheticMemeSource, caption_corpus
    from crossmod.models.preprocess import MemePreprocessor
    from crossmod.models.tiny.bert import build_tiny_bert

    sys.path.insert(0, str(ROOT / "bench"))
    from file_memes import ConventionalPreprocessing

    heads = {c: {"kind": "binary"} for c in ("US", "DE", "MX", "IN", "CN")}
    tokenizer = build_tiny_bert(tmp_path / "bert", caption_corpus())
    exact = MemePreprocessor(heads, tokenizer=str(tokenizer), image_model="test_efficientnet.r160_in1k", image_size=64, draft_decode=False)
    baseline = ConventionalPreprocessing(exact)
    samples = []
    for sample in SyntheticMemeSource(num_groups=2, image_size=128):
        samples.append({"id": sample.id, "text": sample.text, "image": sample.image, "labels": sample.labels})
    ours = exact.collate([exact(s) for s in samples])
    theirs = baseline.collate([baseline(s) for s in samples])
    assert ours["ids"] == theirs["ids"] and set(ours) == set(theirs)
    for key in ("input_ids", "attention_mask", "pixel_values"):
        assert torch.equal(ours[key], theirs[key]), key
    assert all(torch.equal(ours["labels"][h], theirs["labels"][h]) for h in heads)

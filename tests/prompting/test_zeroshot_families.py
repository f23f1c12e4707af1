"""`python zeroshot.py experiment=qwen_zeroshot model.name_or_path=…` once per VLM family on a Multi3Hate-layout
fixture, then `crossmod zeroshot-report` puts the runs side by side (the study's Tables 4/10 shape).
Random models: the numbers mean nothing; the protocol, the statistics and the table's shape do."""

from __future__ import annotations

import json
import math
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import rankdata

from crossmod.reports.zeroshot import comparison
from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import ROOT, TrainRun, scaled
from tests.data.sources import layouts
from tests.zygote import run_python

pytestmark = pytest.mark.slow

KINDS = ("qwen2_vl", "llava_onevision", "smolvlm")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    return layouts.multi3hate(tmp_path_factory.mktemp("m3h_families") / "data")


@pytest.fixture(scope="module")
def zeroshot_runs(tmp_path_factory, data_dir, raw) -> dict[str, Path]:
    train_run = TrainRun(data_dir, tmp_path_factory.mktemp("zeroshot_families") / "runs")
    runs = {}
    for kind in KINDS:
        folder = tiny_vlm(str(data_dir / "assets" / f"tiny-{kind}-synthetic"), kind)
        train_run(
            "experiment=qwen_zeroshot",
            f"data.raw_dir={raw}",
            f"model.name_or_path={folder}",
            "model.preprocessor.image_size=56",
            "zeroshot.max_new_tokens=3",
            script="zeroshot.py",
            env={"CROSSMOD_RUN_ID": kind},
        )
        runs[kind] = train_run.log_dir / "qwen_zeroshot" / "runs" / kind
    return runs


def test_each_family_answers_every_meme_for_every_prompt(zeroshot_runs):
    for kind, run in zeroshot_runs.items():
        summary = json.loads((run / "zeroshot" / "summary.json").read_text())
        assert summary["answers"] == 6 * summary["memes"] and summary["prompts"] == list(range(6))
        assert summary["model_type"] == kind
        assert summary["family"] == {"qwen2_vl": "qwen2_vl", "llava_onevision": "llava_onevision", "smolvlm": "idefics3"}[kind]


def test_the_report_puts_the_families_side_by_side_with_each_runs_statistics(zeroshot_runs, tmp_path):
    out = tmp_path / "comparison.md"
    command = [sys.executable, "-m", "crossmod", "zeroshot-report", f"runs=[{','.join(map(str, zeroshot_runs.values()))}]", f"out={out}"]
    printed = run_python(command, cwd=ROOT, capture_output=True, text=True, timeout=scaled(300))
    assert printed.returncode == 0, printed.stderr[-3000:]
    table = comparison(list(zeroshot_runs.values()))
    assert out.read_text() == table == printed.stdout
    assert table.splitlines()[0] == "| model | memes | US | DE | MX | IN | CN | invalid |"
    lines = [line for line in table.splitlines()[2:] if line.startswith("| ")]
    for run in zeroshot_runs.values():
        summary = json.loads((run / "zeroshot" / "summary.json").read_text())
        label = f"| {summary['model_type']} ({Path(summary['model']).name}) |"
        (start,) = [i for i, line in enumerate(lines) if line.startswith(label)]  # the label opens the model's rows
        rows = lines[start : start + len(summary["accuracy"])]
        for row, (lang, cells) in zip(rows, summary["accuracy"].items()):
            fields = [f.strip() for f in row.strip("|").split("|")]
            assert fields[1] == lang
            for culture, text in zip(("US", "DE", "MX", "IN", "CN"), fields[2:7]):
                cell = cells[culture]
                per_prompt = np.array(cell["per_prompt"], dtype=float)
                # mean ± sample std over the 6 prompts, as numpy computes them
                assert cell["mean"] == pytest.approx(per_prompt.mean()) and cell["std"] == pytest.approx(per_prompt.std(ddof=1))
                expected = f"{100 * cell['mean']:.1f} ± {100 * cell['std']:.1f}" + (cells["marker"] if culture == cells["best"] else "")
                assert text == expected
            # the marker: the best culture's accuracies against the lowest's, the exact one-sided rank-sum test
            # (every split of the 12 pooled accuracies, midranks for ties, counted here one by one)
            cultures = ("US", "DE", "MX", "IN", "CN")  # ties in the mean: the later culture ranks lower
            lowest = sorted(cultures, key=lambda c: (-cells[c]["mean"], cultures.index(c)))[-1]
            best, other = (np.array(cells[c]["per_prompt"], dtype=float) for c in (cells["best"], lowest))
            best, other = best[np.isfinite(best)], other[np.isfinite(other)]
            ranks = rankdata(np.concatenate([best, other]))
            sums = [ranks[list(c)].sum() for c in combinations(range(len(ranks)), len(best))]
            p = np.mean(np.array(sums) >= ranks[: len(best)].sum())
            assert summary["markers"]["p"][lang]["vs_lowest"] == pytest.approx(p)
            assert (cells["marker"] != "") == (math.isfinite(p) and p < 0.05)
        assert summary["markers"]["test"] == "exact one-sided Wilcoxon rank-sum (permutation over all splits)"
        assert summary["markers"]["note"] is None  # 6 prompts: a marker is within reach
    assert "(exact one-sided Wilcoxon rank-sum (permutation over all splits) over the prompts, per row" in table


def test_two_processes_answer_exactly_what_one_does(zeroshot_runs, raw, data_dir, tmp_path):
    """`trainer=ddp_cpu` (2 processes, gloo): every meme answered once per prompt, rows in the single-process order,
    the same answers and P(hate)."""
    import csv

    one = zeroshot_runs["qwen2_vl"]
    train_run = TrainRun(data_dir, tmp_path / "runs")
    result = train_run(
        "experiment=qwen_zeroshot",
        f"data.raw_dir={raw}",
        f"model.name_or_path={tiny_vlm(str(data_dir / 'assets' / 'tiny-qwen2_vl-synthetic'), 'qwen2_vl')}",
        "model.preprocessor.image_size=56",
        "zeroshot.max_new_tokens=3",
        "trainer=ddp_cpu",
        script="zeroshot.py",
        env={"CROSSMOD_RUN_ID": "two"},
    )
    assert "MEMBER: 2/2" in result.stdout + result.stderr
    rows = {
        name: list(csv.DictReader(open(run / "zeroshot" / "answers.csv")))
        for name, run in (("one", one), ("two", tmp_path / "runs" / "qwen_zeroshot" / "runs" / "two"))
    }
    assert [(r["id"], r["prompt"]) for r in rows["one"]] == [(r["id"], r["prompt"]) for r in rows["two"]]
    for a, b in zip(rows["one"], rows["two"]):
        assert (a["generation"], a["prediction"]) == (b["generation"], b["prediction"])
        assert float(a["p_hate"]) == pytest.approx(float(b["p_hate"]), abs=1e-5)

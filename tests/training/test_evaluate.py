"""evaluate.py: reports for runs and folders of runs, dataset-specific sections, and the task metrics."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from evaluation.task_metrics import performance_score, subset_rule_accuracy, toxictags_stages
from tests.conftest import ROOT, SMALL_DATA
from tests.datamodules.sources import layouts


def _evaluate(*args: str) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


def test_folder_of_fold_runs_gets_alignment_with_markers(train_run, tmp_path):
    train_run("-m", "fold=0,1,2", "num_folds=3", "debug=limit", *SMALL_DATA, env={"CROSSMOD_RUN_ID": "cv"})
    sweep = train_run.log_dir / "synthetic_concat" / "multiruns" / "cv"
    _evaluate(f"ckpt={sweep}", f"paths.data_dir={train_run.data_dir}", *SMALL_DATA, f"out={tmp_path / 'report'}")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert len(report["runs"]) == 3 and report["alignment"]["runs"] == 3
    assert set(report["alignment"]["markers"]) == {"US", "DE", "MX", "IN", "CN"}
    assert set(report["alignment"]["mean"]["US"]) == {"US", "DE", "MX", "IN", "CN"}
    for entry in report["runs"].values():
        assert set(entry["metrics"]) == {"US", "DE", "MX", "IN", "CN"}
    for name in ("summary.md", "alignment.png", "roc.png"):
        assert (tmp_path / "report" / name).is_file()


def test_mhc_data_gets_the_functional_report(train_run, tmp_path):
    raw = layouts.mhc(tmp_path / "mhc")
    train_run("data=mhc", f"data.raw_dir={raw}", "model=text", "fold=0", "num_folds=2", "debug=limit", env={"CROSSMOD_RUN_ID": "mhc"})
    run = train_run.log_dir / "synthetic_concat" / "runs" / "mhc"
    _evaluate(
        f"ckpt={run}", "data=mhc", f"data.raw_dir={raw}", f"paths.data_dir={train_run.data_dir}", "split=all", f"out={tmp_path / 'r'}"
    )
    entry = next(iter(json.loads((tmp_path / "r" / "report.json").read_text())["runs"].values()))
    assert len(entry["mhc"]["languages"]) >= 2 and entry["mhc"]["functionalities"]
    assert entry["mhc"]["cases"] == json.loads((run / "manifest.json").read_text())["samples_written"]
    assert "## Multilingual HateCheck" in (tmp_path / "r" / "summary.md").read_text()


def test_toxictags_stages_subset_rule_and_performance_score():
    stages = toxictags_stages(
        np.array([1, 1, 0, 0]),
        np.array([0.9, 0.2, 0.1, 0.6]),
        np.array([0, 2, -1, -1]),
        np.array([[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [1, 0, 0], [1, 0, 0]]),
    )
    assert (
        stages["stage1_macro_f1"] == pytest.approx(0.5) and stages["stage2_macro_f1"] == pytest.approx(1.0) and stages["stage2_items"] == 2
    )
    gold = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    predicted = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    assert subset_rule_accuracy(gold, predicted) == pytest.approx(2 / 3)  # ⊆: rows 1 and 3 correct
    partial = performance_score(acc_sent=0.5, acc_emo=0.25)
    assert partial["ps"] is None and partial["ps_classifier_terms"] == pytest.approx(0.6316 * 0.5 + 1.7368 * 0.25)
    full = performance_score(0.5, 0.25, acc_mcq=1.0, sim_orig=0.3, sim_fmt=0.2)
    assert full["ps"] == pytest.approx(0.3 + 0.2 + 0.6316 + 0.6316 * 0.5 + 1.7368 * 0.25)


def test_functional_tests_callback_logs_per_functionality_accuracy(train_run, tmp_path):
    import csv

    raw = layouts.mhc(tmp_path / "mhc")
    train_run("data=mhc", f"data.raw_dir={raw}", "model=text", "fold=0", "num_folds=2", "debug=limit", env={"CROSSMOD_RUN_ID": "fn"})
    run = train_run.log_dir / "synthetic_concat" / "runs" / "fn"
    rows = [r for r in csv.DictReader(open(run / "csv" / "metrics.csv")) if r.get("val/mean/auroc")]
    header = rows[0].keys()
    functionality = [k for k in header if k.startswith("val/mhc/acc/")]
    languages = [k for k in header if k.startswith("val/mhc/macro_f1/")]
    assert functionality and len(languages) >= 2
    assert sum(1 for r in rows if r[functionality[0]] != "") == 2  # both validations of fit (not the final scoring)
    assert (run / "predictions" / "val.csv").is_file()  # the prediction files are unaffected

"""A 3-fold cross-validation of the default synthetic experiment, tied together by the report."""

from __future__ import annotations

import csv
import json
from collections import defaultdict

import pytest
from sklearn.metrics import roc_auc_score

from tests.conftest import SMALL_DATA
from training.cv_report import report


def _fold_auroc_from_predictions(run_dir) -> dict[str, float]:
    probs, labels = defaultdict(list), defaultdict(list)
    for row in csv.DictReader(open(run_dir / "predictions" / "val.csv")):
        probs[row["head"]].append(float(row["probability"]))
        labels[row["head"]].append(int(row["label"]))
    return {head: roc_auc_score(labels[head], probs[head]) for head in probs}


def test_three_fold_cross_validation_and_report(train_run, tmp_path):
    train_run("-m", "fold=0,1,2", "num_folds=3", "trainer.max_epochs=1", *SMALL_DATA, env={"CROSSMOD_RUN_ID": "cv"})
    sweep = train_run.log_dir / "synthetic_concat" / "multiruns" / "cv"
    fold_dirs = sorted(p.parent for p in sweep.rglob("metrics.json"))
    assert len(fold_dirs) == 3
    for run_dir in fold_dirs:
        assert (run_dir / "predictions" / "val.csv").is_file() and (run_dir / "config.yaml").is_file()

    result = report(sweep, tmp_path / "report")["synthetic_concat"]
    assert result["problems"] == []
    recomputed = [_fold_auroc_from_predictions(d) for d in fold_dirs]
    for head in ("US", "DE", "MX", "IN", "CN"):
        expected = sum(r[head] for r in recomputed) / 3
        assert result["metrics"][f"cv/{head}/auroc_mean"] == pytest.approx(expected, abs=1e-4)
    val_ids = [{row["id"] for row in csv.DictReader(open(d / "predictions" / "val.csv"))} for d in fold_dirs]
    assert not (val_ids[0] & val_ids[1] or val_ids[0] & val_ids[2] or val_ids[1] & val_ids[2])
    manifest = json.loads((fold_dirs[0] / "manifest.json").read_text())
    assert sum(map(len, val_ids)) == manifest["counts"]["split"]["train"] + manifest["counts"]["split"]["val"]
    assert result["oof_samples"] == sum(map(len, val_ids))
    out = tmp_path / "report" / "synthetic_concat"
    for name in ("cv_report.md", "cv_summary.json", "roc_oof.png", "alignment.png"):
        assert (out / name).is_file()
    assert set(result["alignment"]) == {"US", "DE", "MX", "IN", "CN"}


def test_missing_and_duplicated_folds_are_reported_not_averaged(tmp_path):
    def fake_run(name, fold, auroc):
        run_dir = tmp_path / name
        (run_dir / "predictions").mkdir(parents=True)
        scores = {"US": {"auroc": auroc, "acc": 0.5, "f1": 0.5}, "mean": {"auroc": auroc, "acc": 0.5, "f1": 0.5}}
        (run_dir / "metrics.json").write_text(json.dumps({"experiment": "x", "fold": fold, "num_folds": 3, "best": {"val": scores}}))
        rows = [(f"x/{fold}/{i}", "US", 0.1 * i, i % 2) for i in range(6)]
        with open(run_dir / "predictions" / "val.csv", "w", newline="") as handle:
            csv.writer(handle).writerows([("id", "head", "probability", "label"), *rows])

    fake_run("a", 0, 0.8)
    fake_run("b", 0, 0.9)
    fake_run("c", 1, 0.6)
    result = report(tmp_path, tmp_path / "out")["x"]
    assert any("missing folds [2]" in p for p in result["problems"])
    assert any("fold 0 appears 2 times" in p for p in result["problems"])
    assert result["metrics"]["cv/US/auroc_mean"] == pytest.approx(0.6)  # only the clean fold

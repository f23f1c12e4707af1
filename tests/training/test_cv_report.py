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
    train_run("-m", "fold=0,1,2", "num_folds=3", "trainer.max_epochs=2", *SMALL_DATA, env={"CROSSMOD_RUN_ID": "cv"})
    sweep = train_run.log_dir / "synthetic_concat" / "multiruns" / "cv"
    fold_dirs = sorted(p.parent for p in sweep.rglob("fold_result.json"))
    assert len(fold_dirs) == 3
    for fold, run_dir in enumerate(fold_dirs):
        assert (run_dir / "predictions" / "val.csv").is_file() and (run_dir / "config.yaml").is_file()
        fold_result = json.loads((run_dir / "fold_result.json").read_text())
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert fold_result["fold"] == fold and fold_result["num_folds"] == 3
        # one history entry per validation of fit, each with every head's AUROC, acc and F1 and the mean
        assert [e["epoch"] for e in fold_result["history"]] == [0, 1]
        for entry in fold_result["history"]:
            assert set(entry["metrics"]) >= {"US", "DE", "MX", "IN", "CN", "mean"}
            assert all(set(entry["metrics"][h]) >= {"auroc", "acc", "f1"} for h in ("US", "CN", "mean"))
        best_epoch = max(fold_result["history"], key=lambda e: e["metrics"]["mean"]["auroc"])["epoch"]
        assert fold_result["best_epoch"] == best_epoch and metrics["best_checkpoint"].endswith(f"epoch{best_epoch:03d}.ckpt")
        # the fold file scores the best checkpoint, like metrics.json, and holds its out-of-fold predictions
        assert fold_result["best"]["mean"]["auroc"] == pytest.approx(metrics["best"]["val"]["mean"]["auroc"])
        assert fold_result["best"]["US"]["auroc"] == pytest.approx(_fold_auroc_from_predictions(run_dir)["US"], abs=1e-4)
        assert len(fold_result["oof_predictions"]["id"]) == sum(1 for _ in open(run_dir / "predictions" / "val.csv")) - 1

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
        run_dir.mkdir(parents=True)
        scores = {"US": {"auroc": auroc, "acc": 0.5, "f1": 0.5}, "mean": {"auroc": auroc, "acc": 0.5, "f1": 0.5}}
        ids = [f"x/{fold}/{i}" for i in range(6)]
        oof = {"id": ids, "head": ["US"] * 6, "probability": [0.1 * i for i in range(6)], "label": [i % 2 for i in range(6)]}
        fold_result = {"experiment": "x", "fold": fold, "num_folds": 3, "best": scores, "oof_predictions": oof}
        (run_dir / "fold_result.json").write_text(json.dumps(fold_result))

    fake_run("a", 0, 0.8)
    fake_run("b", 0, 0.9)
    fake_run("c", 1, 0.6)
    result = report(tmp_path, tmp_path / "out")["x"]
    assert any("missing folds [2]" in p for p in result["problems"])
    assert any("fold 0 appears 2 times" in p for p in result["problems"])
    assert result["metrics"]["cv/US/auroc_mean"] == pytest.approx(0.6)  # only the clean fold

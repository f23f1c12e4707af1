"""A 3-fold cross-validation of the default synthetic experiment, tied together by the report."""

from __future__ import annotations

import csv
import json
from collections import defaultdict

import pytest
from sklearn.metrics import roc_auc_score

from crossmod.data.shards import fingerprint, read_samples
from crossmod.inference.scoring import score, single_device_trainer
from crossmod.models.module import MemeClassifier
from crossmod.reports.cv import report
from tests.conftest import SMALL_DATA

HEADS = ("US", "DE", "MX", "IN", "CN")
# every epoch's weights kept, so the test can score what selecting on the held-out fold would have reported
EVERY_EPOCH = (
    "+callbacks.every_epoch={_target_: lightning.pytorch.callbacks.ModelCheckpoint, dirpath: '${paths.output_dir}/every_epoch', "
    "filename: 'e{epoch}', auto_insert_metric_name: false, monitor: null, mode: max, save_top_k: -1}"
)


def _aurocs(probs: dict[str, dict[str, float]], labels: dict[str, dict[str, int]]) -> dict[str, float]:
    scores = {}
    for head in HEADS:
        ids = sorted(labels[head])
        scores[head] = roc_auc_score([labels[head][i] for i in ids], [probs[head][i] for i in ids])
    scores["mean"] = sum(scores[h] for h in HEADS) / len(HEADS)
    return scores


def _fold_auroc_from_predictions(run_dir) -> dict[str, float]:
    probs, labels = defaultdict(dict), defaultdict(dict)
    for row in csv.DictReader(open(run_dir / "predictions" / "test.csv")):
        probs[row["head"]][row["id"]] = float(row["probability"])
        labels[row["head"]][row["id"]] = int(row["label"])
    return _aurocs(probs, labels)


def _held_out_auroc_of(checkpoint, records) -> float:
    model = MemeClassifier.load_from_checkpoint(checkpoint, map_location="cpu").eval()
    rows = score(single_device_trainer(), model, records, batch_size=64, threshold=0.5)
    probs = {h: {r["id"]: row[f"{h}_probability"] for r, row in zip(records, rows)} for h in HEADS}
    labels = {h: {r["id"]: r["labels"][h] for r in records} for h in HEADS}
    return _aurocs(probs, labels)["mean"]


def test_three_fold_cross_validation_scores_each_held_out_fold_once_with_weights_chosen_without_it(train_run, tmp_path):
    # no validation split: the inner rule carves one from the training folds of each fold run
    train_run(
        "-m", "fold=0,1,2", "num_folds=3", "trainer.max_epochs=4", "+data.val_splits=[]", EVERY_EPOCH, *SMALL_DATA,
        env={"CROSSMOD_RUN_ID": "cv"},
    )  # fmt: skip
    sweep = train_run.log_dir / "synthetic_concat" / "multiruns" / "cv"
    fold_dirs = sorted(p.parent for p in sweep.rglob("fold_result.json"))
    assert len(fold_dirs) == 3
    manifest = json.loads((fold_dirs[0] / "manifest.json").read_text())
    entry = next(e for e in manifest["folds"] if e["num_folds"] == 3)
    records = read_samples(train_run.data_dir / "shards" / f"{manifest['dataset']}-{fingerprint(manifest['params'])}", ["train"])
    honest, held_out_selected, test_ids, at_threshold = [], [], [], []
    for fold, run_dir in enumerate(fold_dirs):
        fold_result = json.loads((run_dir / "fold_result.json").read_text())
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert fold_result["fold"] == fold and fold_result["num_folds"] == 3
        assert fold_result["selection"]["rule"] == metrics["selection"]["rule"] == "inner"
        # the history is the inner validation split's: one entry per epoch of fit, every head and the mean
        assert [e["epoch"] for e in fold_result["history"]] == [0, 1, 2, 3]
        assert all(set(e["metrics"]) >= {*HEADS, "mean"} for e in fold_result["history"])
        best_epoch = max(fold_result["history"], key=lambda e: e["metrics"]["mean"]["auroc"])["epoch"]
        assert fold_result["selected_epoch"] == best_epoch and metrics["best_checkpoint"].endswith(f"epoch{best_epoch:03d}.ckpt")
        # the held-out fold: exactly the memes the manifest assigns to fold k, scored once, as `test`
        held_out = [r for r in records if entry["assignment"][r["group"]] == fold]
        ids = {row["id"] for row in csv.DictReader(open(run_dir / "predictions" / "test.csv"))}
        assert ids == {r["id"] for r in held_out}
        assert set(fold_result["held_out_labels"]) == ids
        test_ids.append(ids)
        recomputed = _fold_auroc_from_predictions(run_dir)
        for head in (*HEADS, "mean"):
            assert fold_result["held_out"][head]["auroc"] == pytest.approx(recomputed[head], abs=1e-4)
            assert metrics["best"]["test"][head]["auroc"] == pytest.approx(recomputed[head], abs=1e-4)
        assert metrics["best"]["val"]["mean"]["auroc"] == pytest.approx(fold_result["selection_scores"]["mean"]["auroc"])
        # what choosing the epoch on the held-out fold itself would have reported
        per_epoch = [_held_out_auroc_of(run_dir / "every_epoch" / f"e{k}.ckpt", held_out) for k in range(4)]
        assert per_epoch[best_epoch] == pytest.approx(recomputed["mean"], abs=1e-4)
        honest.append(recomputed["mean"])
        held_out_selected.append(max(per_epoch))
        # macro-F1 at the selection split's threshold: the fold file and metrics.json agree
        assert fold_result["selection_threshold"] == metrics["selection_threshold"]
        at_threshold.append(fold_result["selection_threshold"]["mean"]["macro_f1_at_val_threshold"])
    assert not (test_ids[0] & test_ids[1] or test_ids[0] & test_ids[2] or test_ids[1] & test_ids[2])
    assert sum(map(len, test_ids)) == manifest["counts"]["split"]["train"]

    result = report(sweep, tmp_path / "report")["synthetic_concat"]
    assert result["problems"] == [] and result["selection"]["rule"] == "inner"
    assert result["metrics"]["cv/mean/auroc_mean"] == pytest.approx(sum(honest) / 3, abs=1e-4)
    # the constructed case: selecting on the held-out fold would have printed a higher number than the honest rule
    assert sum(held_out_selected) / 3 > sum(honest) / 3 + 1e-3
    assert result["oof_samples"] == sum(map(len, test_ids))
    out = tmp_path / "report" / "synthetic_concat"
    for name in ("cv_report.md", "cv_summary.json", "roc_oof.png", "alignment.png"):
        assert (out / name).is_file()
    text = (out / "cv_report.md").read_text()
    assert "Selection rule: **inner**" in text and f"{sum(honest) / 3:.3f}" in text
    assert set(result["alignment"]) == set(HEADS)
    assert result["metrics"]["cv/mean/macro_f1_at_val_threshold_mean"] == pytest.approx(sum(at_threshold) / 3)
    assert "| head | AUROC | acc | majority | F1 | macro-F1 @ sel. thr. | pooled OOF AUROC |" in text
    assert "—" not in text.split("| head | AUROC")[1].split("\n\n")[0]  # every fold had a selection split


def test_fold_results_without_a_selection_rule_are_left_out(tmp_path):
    """Fold results written when the held-out fold also chose the checkpoint (no `selection`) are never averaged."""
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    oof = {"id": ["a", "b"], "head": ["US", "US"], "probability": [0.2, 0.8], "label": [0, 1]}
    (run_dir / "fold_result.json").write_text(
        json.dumps({"experiment": "x", "fold": 0, "num_folds": 1, "best": {"US": {"auroc": 1.0}}, "oof_predictions": oof})
    )
    result = report(tmp_path, tmp_path / "out")["x"]
    assert "metrics" not in result and "name no cross-validation selection rule" in result["problems"][0]


def test_missing_and_duplicated_folds_are_reported_not_averaged(tmp_path):
    def fake_run(name, fold, auroc):
        run_dir = tmp_path / name
        run_dir.mkdir(parents=True)
        scores = {"US": {"auroc": auroc, "acc": 0.5, "f1": 0.5}, "mean": {"auroc": auroc, "acc": 0.5, "f1": 0.5}}
        ids = [f"x/{fold}/{i}" for i in range(6)]
        oof = {"id": ids, "head": ["US"] * 6, "probability": [0.1 * i for i in range(6)], "label": [i % 2 for i in range(6)]}
        fold_result = {
            "experiment": "x", "fold": fold, "num_folds": 3, "selection": {"rule": "last"}, "held_out": scores, "oof_predictions": oof,
        }  # fmt: skip
        (run_dir / "fold_result.json").write_text(json.dumps(fold_result))

    fake_run("a", 0, 0.8)
    fake_run("b", 0, 0.9)
    fake_run("c", 1, 0.6)
    result = report(tmp_path, tmp_path / "out")["x"]
    assert any("missing folds [2]" in p for p in result["problems"])
    assert any("fold 0 appears 2 times" in p for p in result["problems"])
    assert result["metrics"]["cv/US/auroc_mean"] == pytest.approx(0.6)  # only the clean fold

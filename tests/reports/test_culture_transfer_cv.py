"""`cross_validate.py cv.per_culture=true`: one model per culture per fold, each judged by every culture's labels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, brier_score_loss, f1_score

from crossmod.evaluation.calibration import apply_calibrator
from crossmod.evaluation.culture_transfer import answers_by_fold
from crossmod.reports.transfer import read_zeroshot_answers
from tests.conftest import SMALL_DATA

DROPPED = ("~data.heads.MX", "~data.heads.IN", "~data.heads.CN")


def test_per_culture_cross_validation_writes_the_transfer_table(train_run, tmp_path):
    run_dir = tmp_path / "cv"
    result = train_run(
        "cv.per_culture=true", "num_folds=2", "trainer.max_epochs=1", "policy=cautious", *DROPPED, *SMALL_DATA,
        f"hydra.run.dir={run_dir}", script="cross_validate.py",
    )  # fmt: skip
    assert "culture transfer (Table 11)" in result.stdout
    table = json.loads((run_dir / "cv_report" / "culture_transfer.json").read_text())
    assert list(table["table"]) == ["FT-US", "FT-DE"] and table["diagonal"] == {"FT-US": "US", "FT-DE": "DE"}
    for culture in ("US", "DE"):
        fold_runs = sorted((run_dir / f"FT-{culture}").glob("fold*"))
        assert len(fold_runs) == 2
        per_fold = {c: [] for c in ("US", "DE", "MX", "IN", "CN")}
        f1_per_fold = {c: [] for c in per_fold}
        brier_after, review_recall = {c: [] for c in per_fold}, {c: [] for c in per_fold}
        for fold_run in fold_runs:
            fold_result = json.loads((fold_run / "fold_result.json").read_text())
            assert fold_result["experiment"] == f"synthetic_concat-FT-{culture}"
            rows = list(csv.DictReader(open(fold_run / "predictions" / "test.csv")))
            assert {r["head"] for r in rows} == {culture}  # one model, one culture's head
            probs = {r["id"]: float(r["probability"]) for r in rows}
            for judge in per_fold:  # every culture's labels of the held-out memes, not only the trained one's
                labelled = {i: v[judge] for i, v in fold_result["held_out_labels"].items() if v[judge] is not None}
                per_fold[judge].append(accuracy_score(list(labelled.values()), [int(probs[i] >= 0.5) for i in labelled]))
            # the threshold the fold chose on its selection split reaches the best macro-F1 any threshold gives there
            threshold = fold_result["selection_threshold"]["heads"][culture]["val_threshold"]
            val = list(csv.DictReader(open(fold_run / "predictions" / "val.csv")))
            y, p = np.array([int(r["label"]) for r in val]), np.array([float(r["probability"]) for r in val])
            best = max(f1_score(y, p >= t, average="macro") for t in [*np.unique(p), np.inf])
            assert f1_score(y, p >= threshold, average="macro") == pytest.approx(best)
            for judge in per_fold:  # and decides every culture's held-out memes at it
                labelled = {i: v[judge] for i, v in fold_result["held_out_labels"].items() if v[judge] is not None}
                decided = [int(probs[i] >= threshold) for i in labelled]
                f1_per_fold[judge].append(f1_score(list(labelled.values()), decided, average="macro", labels=[0, 1], zero_division=0))
                # the fold's own calibration map and policy threshold for its head, fitted on its selection split
                calibrated = apply_calibrator([probs[i] for i in labelled], fold_result["calibration"]["heads"][culture]["calibrator"])
                brier_after[judge].append(brier_score_loss(list(labelled.values()), calibrated))
                review = fold_result["policy"]["heads"][culture]["review"]
                assert fold_result["policy"]["name"] == "cautious" and review["threshold"] is not None  # recall is reachable
                positives = [i for i, v in labelled.items() if v == 1]
                if positives:
                    review_recall[judge].append(np.mean([probs[i] >= review["threshold"] for i in positives]))
        for judge, values in per_fold.items():
            cell = table["table"][f"FT-{culture}"][judge]
            assert cell["acc_mean"] == pytest.approx(np.mean(values)) and cell["acc_std"] == pytest.approx(np.std(values, ddof=1))
            assert cell["macro_f1_mean"] == pytest.approx(np.mean(f1_per_fold[judge]))
            assert cell["brier_after_mean"] == pytest.approx(np.mean(brier_after[judge]))
            if review_recall[judge]:
                assert cell["review_recall_mean"] == pytest.approx(np.mean(review_recall[judge]))
                assert cell["review_recall_n"] == len(review_recall[judge])
    summary = json.loads((run_dir / "cv_report" / "synthetic_concat-FT-US" / "cv_summary.json").read_text())
    assert set(summary["alignment"]["US"]) == {"US", "DE", "MX", "IN", "CN"}  # one head, judged by every culture
    assert summary["pooled_oof_auroc"]["US"] == summary["alignment"]["US"]["US"]
    assert summary["policy"]["name"] == "cautious" and summary["policy"]["folds"] == 2  # each fold's thresholds, averaged
    report = run_dir / "cv_report" / "synthetic_concat-FT-US"
    assert "Policy **cautious**" in (report / "cv_report.md").read_text() and "(reliability_oof.png)" in (report / "cv_report.md").read_text()
    assert (report / "reliability_oof.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the cultures' reliability, pooled
    markdown = (run_dir / "cv_report" / "culture_transfer.md").read_text()
    us_row = next(line for line in markdown.splitlines() if line.startswith("| FT-US |"))
    assert "<u>" in us_row.split("|")[2] and "<u>" not in us_row.split("|")[3]  # the row's own culture marked
    assert "| model | US | DE | MX | IN | CN |" in markdown
    assert "| *majority class* |" in markdown and "## Macro-F1 at the selection split's threshold" in markdown
    assert "## Calibration" in markdown and "## Policy (cautious): held-out precision / recall at its thresholds" in markdown
    assert table["policy"] == ["cautious"]
    assert "*" not in us_row  # † marks the best; `*` would claim a significance test
    assert (run_dir / "cv_report" / "culture_transfer.png").stat().st_size > 0


def test_zero_shot_answers_csv_is_read_per_prompt_and_split_by_the_same_held_out_folds(tmp_path: Path):
    path = tmp_path / "answers.csv"
    rows = [("m1/en", "0", "1", "0.8"), ("m2/en", "0", "", "0.4"), ("m3/en", "0", "0", "0.1"), ("m1/en", "1", "0", "0.3")]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("id", "lang", "prompt", "prediction", "p_hate", "generation"))
        writer.writerows((i, "en", prompt, prediction, p, "…") for i, prompt, prediction, p in rows)
    folds = answers_by_fold(read_zeroshot_answers(path), [{"m1/en", "m2/en"}, {"m3/en"}])
    assert len(folds) == 2 and len(folds[0]) == 2  # two prompts in each fold
    assert folds[0][0].decision == {"m1/en": 1, "m2/en": None} and folds[1][0].decision == {"m3/en": 0}
    assert folds[0][1].probability == {"m1/en": 0.3}

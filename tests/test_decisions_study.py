"""docs/decisions.md's tables are rendered from the measured docs/decisions.json (never typed); every row names the
`crossmod cv` that measured it; the script reads a cross-validation summary's own numbers; what the page claims holds."""

from __future__ import annotations

import json
import shlex

import pytest

from crossmod.evaluation.cv_summary import pool_out_of_fold, summarise
from scripts.decisions_study import END, OBJECTIVES, PAGE, RESULTS, START, render, row_of

RESULTS_DATA = json.loads(RESULTS.read_text())


def test_the_tables_are_rendered_from_the_measurements():
    block = PAGE.read_text().split(START, 1)[1].split(END, 1)[0].strip()
    assert block == render(RESULTS_DATA).strip()


def test_every_row_names_its_command_and_both_vote_objectives_ran_on_each_study():
    studies: dict[str, set[str]] = {}
    for row in RESULTS_DATA["rows"]:
        argv = shlex.split(row["command"])
        assert argv[:2] == ["crossmod", "cv"] and any(a.startswith("experiment=") for a in argv), row["command"]
        for objective in OBJECTIVES[1:]:
            assert (f"model/objective={objective}" in argv) == (row["objective"] == objective), row["command"]
        assert "policy=cautious" in argv
        assert row["folds"] == 3 and row["policy"]["name"] == "cautious"
        studies.setdefault(row["study"], set()).add(row["objective"])
    assert any(s.startswith("MHC") for s in studies) and any("fixture" in s for s in studies)
    assert all(objectives >= {"cross_entropy", "soft_votes"} for objectives in studies.values()), studies
    assert any("annotator_groups" in objectives for objectives in studies.values())  # where the release names annotators


def test_each_row_scored_the_held_out_votes_and_the_calibration_it_fitted():
    for row in RESULTS_DATA["rows"]:
        for head, cells in row["heads"].items():
            assert cells["cross_entropy"] is not None and cells["constant_cross_entropy"] is not None, (row["study"], head)
            assert cells["ece_before"] is not None and cells["ece_after"] is not None, (row["study"], head)
            assert cells["tfidf_auroc"] is not None and cells["majority"] is not None, (row["study"], head)


def _fold(fold: int, probabilities: list[float], labels: list[int]) -> dict:
    ids = [f"m{fold}-{k}" for k in range(len(labels))]
    scores = {"auroc": 0.6 + 0.1 * fold, "acc": 0.7, "f1": 0.5, "majority": 0.55}
    calibrated = {"ece": 0.2 - 0.1 * fold, "brier": 0.25, "log_loss": 0.7}
    return {
        "experiment": "x",
        "fold": fold,
        "num_folds": 2,
        "selection": {"rule": "inner"},
        "held_out": {"US": scores, "mean": scores},
        "oof_predictions": {"id": ids, "head": ["US"] * len(ids), "probability": probabilities, "label": labels},
        "held_out_labels": {i: {"US": y} for i, y in zip(ids, labels)},
        "calibration": {
            "rule": "temperature …",
            "bins": "10 equal-width bins",
            "heads": {"US": {"temperature": 1.5, "before": calibrated, "after": {**calibrated, "ece": 0.05}}},
            "mean": {"before": calibrated, "after": calibrated},
        },
        "policy": {
            "name": "cautious",
            "targets": {"act": {"precision": 0.9}},
            "rule": "per culture …",
            "heads": {
                "US": {"act": {"action": "act", "threshold": 0.8, "reached": 0.9, "test": {"precision": 1.0 - 0.5 * fold, "recall": 0.5}}}
            },
        },
        "votes": {
            "rule": "held-out memes …",
            "heads": {
                "US": {"model": {"cross_entropy": 0.5 + fold, "jsd": 0.1, "pearson": 0.4}, "constant": {"cross_entropy": 0.9, "jsd": 0.2}}
            },
        },
    }


def test_a_row_holds_the_summarys_own_means():
    results = {0: _fold(0, [0.9, 0.2, 0.6], [1, 0, 1]), 1: _fold(1, [0.3, 0.7], [0, 1])}
    summary = {**summarise(results, pool_out_of_fold(results)), "folds": {"0": "fold0", "1": "fold1"}}  # as the report adds them
    row = row_of(summary, "s", "soft_votes", "crossmod cv experiment=x")
    cells = row["heads"]["US"]
    assert cells["auroc"] == pytest.approx(0.65) and cells["majority"] == pytest.approx(0.55)
    assert cells["ece_before"] == pytest.approx(0.15) and cells["ece_after"] == pytest.approx(0.05)
    assert cells["act_precision"] == pytest.approx(0.75) and cells["act_unreachable"] == 0.0 and cells["review_threshold"] is None
    assert cells["cross_entropy"] == pytest.approx(1.0) and cells["constant_cross_entropy"] == pytest.approx(0.9)
    assert (
        row["folds"] == 2
        and row["policy"] == {"name": "cautious", "targets": {"act": {"precision": 0.9}}, "folds": 2}
        and row["disagreement"] is None
    )
    text = render({"rows": [row]})
    assert "| s | soft_votes | US | 0.150 → 0.050 |" in text and "| 0.800 | 75.0 / 50.0 | — | — / — | 0, — |" in text


def _mhc(objective: str) -> dict:
    (row,) = [r for r in RESULTS_DATA["rows"] if r["study"].startswith("MHC") and r["objective"] == objective]
    return row["heads"]["hateful"]


def test_what_the_page_says_of_the_mhc_rows_holds_in_them():
    ce, soft = _mhc("cross_entropy"), _mhc("soft_votes")
    for cells in (ce, soft):  # calibration: the map lowers every score; the policy: held-out precision short of 0.9
        assert all(cells[f"{m}_after"] < cells[f"{m}_before"] for m in ("ece", "brier", "log_loss")), cells
        assert cells["act_precision"] < 0.9 and cells["act_unreachable"] < 1, cells
        assert cells["cross_entropy"] > cells["constant_cross_entropy"]  # neither beats the constant vote share
    assert soft["cross_entropy"] < ce["cross_entropy"] and soft["jsd"] < ce["jsd"]
    assert soft["auroc"] < ce["auroc"] and soft["auroc"] < soft["tfidf_auroc"]
    assert ce["auroc"] > ce["tfidf_auroc"] and ce["auroc"] > ce["probe_auroc"]

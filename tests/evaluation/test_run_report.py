"""What evaluate.py reports of a run, from its prediction rows and the memes' records, against sklearn and by hand."""

from __future__ import annotations

import re

import pytest
from sklearn.metrics import roc_auc_score

from crossmod.data.heads import parse_heads
from crossmod.evaluation.functional import functional_report
from crossmod.evaluation.run_report import functionality_figure, score_run, split_lines, summary_markdown

BINARY = {"kind": "binary"}
US = [1, 0, 1, 0, 1, 0]
DE = [0, 0, 1, 1, None, 1]
P_US = [0.9, 0.1, 0.4, 0.6, 0.8, 0.3]


def _records(meta: bool = False) -> list[dict]:
    records = []
    for k, (us, de) in enumerate(zip(US, DE)):
        record = {"id": f"m{k}", "lang": "de" if k < 3 else "nl", "labels": {"US": us, "DE": de, "hateful": us}}
        if meta:
            record["meta"] = {"functionality": "f_a" if k % 2 else "f_b"}
        records.append(record)
    return records


def test_scores_alignment_and_roc_inputs_of_a_run():
    rows = [{"US_probability": p} for p in P_US]
    scores = score_run(rows, _records(), parse_heads({"US": BINARY}), parse_heads({"US": BINARY, "DE": BINARY}), threshold=0.5)
    assert scores.metrics["US"]["auroc"] == pytest.approx(roc_auc_score(US, P_US))
    assert set(scores.metrics) == {"US"}  # the data's DE head is not one of the model's
    labelled = [k for k, v in enumerate(DE) if v is not None]
    assert scores.alignment["US"]["DE"] == pytest.approx(roc_auc_score([DE[k] for k in labelled], [P_US[k] for k in labelled]))
    assert scores.labels["DE"] == {f"m{k}": DE[k] for k in labelled} and scores.probs["US"]["m4"] == pytest.approx(0.8)
    assert scores.sections == {}


def test_memes_with_functional_test_metadata_get_the_mhc_section():
    rows = [{"hateful_probability": p} for p in P_US]
    records = _records(meta=True)
    scores = score_run(rows, records, parse_heads({"hateful": BINARY}), parse_heads({"hateful": BINARY}), threshold=0.5)
    decisions = [int(p >= 0.5) for p in P_US]  # 1 0 0 1 1 0 against 1 0 1 0 1 0
    expected = functional_report(
        {"lang": r["lang"], "label": r["labels"]["hateful"], "prediction": d, "meta": r["meta"]} for r, d in zip(records, decisions)
    )
    assert scores.sections["mhc"] == expected
    assert expected["accuracy"]["f_b"] == {"de": 0.5, "nl": 1.0}  # m0 right, m2 wrong; m4 right


def _entry(**selection) -> dict:
    split = {"requested": "auto", "scored": "held-out fold 1 of 3", "items": 6, "warning": None}
    return {"split": split, "selection": selection or None, "metrics": {"US": {"auroc": 0.75, "acc": 0.5, "f1": 2 / 3}}, "alignment": {}}


def test_split_lines_name_the_memes_and_the_rule():
    assert split_lines(_entry(rule="inner", description="best on an inner split", monitor="val/mean/auroc")) == [
        "Scored on: held-out fold 1 of 3 (6 memes; split=auto).",
        "Weights: rule `inner` — best on an inner split, monitor val/mean/auroc.",
    ]
    assert split_lines(_entry())[1] == "Weights: selection rule unknown (no metrics.json beside these weights)."


def test_summary_marks_each_heads_best_culture_with_its_rank_sum_marker_or_a_dagger():
    report = {
        "dataset": "synthetic",
        "items": 6,
        "runs": {"a/fold1": _entry(rule="last", description="the final weights")},
        "alignment": {"mean": {"US": {"US": 0.8, "DE": 0.6}, "DE": {"US": 0.7, "DE": 0.65}}, "markers": {"US": "**", "DE": ""}, "runs": 3},
    }
    text = summary_markdown(report, ["alignment.png"])
    assert text.startswith("# Evaluation on synthetic (6 items, 1 run(s))\n\n## a/fold1\n\nScored on: held-out fold 1 of 3")
    assert "| US | 0.750 | 0.500 | 0.667 |" in text
    assert "| US | 0.800** | 0.600 |" in text and "| DE | 0.700† | 0.650 |" in text and "mean over 3 run(s)" in text
    assert "![alignment](alignment.png)" in text and "roc.png" not in text
    assert functionality_figure("a/fold1") == "functionalities-a_fold1.png"
    # a report written before the test was recorded: its markers came from scipy's ranksums, and the text says so
    assert (
        "`*`/`**`: best > lowest (/ and > second best), one-sided Wilcoxon rank-sum (normal approximation, scipy ranksums) over runs"
        in text
    )


def test_summary_names_the_test_behind_the_markers_and_why_there_are_none():
    note = "No marker can be earned for US, DE: with 3 runs the exact one-sided rank-sum test cannot go below p = 0.05 (…)."
    alignment = {"mean": {"US": {"US": 0.8, "DE": 0.6}, "DE": {"US": 0.7, "DE": 0.65}}, "markers": {"US": "", "DE": ""}, "runs": 3}
    alignment |= {"test": "exact one-sided Wilcoxon rank-sum (permutation over all splits)", "alpha": 0.05, "note": note}
    report = {"dataset": "synthetic", "items": 6, "runs": {"a/fold1": _entry()}, "alignment": alignment}
    text = summary_markdown(report, [])
    assert (
        "† best culture; `*`/`**`: best > lowest (/ and > second best), "
        f"exact one-sided Wilcoxon rank-sum (permutation over all splits) over runs, p < 0.05. {note}"
    ) in text.splitlines()
    assert "| US | 0.800† | 0.600 |" in text


def test_names_from_shared_files_stay_words_in_the_summary():
    """A run folder named with an ANSI escape or markdown/HTML, and a baseline rule that is a link, are shown escaped."""
    from crossmod.evaluation.summary import shown

    hostile = "\x1b[31mrun\x1b[0m [x](javascript:alert(1)) <img src=x> | cell"
    text = shown(hostile)
    assert "\x1b" not in text and not re.search(r"(?<!\\)[<>\[\]|`]", text), text  # each one escaped
    assert text.startswith("\\x1b\\[31mrun") and "\\[x\\](javascript:alert(1))" in text
    assert shown("synthetic_concat/runs/r1") == "synthetic_concat/runs/r1" and len(shown("a" * 1000)) == 300

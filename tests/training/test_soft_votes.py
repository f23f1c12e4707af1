"""`model/objective=soft_votes` on Multi3Hate's votes in the release's layout: the run trains each culture's head on its
annotators' vote share, and its record scores the held-out memes against their votes beside the constant baseline."""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest

from crossmod.data.sources.multi3hate import Multi3HateSource
from crossmod.evaluation.soft_labels import soft_scores
from tests.conftest import SMALL_DATA, scaled
from tests.data.sources import layouts
from tests.zygote import run_python

CULTURES = ("US", "DE", "MX", "IN", "CN")
POOL = {"en": "US", "de": "DE", "es": "MX", "hi": "IN", "zh": "CN"}


def test_a_soft_votes_run_scores_the_held_out_memes_against_their_votes(train_run, tmp_path):
    memes = 12
    votes = [{lang: [(k + u + c) % 3 == 0 for u in range(4)] for c, lang in enumerate(POOL)} for k in range(memes)]
    raw = layouts.multi3hate(tmp_path / "raw", memes=memes, votes=[{lang: [int(v) for v in cast] for lang, cast in m.items()} for m in votes])
    result = train_run(
        "data=multi3hate", f"data.raw_dir={raw}", "model=text", "model/objective=soft_votes", "fold=0", "num_folds=3",
        "trainer.max_epochs=2", env={"CROSSMOD_RUN_ID": "soft"},
    )  # fmt: skip
    (run,) = (tmp_path / "runs").glob("*/runs/soft")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["variants"] == ["soft_votes"] and run.parent.parent.name == "multi3hate_text-soft_votes"
    assert "Against the annotators' votes on the test memes" in result.stdout and "Cultures' disagreement" in result.stdout

    # each culture's share from the release's own rows, independently of the converter's record of them
    rows = list(csv.DictReader((raw / "raw_annotations.csv").open(encoding="utf-8")))
    assert rows and set(rows[0]) >= {"Politcal Party", "Country of birth", "hatespeech"} and rows[0]["hatespeech"] in ("1.0", "0.0")
    hate, total = {}, {}
    for row in rows:
        key = (POOL[row["dataset_language"]], row["Meme ID"])
        hate[key] = hate.get(key, 0) + float(row["hatespeech"])
        total[key] = total.get(key, 0) + 1
    predictions: dict[str, dict[str, float]] = {}
    with open(run / "predictions" / "test.csv") as handle:
        for row in csv.DictReader(handle):
            predictions.setdefault(row["head"], {})[row["id"]] = float(row["probability"])
    recorded = metrics["votes"]
    assert set(recorded["heads"]) == set(CULTURES)
    for culture in CULTURES:
        ids = sorted(predictions[culture])
        share = np.array([hate[culture, i.split("/")[1]] / total[culture, i.split("/")[1]] for i in ids])
        expected = soft_scores(np.array([predictions[culture][i] for i in ids]), share)
        model = recorded["heads"][culture]["model"]
        assert model["memes"] == len(ids) > 0 and model["cross_entropy"] == pytest.approx(expected["cross_entropy"], abs=1e-6)
        assert model["jsd"] == pytest.approx(expected["jsd"], abs=1e-6)
        constant = recorded["heads"][culture]["constant"]
        assert 0.0 < constant["share"] < 1.0 and constant["memes"] == model["memes"]  # the training memes' mean share
    fold_result = json.loads((run / "fold_result.json").read_text())
    assert fold_result["votes"] == recorded  # measured once, by the fold result, and reused by the run's record
    spread = recorded["disagreement"]
    assert spread["memes"] == len(predictions["US"]) and spread["cultures"] == 5 and "held-out memes" in recorded["rule"]

    # the fold's result carries the same record, and the cross-validation report shows it beside the constant
    assert json.loads((run / "fold_result.json").read_text())["votes"] == json.loads(json.dumps(recorded))
    report = run_python([sys.executable, "-m", "crossmod", "cv-report", f"runs={run.parent}"], capture_output=True, text=True, timeout=scaled(300))
    assert report.returncode == 0, report.stderr[-3000:]
    (markdown,) = run.parent.glob("cv_report/*/cv_report.md")
    text = markdown.read_text()
    assert "Against the annotators' votes on the held-out folds" in text and "Cultures' disagreement per meme" in text
    us = recorded["heads"]["US"]
    assert f"| US | {us['model']['cross_entropy']:.3f} ± nan | {us['constant']['cross_entropy']:.3f} ± nan |" in text


def test_the_converter_reads_the_release_layouts_votes_per_culture_head(tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw", memes=2)
    samples = list(Multi3HateSource(raw).records())
    first = next(s for s in samples if getattr(s, "id", None) == "multi3hate/10/en")
    # meme 10, three annotators per pool, votes (10 + u) % 2: 1 of 3 hateful in every culture's pool
    assert first.meta["head_votes"] == {culture: [1, 3] for culture in CULTURES}


def test_soft_votes_on_memes_without_votes_is_refused_before_training(train_run):
    result = train_run(*SMALL_DATA, "model/objective=soft_votes", "trainer.max_epochs=1", check=False)
    assert result.returncode != 0 and "carry none" in result.stderr + result.stdout
    assert "Epoch 0" not in result.stdout


def test_the_runs_record_reuses_the_fold_results_votes_without_a_second_pass(tmp_path):
    """A fold run's record takes the votes its fold result measured: the training memes are not read a second time."""
    from crossmod.training.callbacks.fold_results import FoldResultWriter
    from crossmod.training.pipeline import fold_record

    writer = FoldResultWriter(str(tmp_path), "x", fold=0, num_folds=2)
    assert fold_record([writer]) is None  # nothing written yet: the record measures them itself
    writer.written = {"votes": {"rule": "r"}, "policy": {"name": "cautious"}}
    assert fold_record([object(), writer]) is writer.written

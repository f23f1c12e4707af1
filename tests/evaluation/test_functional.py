"""The MHC functional report on the real Multilingual HateCheck cases, scored for a keyword baseline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sklearn.metrics import f1_score

from crossmod.data.sources.mhc import MHCSource
from crossmod.evaluation.functional import functional_markdown, functional_metrics, functional_report, functionality_bars, is_ident_case
from tests.conftest import ROOT

MHC_DIR = Path(os.environ.get("MHC_DIR", ROOT.parent / "shared" / "data" / "mhc"))
# "hate" in the ten languages (and two common forms): a weak but honest baseline that has something to fail.
KEYWORDS = ("hate", "hass", "haïs", "hais", "odio", "odeio", "odi", "nienawidz", "haat", "أكره", "नफरत", "nafrat", "恨", "討厭", "讨厌")


def keyword_baseline(text: str) -> int:
    lowered = text.casefold()
    return int(any(k in lowered for k in KEYWORDS))


@pytest.mark.skipif(not MHC_DIR.is_dir(), reason=f"real MHC files not found at {MHC_DIR}")
def test_functional_report_on_real_mhc(tmp_path):
    samples = list(MHCSource(MHC_DIR))
    rows = [{"lang": s.lang, "label": s.labels["hateful"], "prediction": keyword_baseline(s.text), "meta": s.meta} for s in samples]
    report = functional_report(rows)
    assert report["cases"] == 36_582
    assert report["languages"] == ["ar", "de", "es", "fr", "hi", "it", "nl", "pl", "pt", "zh"]
    assert len(report["functionalities"]) == 34
    present = {(r["meta"]["functionality"], r["lang"]) for r in rows}
    assert all(report["accuracy"][f][lang] is not None for f, lang in present)
    for lang in report["languages"]:
        y = [r["label"] for r in rows if r["lang"] == lang]
        p = [r["prediction"] for r in rows if r["lang"] == lang]
        assert report["per_language"][lang]["macro_f1"] == pytest.approx(f1_score(y, p, average="macro"))
        assert report["per_language"][lang]["f1_h"] == pytest.approx(f1_score(y, p, pos_label=1))
    ident = [r for r in rows if is_ident_case(r["meta"])]
    assert ident and len(report["per_target"]) >= 10 * 2  # every language has several target groups
    assert {s["direction"] for s in report["per_language"].values()} <= {"over-predicts hate", "under-predicts hate", "balanced"}
    figure = functionality_bars(report, tmp_path / "functionalities.png")
    assert figure.stat().st_size > 0
    assert "| de |" in functional_markdown(report, figure.name)


def test_logged_metrics_average_a_functionality_over_the_languages_that_have_it():
    report = {
        "accuracy": {"derog": {"de": 1.0, "nl": 0.5}, "slur": {"de": None, "nl": 0.25}},
        "per_language": {"de": {"macro_f1": 0.7}, "nl": {"macro_f1": 0.4}},
    }
    assert functional_metrics(report, "val/mhc") == {
        "val/mhc/acc/derog": 0.75,
        "val/mhc/acc/slur": 0.25,  # no German cases of it: not a zero
        "val/mhc/macro_f1/de": 0.7,
        "val/mhc/macro_f1/nl": 0.4,
    }

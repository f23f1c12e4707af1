"""`dataset_report.{json,md}` + histogram from `python prepare.py multi3hate` on a fixture with known votes."""

from __future__ import annotations

import json

import pytest
from scipy.stats import chi2_contingency

from crossmod.data.shards import read_manifest
from crossmod.data.sources.multi3hate import Multi3HateSource
from crossmod.recipes.prepare import compose_data, prepare
from tests.data.sources import layouts

# Final labels of six memes (US, DE, MX, IN, CN); largest same-label group: 5, 5, 4, 3, 3, 4.
LABELS = [
    {"US": 1, "DE": 1, "MX": 1, "IN": 1, "CN": 1},
    {"US": 0, "DE": 0, "MX": 0, "IN": 0, "CN": 0},
    {"US": 1, "DE": 1, "MX": 1, "IN": 1, "CN": 0},
    {"US": 0, "DE": 0, "MX": 1, "IN": 1, "CN": 1},
    {"US": 1, "DE": 1, "MX": 1, "IN": 0, "CN": 0},
    {"US": 0, "DE": 1, "MX": 1, "IN": 1, "CN": 1},
]
# US annotators disagree (meme 4 has one vote missing); every other culture votes unanimously for its label.
US_VOTES = [[1, 1, 1, 1, 1], [0, 0, 0, 0, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1, 1]]
LANGUAGE = {"US": "en", "DE": "de", "MX": "es", "IN": "hi", "CN": "zh"}
VOTES = [{LANGUAGE[c]: US_VOTES[k] if c == "US" else [label] * 5 for c, label in LABELS[k].items()} for k in range(6)]
# US α by hand, per meme (non-hate, hate) votes: (0,5) (5,0) (2,3) (4,1) (0,4) (3,2); pairs count 1/(m_u − 1):
#   o00 = 5 + 2·1/4 + 4·3/4 + 3·2/4 = 10,  o11 = 5 + 3·2/4 + 4·3/3 + 2·1/4 = 11,
#   o01 = o10 = 2·3/4 + 4·1/4 + 3·2/4 = 4;  n0 = 14, n1 = 15, n = 29.
#   D_o = 8/29,  D_e = 2·14·15 / (29·28) = 15/29,  α = 1 − 8/15 = 7/15.
# Every other culture: D_o = 0 with both labels used → α = 1.


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("m3h")
    raw = layouts.multi3hate(root / "raw", labels=LABELS, votes=VOTES)
    prepare(compose_data("multi3hate", [f"raw_dir={raw}"]), str(root / "shards"))
    (directory,) = [p for p in (root / "shards").iterdir() if p.is_dir()]
    return directory


def test_report_numbers_match_the_known_votes(prepared):
    report = json.loads((prepared / "dataset_report.json").read_text())
    assert report["dataset"] == "multi3hate" and report["memes"] == 6
    assert report["hate_share"] == pytest.approx({"US": 3 / 6, "DE": 4 / 6, "MX": 5 / 6, "IN": 4 / 6, "CN": 3 / 6})
    assert report["pairwise_agreement"]["US-DE"] == pytest.approx(5 / 6) and report["pairwise_agreement"]["US-IN"] == pytest.approx(3 / 6)
    assert report["agreement_levels"]["share"] == pytest.approx({"5": 2 / 6, "4": 2 / 6, "3": 2 / 6})
    alpha = report["krippendorff_alpha"]
    assert alpha["US"]["alpha"] == pytest.approx(7 / 15, abs=1e-12) and alpha["US"]["votes"] == 29
    assert all(alpha[c]["alpha"] == pytest.approx(1.0, abs=1e-12) for c in ("DE", "MX", "IN", "CN"))
    # counts (non-hate, hate): US 3/3, DE 2/4, MX 1/5, IN 2/4, CN 3/3 → expected 2.2 / 3.8 in every row
    table = [[3, 3], [2, 4], [1, 5], [2, 4], [3, 3]]
    assert report["chi2"]["chi2"] == pytest.approx((0.8**2 * 2 + 0.2**2 * 2 + 1.2**2) * (1 / 2.2 + 1 / 3.8), abs=1e-12)
    assert report["chi2"]["p"] == pytest.approx(chi2_contingency(table).pvalue, abs=1e-12) and report["chi2"]["dof"] == 4
    groups = report["random_groups"]
    assert groups["memes"] == 6 and groups["repetitions"] == 30_000 and groups["group_size"] == 5
    assert sum(groups["histogram"]["counts"]) == 30_000 and groups["normaltest"]["p"] is not None
    for pair, sigma in groups["pairs_sigma"].items():
        assert sigma == pytest.approx((report["pairwise_agreement"][pair] - groups["mean"]) / groups["std"])


def test_manifest_holds_the_compact_numbers_and_the_markdown_shows_them(prepared):
    summary = read_manifest(prepared)["source_summary"]
    report = json.loads((prepared / "dataset_report.json").read_text())
    assert "histogram" not in summary["random_groups"] and len(json.dumps(summary)) < 6_000
    assert summary["random_groups"]["mean"] == report["random_groups"]["mean"]
    assert summary["raw_annotations"]["rows"] == 6 * 5 * 5 - 1 and summary["raw_annotations"]["unparsed_rows"] == 0
    markdown = (prepared / "dataset_report.md").read_text()
    assert "| US | 50.0 % | 0.467 | 6 | 29 |" in markdown
    assert "| 5 of 5 | 33.3 % |" in markdown and "dof = 4" in markdown
    assert "![random groups](dataset_report_random_groups.png)" in markdown
    assert (prepared / "dataset_report_random_groups.png").stat().st_size > 5_000
    print(markdown)


def test_raw_rows_not_used_are_counted_with_reason_and_line(tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw")  # 6 memes × 5 languages × 3 votes: lines 2–91
    with (raw / "raw_annotations.csv").open("a", encoding="utf-8") as file:
        blank = "," * 7  # the annotator's seven attributes, left empty
        file.write(f"en,en-user9,10{blank},maybe\nen,en-user0,10{blank},1.0\nfr,en-user9,10{blank},1.0\n")  # lines 92, 93, 94
    source = Multi3HateSource(raw, cultures=["US", "DE"])
    stats = source.summary()["raw_annotations"]
    assert stats["unparsed_reasons"] == {
        "hatespeech 'maybe'": {"rows": 1, "first_line": 92},
        "second vote of one annotator on one meme (first at line 2)": {"rows": 1, "first_line": 93},
    }
    not_used = {
        "dataset_language 'fr' (no culture)": 1,
        **{f"dataset_language '{lang}' (culture not selected)": 18 for lang in "es hi zh".split()},
    }
    assert stats["rows_not_used_for_cultures"] == not_used
    assert source.raw_votes["by_culture"]["10"] == {"US": (1, 3), "DE": (1, 3)}  # meme 10: votes (10 + u) % 2 for u = 0, 1, 2

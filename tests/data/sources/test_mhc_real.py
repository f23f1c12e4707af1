"""The real Multilingual HateCheck release (shared/data/mhc beside the checkout, or $MHC_DIR): the study's counts."""

from __future__ import annotations

import ast
import csv
import os
from collections import Counter
from pathlib import Path

import pytest

from crossmod.data.folds import iter_records
from tests.conftest import ROOT
from tests.data.sources.helpers import convert, source

MHC_DIR = Path(os.environ.get("MHC_DIR", ROOT.parent / "shared" / "data" / "mhc"))


@pytest.mark.skipif(not MHC_DIR.is_dir(), reason=f"real MHC files not found at {MHC_DIR} (set MHC_DIR)")
def test_real_mhc_matches_the_study(tmp_path):
    manifest = convert(source("mhc", MHC_DIR), tmp_path / "mhc", maxcount=5000)
    assert manifest["inputs_read"] == manifest["samples_written"] == 36_582 and not manifest["skipped"]
    assert manifest["counts"]["label"]["hateful"] == {"1": 25_511, "0": 11_071}
    assert sorted(manifest["counts"]["lang"]) == ["ar", "de", "es", "fr", "hi", "it", "nl", "pl", "pt", "zh"]
    records = list(iter_records(tmp_path / "mhc", [s["name"] for s in manifest["shards"]]))
    functionalities = Counter(r["meta"]["functionality"] for r in records)
    assert len(functionalities) == 34
    by_functionality = {f: {r["labels"]["hateful"] for r in records if r["meta"]["functionality"] == f} for f in functionalities}
    assert all(len(labels) == 1 for labels in by_functionality.values())  # one gold label per functionality
    # the three annotators' votes per case (label_annotated), counted independently of the converter
    expected = {}
    for path in MHC_DIR.glob("hatecheck_cases_final_*.csv"):
        for row in csv.DictReader(path.open(encoding="utf-8")):
            annotated = ast.literal_eval(row["label_annotated"])
            expected[f"mhc/{row['mhc_case_id']}"] = [annotated.count("hateful"), len(annotated)]
    assert {r["id"]: r["meta"]["head_votes"]["hateful"] for r in records} == expected
    assert sum(0 < hate < total for hate, total in expected.values()) == 7_802  # the cases the annotators split on

"""The README's model-family table is generated from the measured `docs/model_zoo.json`, and the measured
numbers show what the families are for: fusion beats both unimodal models, early/CLIP fusion ≥ late."""

from __future__ import annotations

import json

from scripts.zoo_table import END, README, RESULTS, START, render


def test_readme_table_is_rendered_from_the_measurements():
    block = README.read_text().split(START, 1)[1].split(END, 1)[0].strip()
    assert block == render(json.loads(RESULTS.read_text())).strip()


def test_measured_ordering_of_the_families():
    rows = {row["family"]: row["val_mean_auroc"] for row in json.loads(RESULTS.read_text())["rows"]}
    unimodal = max(rows["text"], rows["image"])
    assert all(rows[f] > unimodal for f in ("late_fusion", "concat", "early_fusion", "clip_fusion"))
    assert rows["early_fusion"] >= rows["late_fusion"] and rows["clip_fusion"] >= rows["late_fusion"]

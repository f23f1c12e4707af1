"""The model-family table (docs/models.md, docs/synthetic.md) is generated from the measured `docs/model_zoo.json`, and the measured
numbers show what the families are for: fusion beats both unimodal models, early/CLIP fusion ≥ late, every
family stays at or below the ceiling of what it sees (+ the stated tolerance), VLMs learn the rule, and a VLM
without one modality falls to the other's ceiling. The stored ceilings are the generator's current ones."""

from __future__ import annotations

import json
import shlex

import pytest

from scripts.learning_margins import CEILING_TOLERANCE
from scripts.zoo_table import END, FAMILIES, RESULTS, START, TABLE_FILES, render

ROWS = {row["family"]: row for row in json.loads(RESULTS.read_text())["rows"]}


@pytest.mark.parametrize("path", TABLE_FILES, ids=lambda p: p.name)
def test_tables_are_rendered_from_the_measurements(path):
    block = path.read_text().split(START, 1)[1].split(END, 1)[0].strip()
    assert block == render(json.loads(RESULTS.read_text())).strip()


def test_every_family_was_measured_with_its_ceiling():
    assert set(ROWS) == set(FAMILIES)
    for family, (overrides, view) in FAMILIES.items():  # the command shown is what the script ran, quoted for a shell
        assert ROWS[family]["view"] == view and shlex.split(ROWS[family]["command"]) == ["python", "train.py", *overrides], family


def test_stored_ceilings_are_the_generators():
    from crossmod.data.synthetic import SyntheticMemeSource

    oracle = SyntheticMemeSource(label_noise=0.01).summary()["oracle_by_split"]["val"]  # configs/data/synthetic.yaml's source
    for family, row in ROWS.items():
        assert row["val_ceiling"] == pytest.approx(oracle[row["view"]]["mean"]["auroc"]), family


def test_measured_ordering_of_the_families():
    val = {family: row["val_mean_auroc"] for family, row in ROWS.items()}
    unimodal = max(val["text"], val["image"])
    assert all(val[f] > unimodal for f in ("late_fusion", "concat", "early_fusion", "clip_fusion", "visual_bert"))
    assert val["early_fusion"] >= val["late_fusion"] and val["clip_fusion"] >= val["late_fusion"]


def test_no_family_beats_the_ceiling_of_what_it_sees():
    over = {
        f: (r["val_mean_auroc"], r["val_ceiling"]) for f, r in ROWS.items() if r["val_mean_auroc"] > r["val_ceiling"] + CEILING_TOLERANCE
    }
    assert not over, over


def test_vlms_and_visual_bert_learn_the_rule():
    assert ROWS["vlm_head_qwen2_vl"]["val_mean_auroc"] >= 0.90
    assert ROWS["visual_bert"]["val_mean_auroc"] >= 0.90
    assert ROWS["vlm_head_gemma3"]["val_mean_auroc"] >= 0.85 and ROWS["vlm_head_smolvlm"]["val_mean_auroc"] >= 0.85
    assert ROWS["vlm_verbalizer_qwen2_vl"]["val_mean_auroc"] >= 0.85
    for ablated in ("vlm_head_qwen2_vl_ablate_image", "vlm_head_qwen2_vl_ablate_text"):
        assert ROWS[ablated]["view"] != "fusion"  # held to the remaining modality's ceiling above

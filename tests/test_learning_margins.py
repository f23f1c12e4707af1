"""docs/reproducibility.md's learning-margins table is the rendering of docs/learning_margins.json, and every measured
run of a recipe a learning test trains clears that test's threshold: a threshold is never set above a value seen."""

from __future__ import annotations

import json

from scripts.learning_margins import CHECKS, DOC, END, RESULTS, START, render

# the recipe's old rate and budget, kept in the table to show why the recipe changed (no test trains it)
NOT_ASSERTED = {"qwen2_vl_head_6_epochs", "concat_lr_2e-3", "concat_us_vs_cn_lr_2e-3"}


def test_the_table_is_rendered_from_the_measurements():
    block = DOC.read_text().split(START, 1)[1].split(END, 1)[0].strip()
    assert block == render(json.loads(RESULTS.read_text())).strip(), "run python scripts/learning_margins.py --render-only"


def test_every_measured_run_clears_its_learning_tests_threshold():
    rows = json.loads(RESULTS.read_text())["rows"]
    assert {row["check"] for row in rows} - NOT_ASSERTED == set(CHECKS) - NOT_ASSERTED  # every check has been measured
    missed = [row for row in rows if row["check"] not in NOT_ASSERTED and not CHECKS[row["check"]].holds(row["value"])]
    assert not missed, missed


def test_a_value_past_the_threshold_is_caught():
    check = CHECKS["visual_bert"]
    assert check.holds(check.threshold) and not check.holds(check.threshold - 0.001)
    ceiling = CHECKS["image_below_ceiling"]
    assert ceiling.holds(ceiling.threshold) and not ceiling.holds(ceiling.threshold + 0.001)

"""Mean ± sample std over seeds, by hand: missing values left out, a seed given twice reported."""

from __future__ import annotations

import math

import pytest

from crossmod.evaluation.seed_summary import seed_summary


def _run(seed: int, val: float | None, test: float) -> dict:
    return {"seed": seed, "best": {"val": {"mean": {"auroc": val}}, "test": {"mean": {"auroc": test}, "US": {"acc": test}}}}


def test_mean_and_sample_std_over_seeds():
    summary = seed_summary({"x": [_run(1, 0.6, 0.5), _run(2, None, 0.7), _run(3, 0.8, 0.9)]})["x"]
    assert summary["seeds"] == [1, 2, 3] and summary["problems"] == []
    assert list(summary["metrics"]) == ["test/US/acc", "test/mean/auroc", "val/mean/auroc"]
    test = summary["metrics"]["test/mean/auroc"]  # .5 .7 .9: mean .7, s = sqrt((.04 + 0 + .04) / 2) = .2
    assert test["mean"] == pytest.approx(0.7) and test["std"] == pytest.approx(0.2) and test["n"] == 3
    val = summary["metrics"]["val/mean/auroc"]  # the missing value is left out: .6 .8
    assert val["mean"] == pytest.approx(0.7) and val["std"] == pytest.approx(math.sqrt(0.02)) and val["n"] == 2


def test_a_seed_given_twice_is_a_problem():
    summary = seed_summary({"x": [_run(1, 0.6, 0.5), _run(1, 0.7, 0.6)], "y": [_run(4, 0.5, 0.5)]})
    assert summary["x"]["problems"] == ["seed 1 appears 2 times"] and summary["y"]["problems"] == []
    assert math.isnan(summary["y"]["metrics"]["test/mean/auroc"]["std"])  # one seed: no spread

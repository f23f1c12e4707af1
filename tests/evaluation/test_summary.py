"""Mean ± sample std over runs: one rule (NaN-aware, ddof = 1, undefined below two values) for every report."""

from __future__ import annotations

import math

import pytest

from crossmod.evaluation.summary import json_safe, mean_std


def test_mean_and_sample_std_by_hand():
    stats = mean_std([0.6, 0.8, None, math.nan])  # two defined values: mean 0.7, s = sqrt(((-.1)² + .1²) / 1)
    assert stats["mean"] == pytest.approx(0.7) and stats["std"] == pytest.approx(math.sqrt(0.02)) and stats["n"] == 2


def test_one_value_has_no_spread_and_none_has_no_mean():
    assert math.isnan(mean_std([0.5])["std"]) and mean_std([0.5])["mean"] == 0.5
    assert math.isnan(mean_std([None])["mean"]) and mean_std([])["n"] == 0


def test_json_safe_turns_nan_into_null_everywhere():
    assert json_safe({"a": [math.nan, 1.0, {"b": math.nan}], "c": (2.0, math.nan)}) == {"a": [None, 1.0, {"b": None}], "c": [2.0, None]}

"""Disagreement scores and AURC against hand-computed cases; the random and oracle baselines; ties broken by id."""

from __future__ import annotations

import numpy as np
import pytest

from crossmod.evaluation.abstention import aurc, culture_abstention, disagreement, oracle_aurc, risk_coverage


def test_disagreement_by_hand():
    probabilities = {"US": [0.9, 0.5, 0.1], "DE": [0.1, 0.5, 0.1]}
    np.testing.assert_allclose(disagreement(probabilities, "spread"), [0.4, 0.0, 0.0])
    np.testing.assert_allclose(disagreement(probabilities, "entropy"), [1.0, 1.0, -(0.1 * np.log2(0.1) + 0.9 * np.log2(0.9))])
    with pytest.raises(ValueError, match="two culture heads or more"):
        disagreement({"US": [0.5]})
    with pytest.raises(ValueError, match="one of"):
        disagreement(probabilities, "variance")


def test_risk_coverage_and_aurc_by_hand():
    # scores order the memes c, a, b (lowest first); errors 0, 1, 0 in that order → risks 0, 1/2, 1/3
    errors, score = [1, 0, 0], [0.2, 0.9, 0.1]
    coverage, risk = risk_coverage(errors, score)
    np.testing.assert_allclose(coverage, [1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(risk, [0, 1 / 2, 1 / 3])
    assert aurc(errors, score) == pytest.approx((0 + 1 / 2 + 1 / 3) / 3)
    assert oracle_aurc(errors) == pytest.approx((0 + 0 + 1 / 3) / 3)  # the wrong one last
    # ties broken by id, not by position: the same memes listed in another order give the same curve
    assert aurc([1, 0], [0.5, 0.5], ids=["b", "a"]) == aurc([0, 1], [0.5, 0.5], ids=["a", "b"]) == pytest.approx(0.25)  # a (right) first, then b


def test_a_random_order_averages_to_the_error_rate_and_the_oracle_is_lowest():
    rng = np.random.default_rng(0)
    errors = (rng.random(200) < 0.3).astype(float)
    random_orders = [aurc(errors, rng.random(200)) for _ in range(300)]
    assert np.mean(random_orders) == pytest.approx(errors.mean(), abs=0.01)
    assert oracle_aurc(errors) <= min(random_orders)


def test_culture_abstention_decides_at_the_selection_threshold_and_orders_by_disagreement():
    probabilities = {"US": {"a": 0.9, "b": 0.6, "c": 0.2}, "DE": {"a": 0.8, "b": 0.1, "c": 0.3}}
    labels = {"US": {"a": 1, "b": 0, "c": 0}, "DE": {"a": 1, "b": 0}}
    rows = culture_abstention(probabilities, labels, {"US": 0.5, "DE": 0.5})
    # spreads: a 0.05, c 0.05, b 0.25 → order a, c (tie: by id), b; US decides a=1 ✓, c=0 ✓, b=1 ✗
    assert rows["US"]["aurc"] == pytest.approx((0 + 0 + 1 / 3) / 3) and rows["US"]["aurc_random"] == pytest.approx(1 / 3)
    assert rows["US"]["aurc_oracle"] == rows["US"]["aurc"] and rows["US"]["risk_at_80_coverage"] == pytest.approx(1 / 3)  # ceil(2.4) = 3 memes
    assert rows["DE"]["memes"] == 2 and rows["DE"]["aurc"] == 0.0  # only its labelled memes

"""Calibration scores equal scikit-learn's on the same predictions (bins, Brier, log-loss), ECE equals hand-computed
cases, and temperature scaling finds the temperature that generated miscalibrated probabilities."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from crossmod.evaluation.calibration import (
    brier_score,
    calibration_scores,
    expected_calibration_error,
    fit_temperature,
    reliability_bins,
    with_temperature,
)
from crossmod.evaluation.calibration import (
    log_loss as crossmod_log_loss,
)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("n_bins", [1, 5, 10, 15])
def test_the_bins_are_scikit_learns_calibration_curve(strategy, n_bins):
    rng = np.random.default_rng(n_bins)
    p = rng.beta(0.7, 1.3, size=400)
    p[:8] = [0.0, 1.0, 0.1, 0.2, 0.5, 0.5, 0.9, 0.3]  # edges exactly: a probability on an inner edge falls in the lower bin
    y = (rng.random(400) < p).astype(int)
    observed, predicted = calibration_curve(y, p, n_bins=n_bins, strategy=strategy)
    bins = reliability_bins(y, p, n_bins, strategy)
    np.testing.assert_array_equal(bins.observed, observed)
    np.testing.assert_array_equal(bins.predicted, predicted)
    assert bins.counts.sum() == 400 and len(bins.counts) == len(observed)


def test_brier_and_log_loss_are_scikit_learns():
    rng = np.random.default_rng(0)
    p = rng.random(300)
    y = (rng.random(300) < p).astype(int)
    assert brier_score(y, p) == brier_score_loss(y, p)
    assert crossmod_log_loss(y, p) == log_loss(y, p, labels=[0, 1])
    assert crossmod_log_loss(np.zeros(4), [0.1, 0.2, 0.3, 0.4]) == pytest.approx(-np.mean(np.log([0.9, 0.8, 0.7, 0.6])))


def test_ece_by_hand():
    # two bins of 10 (0.0–0.1, 0.9–1.0 with n_bins=10): four memes at 0.05 (one hateful), four at 0.95 (two hateful)
    y, p = [1, 0, 0, 0, 1, 1, 0, 0], [0.05] * 4 + [0.95] * 4
    # |0.25 − 0.05| · 4/8 + |0.5 − 0.95| · 4/8 = 0.1 + 0.225
    assert expected_calibration_error(y, p) == pytest.approx(0.325)
    assert expected_calibration_error([0, 1], [0.0, 1.0]) == 0.0  # certain and right
    assert expected_calibration_error([1, 0], [0.0, 1.0]) == 1.0  # certain and wrong
    # one bin (n_bins=1): |mean label − mean probability|
    assert expected_calibration_error([1, 1, 0, 0], [0.9, 0.8, 0.7, 0.6], n_bins=1) == pytest.approx(0.25)
    # 0.1 sits on the first inner edge: it is binned with 0.05 (right-closed), giving one bin |1/2 − 0.075|
    assert expected_calibration_error([1, 0], [0.05, 0.1]) == pytest.approx(0.425)


def test_temperature_recovers_the_one_that_overconfident_scores_were_made_with():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 1.5, size=20_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-z))).astype(int)  # labels drawn from the true probabilities
    overconfident = 1 / (1 + np.exp(-2.5 * z))  # logits 2.5× too large
    temperature = fit_temperature(y, overconfident)
    assert temperature == pytest.approx(2.5, rel=0.05)
    calibrated = with_temperature(overconfident, temperature)
    assert expected_calibration_error(y, calibrated) < expected_calibration_error(y, overconfident) / 3
    assert log_loss(y, calibrated) < log_loss(y, overconfident)
    assert roc_auc_score(y, calibrated) == roc_auc_score(y, overconfident)  # a temperature moves no ranking
    np.testing.assert_allclose(with_temperature(overconfident, 1.0), overconfident, atol=1e-12)


def test_a_report_row_names_its_binning_rule():
    row = calibration_scores([0, 1, 1, 0], [0.2, 0.7, 0.9, 0.4])
    assert row["bins"] == "10 equal-width bins on [0, 1], right-closed, empty ones dropped" and row["n"] == 4
    assert set(row) == {"ece", "brier", "log_loss", "n", "bins"}


@pytest.mark.parametrize(
    "labels, probabilities, said",
    [([0, 2], [0.1, 0.2], "labels must be 0 or 1"), ([0, 1], [0.1, 1.2], "in \\[0, 1\\]"), ([0, 1], [0.1, float("nan")], "finite"),
     ([0], [0.1, 0.2], "one length"), ([], [], "non-empty")],
)
def test_impossible_inputs_are_named(labels, probabilities, said):
    with pytest.raises(ValueError, match=said):
        expected_calibration_error(labels, probabilities)
    with pytest.raises(ValueError, match="above 0"):
        with_temperature([0.5], 0.0)


def test_the_temperature_is_fitted_on_the_selection_split_only():
    """The held-out memes' labels move the scores reported on them, never the temperature (fitted on val)."""
    from crossmod.evaluation.calibration import temperature_on_selection

    rng = np.random.default_rng(2)
    p_val, p_test = rng.random(200), rng.random(300)
    y_val = (rng.random(200) < p_val ** 2).astype(int)
    y_test = (rng.random(300) < p_test).astype(int)
    first = temperature_on_selection({"US": (y_val, p_val)}, {"US": (y_test, p_test)})["US"]
    flipped = temperature_on_selection({"US": (y_val, p_val)}, {"US": (1 - y_test, p_test)})["US"]
    assert first["temperature"] == flipped["temperature"] == fit_temperature(y_val, p_val)
    assert first["before"] != flipped["before"] and first["selection_memes"] == 200
    # a head with one class on val gets no temperature (it would only push every probability towards that class)
    assert temperature_on_selection({"US": (np.zeros(5), rng.random(5))}, {"US": (y_test, p_test)}) == {}


def test_platt_recovers_the_slope_and_intercept_scores_were_made_with():
    """Platt scaling equals scikit-learn's unpenalised logistic regression on the logit, and finds the generating map."""
    from sklearn.linear_model import LogisticRegression

    from crossmod.evaluation.calibration import fit_platt, logits, with_platt

    rng = np.random.default_rng(3)
    z = rng.normal(0, 1.5, size=20_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-z))).astype(int)
    shifted = 1 / (1 + np.exp(-(2.0 * z - 1.0)))  # the true logit is (logit(p) + 1) / 2: slope 0.5, intercept 0.5
    slope, intercept = fit_platt(y, shifted)
    assert slope == pytest.approx(0.5, rel=0.05) and intercept == pytest.approx(0.5, abs=0.05)
    reference = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(logits(shifted)[:, None], y)
    np.testing.assert_allclose(with_platt(shifted, slope, intercept), reference.predict_proba(logits(shifted)[:, None])[:, 1], atol=1e-9)
    assert expected_calibration_error(y, with_platt(shifted, slope, intercept)) < expected_calibration_error(y, shifted) / 3
    assert roc_auc_score(y, with_platt(shifted, slope, intercept)) == pytest.approx(roc_auc_score(y, shifted), abs=1e-12)


def test_isotonic_equals_scikit_learns_and_is_monotone():
    from sklearn.isotonic import IsotonicRegression

    from crossmod.evaluation.calibration import fit_isotonic, with_isotonic

    rng = np.random.default_rng(4)
    p_val, p_test = rng.random(500), np.concatenate([rng.random(300), [0.0, 1.0]])
    y_val = (rng.random(500) < p_val**3).astype(int)
    knots = fit_isotonic(y_val, p_val)
    reference = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p_val, y_val)
    np.testing.assert_allclose(with_isotonic(p_test, *knots), reference.predict(p_test), atol=1e-12)
    mapped = with_isotonic(np.sort(p_test), *knots)
    assert (np.diff(mapped) >= 0).all() and mapped.min() >= 0 and mapped.max() <= 1
    # by hand: labels that rise with p are their own isotonic fit at the knots
    assert with_isotonic([0.1, 0.5, 0.9], *fit_isotonic([0, 0, 1], [0.1, 0.5, 0.9])).tolist() == [0.0, 0.0, 1.0]


def test_the_alternatives_are_fitted_on_the_selection_split_only():
    from crossmod.evaluation.calibration import fit_isotonic, fit_platt, temperature_on_selection

    rng = np.random.default_rng(5)
    p_val, p_test = rng.random(200), rng.random(300)
    y_val, y_test = (rng.random(200) < p_val**2).astype(int), (rng.random(300) < p_test).astype(int)
    for method, expected in (("platt", fit_platt(y_val, p_val)), ("isotonic", fit_isotonic(y_val, p_val))):
        first = temperature_on_selection({"US": (y_val, p_val)}, {"US": (y_test, p_test)}, method=method)["US"]
        flipped = temperature_on_selection({"US": (y_val, p_val)}, {"US": (1 - y_test, p_test)}, method=method)["US"]
        parameters = [value for key, value in first["calibrator"].items() if key != "method"]
        assert first["calibrator"] == flipped["calibrator"] and tuple(parameters) == tuple(expected)
        assert first["compared"][method] != flipped["compared"][method] and first["after"] == first["compared"][method]


@pytest.mark.parametrize("method", ["temperature", "platt", "isotonic"])
def test_each_calibration_map_applies_as_it_was_fitted_and_checks_as_data(method):
    import json

    from crossmod.evaluation.calibration import (
        apply_calibrator,
        check_calibrator,
        fit_calibrator,
        fit_isotonic,
        fit_platt,
        with_isotonic,
        with_platt,
    )

    rng = np.random.default_rng(6)
    p = rng.random(400)
    y = (rng.random(400) < p**2).astype(int)
    calibrator = json.loads(json.dumps(fit_calibrator(method, y, p)))  # as a card carries it
    check_calibrator(calibrator)
    expected = {
        "temperature": lambda: with_temperature(p, fit_temperature(y, p)),
        "platt": lambda: with_platt(p, *fit_platt(y, p)),
        "isotonic": lambda: with_isotonic(p, *fit_isotonic(y, p)),
    }[method]()
    np.testing.assert_allclose(apply_calibrator(p, calibrator), expected, atol=1e-12)
    with pytest.raises(ValueError, match="calibration must be one of"):
        fit_calibrator("beta", y, p)


def test_the_chosen_map_is_the_one_scored_after():
    from crossmod.evaluation.calibration import apply_calibrator, temperature_on_selection

    rng = np.random.default_rng(7)
    p_val, p_test = rng.random(300), rng.random(300)
    y_val, y_test = (rng.random(300) < p_val**2).astype(int), (rng.random(300) < p_test**2).astype(int)
    row = temperature_on_selection({"US": (y_val, p_val)}, {"US": (y_test, p_test)}, method="isotonic")["US"]
    assert row["calibrator"]["method"] == "isotonic"
    assert row["after"] == row["compared"]["isotonic"] == calibration_scores(y_test, apply_calibrator(p_test, row["calibrator"]))
    default = temperature_on_selection({"US": (y_val, p_val)}, {"US": (y_test, p_test)})["US"]
    assert default["calibrator"] == {"method": "temperature", "temperature": default["temperature"]}

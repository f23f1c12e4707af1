"""The cross-validation summary of fold results, against hand-computed means, sample stds and pooled AUROCs."""

from __future__ import annotations

import math

import pytest

from crossmod.evaluation.cv_summary import check_folds, check_rules, cv_markdown, pool_out_of_fold, summarise


def _scores(auroc: float, acc: float = 0.5, f1: float = 0.4, majority: float = 0.6) -> dict[str, float]:
    return {"auroc": auroc, "acc": acc, "f1": f1, "majority": majority}


def _fold(fold: int, rule: str | None, auroc: float, oof: dict[str, tuple[float, int, int]], selection: float | None = None) -> dict:
    """oof: id → (P(US), US label, DE label)."""
    ids = list(oof)
    result = {
        "experiment": "x",
        "fold": fold,
        "num_folds": 2,
        "held_out": {"US": _scores(auroc), "mean": _scores(auroc), "all": _scores(0.0)},
        "oof_predictions": {
            "id": ids,
            "head": ["US"] * len(ids),
            "probability": [oof[i][0] for i in ids],
            "label": [oof[i][1] for i in ids],
        },
        "held_out_labels": {i: {"US": oof[i][1], "DE": oof[i][2]} for i in ids},
    }
    if rule is not None:
        result["selection"] = {"rule": rule}
    if selection is not None:
        result["selection_scores"] = {"US": {"auroc": selection}, "all": {"auroc": 0.0}}
    return result


FOLD0 = {"a": (0.9, 1, 0), "b": (0.2, 0, 1), "c": (0.6, 1, 1), "d": (0.4, 0, 0)}
FOLD1 = {"e": (0.7, 0, 1), "f": (0.3, 1, 0)}


def test_mean_sample_std_and_pooled_out_of_fold_auroc_by_hand():
    results = {0: _fold(0, "last", 0.8, FOLD0, selection=0.7), 1: _fold(1, "last", 0.6, FOLD1, selection=0.9)}
    oof = pool_out_of_fold(results)
    assert oof.samples == 6 and oof.ids_in_two_folds == []
    summary = summarise(results, oof)
    metrics = summary["metrics"]
    assert metrics["cv/US/auroc_mean"] == pytest.approx(0.7) and metrics["cv/US/auroc_std"] == pytest.approx(math.sqrt(0.02))
    assert metrics["cv/US/acc_std"] == pytest.approx(0.0) and not any("/all/" in k for k in metrics)
    assert metrics["cv_selection/US/auroc_mean"] == pytest.approx(0.8)
    # pooled US scores .9 .2 .6 .4 .7 .3; US positives {.9, .6, .3} beat negatives {.2, .4, .7} in 3 + 2 + 1 of 9 pairs
    assert summary["pooled_oof_auroc"] == {"US": pytest.approx(6 / 9)}
    # against the DE labels of the same memes (no DE head): positives {.2, .6, .7} vs {.9, .4, .3} win 0 + 2 + 2 of 9
    assert summary["alignment"] == {"US": {"US": pytest.approx(6 / 9), "DE": pytest.approx(4 / 9)}}
    assert summary["selection"]["rule"] == "last" and summary["oof_samples"] == 6

    text = cv_markdown("x", [1, 0], [], summary)
    assert "Folds used: [0, 1]; out-of-fold samples: 6." in text and "Selection rule: **last**" in text
    # acc beside the majority-class rate; no selection split recorded a threshold: its column says so
    assert "| US | 0.700 ± 0.141 | 0.500 ± 0.000 | 0.600 ± 0.000 | 0.400 ± 0.000 | — | 0.667 |" in text
    assert "| head \\ labels | US | DE |" in text and "| US | 0.667† | 0.444 |" in text  # † best; * only for a test
    assert "*" not in text.split("Alignment")[1]


def test_macro_f1_at_the_selection_threshold_is_averaged_over_folds():
    def at_threshold(f1: float) -> dict:
        scores = {"val_threshold": 0.3, "macro_f1_at_val_threshold": f1, "acc_at_val_threshold": 0.5}
        return {"rule": "…", "heads": {"US": scores}, "mean": {k: v for k, v in scores.items() if k != "val_threshold"}}

    results = {0: _fold(0, "inner", 0.8, FOLD0, selection=0.7), 1: _fold(1, "inner", 0.6, FOLD1, selection=0.9)}
    results[0]["selection_threshold"], results[1]["selection_threshold"] = at_threshold(0.8), at_threshold(0.6)
    summary = summarise(results, pool_out_of_fold(results))
    metrics = summary["metrics"]
    assert metrics["cv/US/macro_f1_at_val_threshold_mean"] == pytest.approx(0.7)
    assert metrics["cv/US/macro_f1_at_val_threshold_std"] == pytest.approx(math.sqrt(0.02))
    assert "cv/US/val_threshold_mean" not in metrics  # a threshold is a choice, not a score
    assert "| 0.700 ± 0.141 | 0.667 |" in cv_markdown("x", [0, 1], [], summary)
    del results[1]["selection_threshold"]  # one fold without: no mean over the folds that have one
    assert "cv/US/macro_f1_at_val_threshold_mean" not in summarise(results, pool_out_of_fold(results))["metrics"]


def test_selection_scores_are_summarised_only_when_every_fold_has_them_and_shared_ids_are_listed():
    results = {0: _fold(0, "last", 0.8, FOLD0, selection=0.7), 1: _fold(1, "last", 0.6, {"a": (0.5, 1, 0), **FOLD1})}
    oof = pool_out_of_fold(results)
    assert oof.ids_in_two_folds == ["a"] and oof.samples == 6
    assert not any(k.startswith("cv_selection/") for k in summarise(results, oof)["metrics"])


def test_folds_without_a_cross_validation_rule_are_left_out_and_mixed_rules_average_nothing():
    runs = [(_fold(0, None, 0.8, FOLD0), "old"), (_fold(1, "dataset_val", 0.8, FOLD1), "dv"), (_fold(1, "last", 0.6, FOLD1), "ok")]
    kept, problems = check_rules(runs)
    assert [where for _, where in kept] == ["ok"]
    assert problems == [
        "2 fold result(s) name no cross-validation selection rule (written when the held-out fold also chose the checkpoint): "
        "left out (old, dv)"
    ]
    kept, problems = check_rules([(_fold(0, "last", 0.8, FOLD0), "a"), (_fold(1, "inner", 0.6, FOLD1), "b")])
    assert kept == [] and problems == ["folds were selected by different rules ['inner', 'last']: nothing averaged"]


def test_missing_and_duplicated_folds_are_described_and_only_single_folds_kept():
    def fold(k: int) -> dict:
        return {"fold": k, "num_folds": 3}

    kept, problems = check_folds([(fold(0), "a"), (fold(0), "b"), (fold(1), "c")])
    assert list(kept) == [1] and kept[1][1] == "c"
    assert problems == ["missing folds [2] of 3", "fold 0 appears 2 times (a, b); left out"]
    _, problems = check_folds([(fold(0), "a"), ({"fold": 1, "num_folds": 2}, "b")])
    assert problems[0] == "runs disagree on num_folds: [2, 3]"


def test_calibration_before_and_after_each_folds_temperature_is_averaged_over_folds():
    def calibrated(ece_before: float, ece_after: float, temperature: float) -> dict:
        before, after = {"ece": ece_before, "brier": 0.2, "log_loss": 0.6}, {"ece": ece_after, "brier": 0.1, "log_loss": 0.5}
        row = {"temperature": temperature, "before": before, "after": after}
        return {"rule": "temperature fitted …", "bins": "10 equal-width bins", "heads": {"US": row}, "mean": {"before": before, "after": after}}

    results = {0: _fold(0, "inner", 0.8, FOLD0), 1: _fold(1, "inner", 0.6, FOLD1)}
    results[0]["calibration"], results[1]["calibration"] = calibrated(0.3, 0.1, 2.0), calibrated(0.1, 0.05, 1.0)
    summary = summarise(results, pool_out_of_fold(results))
    metrics = summary["calibration"]["metrics"]
    assert metrics["cv/US/ece_before_mean"] == pytest.approx(0.2) and metrics["cv/US/ece_after_mean"] == pytest.approx(0.075)
    assert metrics["cv/US/temperature_mean"] == pytest.approx(1.5) and metrics["cv/US/temperature_std"] == pytest.approx(math.sqrt(0.5))
    assert "cv/mean/temperature_mean" not in metrics  # a temperature is per head
    text = cv_markdown("x", [0, 1], [], summary)
    assert "| US | 0.200 → 0.075 | 0.200 → 0.100 | 0.600 → 0.500 | 1.500 ± 0.707 | — / — |" in text
    assert "| mean | 0.200 → 0.075 | 0.200 → 0.100 | 0.600 → 0.500 | — |" in text and "each fold's own" in text
    del results[1]["calibration"]  # one fold without: no mean over the folds that have one, and no table
    summary = summarise(results, pool_out_of_fold(results))
    assert summary["calibration"] is None and "Calibration of the held-out folds" not in cv_markdown("x", [0, 1], [], summary)


def test_platt_and_isotonic_are_averaged_only_when_every_fold_has_them():
    def calibrated(platt_ece: float | None) -> dict:
        scores = {"ece": 0.1, "brier": 0.1, "log_loss": 0.5}
        row = {"temperature": 1.0, "before": scores, "after": scores}
        if platt_ece is not None:
            row |= {"compared": {"temperature": scores, "platt": {**scores, "ece": platt_ece}, "isotonic": {**scores, "ece": 0.04}}}
        return {"rule": "temperature fitted …", "bins": "10 equal-width bins", "heads": {"US": row}, "mean": {"before": scores, "after": scores}}

    results = {0: _fold(0, "inner", 0.8, FOLD0), 1: _fold(1, "inner", 0.6, FOLD1)}
    results[0]["calibration"], results[1]["calibration"] = calibrated(0.02), calibrated(0.06)
    summary = summarise(results, pool_out_of_fold(results))
    assert summary["calibration"]["metrics"]["cv/US/ece_platt_mean"] == pytest.approx(0.04)
    assert "| US | 0.100 → 0.100 | 0.100 → 0.100 | 0.500 → 0.500 | 1.000 ± 0.000 | 0.040 / 0.040 |" in cv_markdown("x", [0, 1], [], summary)
    results[1]["calibration"] = calibrated(None)  # an older fold file: no Platt mean over one fold
    summary = summarise(results, pool_out_of_fold(results))
    assert "cv/US/ece_platt_mean" not in summary["calibration"]["metrics"]
    assert "| 1.000 ± 0.000 | — / — |" in cv_markdown("x", [0, 1], [], summary)


def test_abstention_is_averaged_over_folds_only_when_every_fold_has_it():
    def abstained(aurc: float) -> dict:
        row = {"aurc": aurc, "aurc_random": 0.3, "aurc_oracle": 0.05, "risk_at_80_coverage": 0.25, "memes": 10}
        return {"score": "spread", "rule": "memes decided in order …", "heads": {"US": row}, "mean": {k: v for k, v in row.items() if k != "memes"}}

    results = {0: _fold(0, "inner", 0.8, FOLD0), 1: _fold(1, "inner", 0.6, FOLD1)}
    results[0]["abstention"], results[1]["abstention"] = abstained(0.2), abstained(0.4)
    summary = summarise(results, pool_out_of_fold(results))
    metrics = summary["abstention"]["metrics"]
    assert metrics["cv/US/aurc_mean"] == pytest.approx(0.3) and metrics["cv/US/aurc_std"] == pytest.approx(math.sqrt(0.02))
    text = cv_markdown("x", [0, 1], [], summary)
    assert "| US | 0.300 ± 0.141 | 0.300 ± 0.000 | 0.050 ± 0.000 |" in text and "each fold's own" in text
    del results[1]["abstention"]
    summary = summarise(results, pool_out_of_fold(results))
    assert summary["abstention"] is None and "Abstention on the held-out folds" not in cv_markdown("x", [0, 1], [], summary)


def test_the_policys_thresholds_and_held_out_rates_are_averaged_over_folds_with_unreachable_ones_counted():
    def chose(act: float | None, precision: float | None) -> dict:
        acting = (
            {"action": "act", "threshold": act, "reached": 0.9, "test": {"precision": precision, "recall": 0.5}}
            if act is not None
            else {"action": "act", "target": "precision", "goal": 0.9, "why": "no threshold reaches precision 0.9"}
        )
        review = {"action": "review", "threshold": 0.2, "reached": 0.96, "test": {"precision": 0.5, "recall": 1.0}}
        return {"name": "cautious", "targets": {"act": {"precision": 0.9}}, "rule": "per culture …", "heads": {"US": {"act": acting, "review": review}}}

    results = {0: _fold(0, "inner", 0.8, FOLD0), 1: _fold(1, "inner", 0.6, FOLD1), 2: _fold(2, "inner", 0.7, FOLD1)}
    results[0]["policy"], results[1]["policy"], results[2]["policy"] = chose(0.7, 1.0), chose(0.8, 0.5), chose(None, None)
    summary = summarise(results, pool_out_of_fold(results))
    metrics = summary["policy"]["metrics"]
    # act's threshold over the two folds that reached it: 0.75 ± 0.0707; its held-out precision 0.75 ± 0.354
    assert metrics["cv/US/act_threshold_mean"] == pytest.approx(0.75) and metrics["cv/US/act_threshold_std"] == pytest.approx(math.sqrt(0.005))
    assert metrics["cv/US/act_precision_mean"] == pytest.approx(0.75) and metrics["cv/US/act_unreachable_mean"] == pytest.approx(1 / 3)
    text = cv_markdown("x", [0, 1, 2], [], summary)
    assert "Policy **cautious** (act at precision ≥ 0.9) on the held-out folds" in text
    assert "| US | act | 0.750 ± 0.071 | 0.900 ± 0.000 | 0.750 ± 0.354 | 0.500 ± 0.000 | 1 of 3 | 0.500 ± 0.000 |" in text
    assert metrics["cv/US/positive_rate_mean"] == pytest.approx(0.5)  # the baseline: acting on every held-out meme
    assert "| US | review | 0.200 ± 0.000 | 0.960 ± 0.000 | 0.500 ± 0.000 | 1.000 ± 0.000 | 0 of 3 |" in text
    results[2]["policy"]["name"] = "strict"  # folds of two policies: nothing averaged across them
    assert summarise(results, pool_out_of_fold(results))["policy"] is None


def test_the_reports_reliability_bins_pool_each_folds_memes_through_that_folds_own_map():
    from sklearn.calibration import calibration_curve

    from crossmod.evaluation.calibration import with_temperature
    from crossmod.evaluation.cv_summary import oof_reliability

    results = {0: _fold(0, "inner", 0.8, FOLD0), 1: _fold(1, "inner", 0.6, FOLD1)}
    for fold, t in ((0, 2.0), (1, 0.5)):
        results[fold]["calibration"] = {"heads": {"US": {"temperature": t, "calibrator": {"method": "temperature", "temperature": t}}}}
    curves = oof_reliability(results)["US"]
    y = [FOLD0[i][1] for i in FOLD0] + [FOLD1[i][1] for i in FOLD1]
    after = [*with_temperature([FOLD0[i][0] for i in FOLD0], 2.0), *with_temperature([FOLD1[i][0] for i in FOLD1], 0.5)]
    observed, predicted = calibration_curve(y, after, n_bins=10)
    assert list(curves["each fold's own map"][0]) == pytest.approx(list(predicted)) and list(curves["each fold's own map"][1]) == pytest.approx(list(observed))
    del results[1]["calibration"]
    assert oof_reliability(results) == {}  # a fold without its map: no pooled curve made up

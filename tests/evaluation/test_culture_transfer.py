"""The culture-transfer table against hand-computed cells: accuracy with invalid answers, AUROC, fold mean ± sample std."""

from __future__ import annotations

import math

import pytest

from evaluation.culture_transfer import Answers, fold_scores, transfer_markdown, transfer_table


def test_fold_scores_count_invalid_answers_wrong_and_average_prompts():
    labels = {"a": 1, "b": 0, "c": 1, "d": 0}
    # prompt 1: a right, b right, c invalid (wrong), d wrong → 2/4; prompt 2: all right → 4/4
    first = Answers({"a": 0.9, "b": 0.2, "c": 0.6, "d": 0.7}, {"a": 1, "b": 0, "c": None, "d": 1})
    second = Answers({"a": 0.8, "b": 0.1, "c": 0.7, "d": 0.3}, {"a": 1, "b": 0, "c": 1, "d": 0})
    scores = fold_scores([first, second], labels)
    assert scores["acc"] == pytest.approx((0.5 + 1.0) / 2)
    # AUROC prompt 1: positives {0.9, 0.6} vs negatives {0.2, 0.7}: pairs won 0.9>0.2, 0.9>0.7, 0.6>0.2 → 3/4; prompt 2: 1
    assert scores["auroc"] == pytest.approx((0.75 + 1.0) / 2)


def test_missing_answers_are_an_error_not_a_smaller_denominator():
    with pytest.raises(ValueError, match="answers miss 1 labelled memes"):
        fold_scores([Answers({"a": 0.9}, {"a": 1})], {"a": 1, "b": 0})


def test_table_mean_and_sample_std_over_folds():
    labels = [{"US": {"x": 1, "y": 0}, "DE": {"x": 1, "y": 1}}, {"US": {"z": 0, "w": 1}, "DE": {"z": 0, "w": 0}}]
    fold0 = [Answers({"x": 0.9, "y": 0.1}, {"x": 1, "y": 0})]  # US 2/2, DE 1/2
    fold1 = [Answers({"z": 0.8, "w": 0.4}, {"z": 1, "w": 0})]  # US 0/2, DE 1/2
    table = transfer_table({"FT-US": {"US": [fold0, fold1], "DE": [fold0, fold1]}}, labels)
    us, de = table["FT-US"]["US"], table["FT-US"]["DE"]
    assert us["acc_mean"] == pytest.approx(0.5) and us["acc_std"] == pytest.approx(math.sqrt(0.5))  # values 1, 0
    assert de["acc_mean"] == pytest.approx(0.5) and de["acc_std"] == pytest.approx(0.0)
    assert us["auroc_mean"] == pytest.approx(0.5)  # 1.0 and 0.0
    assert math.isnan(de["auroc_mean"]) and math.isnan(de["auroc_std"])  # one class in each fold: undefined, not 0
    text = transfer_markdown(table, "acc", {"FT-US": "US"})
    assert "**<u>50.0 ± 70.7</u>**" in text and "| FT-US |" in text and "—" in transfer_markdown(table, "auroc", {})


def test_rows_tied_at_a_column_best_are_all_bold():
    labels = [{"US": {"x": 1, "y": 0}}, {"US": {"z": 1, "w": 0}}]
    right = [[Answers({"x": 0.9, "y": 0.1}, {"x": 1, "y": 0})], [Answers({"z": 0.9, "w": 0.1}, {"z": 1, "w": 0})]]
    wrong = [[Answers({"x": 0.1, "y": 0.9}, {"x": 0, "y": 1})], [Answers({"z": 0.1, "w": 0.9}, {"z": 0, "w": 1})]]
    table = transfer_table({"A": {"US": right}, "B": {"US": right}, "C": {"US": wrong}}, labels)
    rows = transfer_markdown(table, "acc", {}).splitlines()[2:]
    assert [("**" in r) for r in rows] == [True, True, False]

"""The culture-transfer table against hand-computed cells: accuracy with invalid answers, AUROC, fold mean ± sample std."""

from __future__ import annotations

import math

import pytest

from crossmod.evaluation.culture_transfer import (
    Answers,
    answers_by_fold,
    decided,
    fold_scores,
    fold_transfer,
    transfer_document,
    transfer_markdown,
    transfer_table,
)


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
    assert "<u>50.0 ± 70.7</u>†" in text and "| FT-US |" in text and "—" in transfer_markdown(table, "auroc", {})


def test_rows_tied_at_a_column_best_are_all_marked_best():
    labels = [{"US": {"x": 1, "y": 0}}, {"US": {"z": 1, "w": 0}}]
    right = [[Answers({"x": 0.9, "y": 0.1}, {"x": 1, "y": 0})], [Answers({"z": 0.9, "w": 0.1}, {"z": 1, "w": 0})]]
    wrong = [[Answers({"x": 0.1, "y": 0.9}, {"x": 0, "y": 1})], [Answers({"z": 0.1, "w": 0.9}, {"z": 0, "w": 1})]]
    table = transfer_table({"A": {"US": right}, "B": {"US": right}, "C": {"US": wrong}}, labels)
    rows = transfer_markdown(table, "acc", {}).splitlines()[2:]
    assert [("†" in r) for r in rows] == [True, True, False]
    assert "*" not in transfer_markdown(table, "acc", {})  # `*` means a passed significance test, and none ran


def test_zero_shot_answers_are_split_by_the_held_out_folds_prompt_by_prompt():
    by_prompt = {"1": Answers({"m1": 0.3}, {"m1": 0}), "0": Answers({"m1": 0.8, "m2": 0.4, "m3": 0.1}, {"m1": 1, "m2": None, "m3": 0})}
    folds = answers_by_fold(by_prompt, [{"m1", "m2"}, {"m3"}])
    assert [len(f) for f in folds] == [2, 2]  # prompts in sorted order: "0" then "1"
    assert folds[0][0].decision == {"m1": 1, "m2": None} and folds[1][0].decision == {"m3": 0}
    assert folds[0][1].probability == {"m1": 0.3} and folds[1][1].probability == {}
    assert decided({"a": 0.5, "b": 0.49}).decision == {"a": 1, "b": 0}


def _fold_result(head: str, probs: dict[str, float], labels: dict[str, dict[str, int]]) -> dict:
    ids = list(probs)
    oof = {"id": ids, "head": [head] * len(ids), "probability": [probs[i] for i in ids], "label": [labels[i][head] for i in ids]}
    return {"oof_predictions": oof, "held_out_labels": labels}


# held-out labels of two folds (US, DE per meme)
LABELS = [{"a": {"US": 1, "DE": 0}, "b": {"US": 0, "DE": 0}}, {"c": {"US": 1, "DE": 1}, "d": {"US": 0, "DE": 1}}]


def test_fold_results_become_table_11_rows_with_their_own_culture_on_the_diagonal():
    us = {0: _fold_result("US", {"a": 0.9, "b": 0.2}, LABELS[0]), 1: _fold_result("US", {"c": 0.6, "d": 0.7}, LABELS[1])}
    de = {0: _fold_result("DE", {"a": 0.1, "b": 0.3}, LABELS[0]), 1: _fold_result("DE", {"c": 0.8, "d": 0.9}, LABELS[1])}
    shifted = {0: _fold_result("DE", {"c": 0.5, "d": 0.5}, LABELS[1]), 1: _fold_result("DE", {"a": 0.5, "b": 0.5}, LABELS[0])}
    zeroshot = {"0": Answers({i: 0.5 for i in "abcd"}, {"a": 1, "b": 1, "c": None, "d": 1})}
    transfer = fold_transfer({"x-FT-DE": de, "x-FT-US": us, "other": shifted}, zeroshot)
    assert list(transfer["table"]) == ["zero-shot", "FT-US", "FT-DE"] and transfer["diagonal"] == {"FT-US": "US", "FT-DE": "DE"}
    assert transfer["folds"] == [0, 1] and transfer["problems"] == [
        "other: its folds hold out other memes than x-FT-DE's; left out of the transfer table"
    ]
    # FT-US judged by DE labels: fold 0 decides a=1 b=0 against 0 0 → 1/2; fold 1 decides c=1 d=1 against 1 1 → 2/2
    cell = transfer["table"]["FT-US"]["DE"]
    assert cell["acc_mean"] == pytest.approx(0.75) and cell["acc_std"] == pytest.approx(math.sqrt(0.125))
    assert transfer["table"]["FT-US"]["US"]["acc_mean"] == pytest.approx(0.75)  # 2/2, then c=1 d=1 against 1 0 → 1/2
    # zero-shot by US labels: fold 0 a right, b wrong → 1/2; fold 1 c unparseable (wrong), d wrong → 0
    assert transfer["table"]["zero-shot"]["US"]["acc_mean"] == pytest.approx(0.25)
    text = transfer_document(transfer)
    assert "mean ± sample std over 2 held-out folds; decisions at P(hate) ≥ 0.5" in text
    assert "- **problem**: other: its folds hold out" in text and "## AUROC" in text
    # majority class, by hand: US folds 1 0 | 1 0 → 50 %, 50 %; DE folds 0 0 | 1 1 → 100 %, 100 %
    assert transfer["majority"]["US"]["mean"] == pytest.approx(0.5) and transfer["majority"]["DE"]["mean"] == pytest.approx(1.0)
    assert "| *majority class* | 50.0 ± 0.0 | 100.0 ± 0.0 |" in text
    # no fold recorded a selection threshold: no macro-F1 for the fine-tuned rows (never one at 0.5 under that name)
    assert math.isnan(transfer["table"]["FT-US"]["US"]["macro_f1_mean"])
    # zero-shot's own answers by US labels: fold 0 a=1 b=1 vs 1 0 → F1(1)=2/3, F1(0)=0 → 1/3; fold 1 c invalid, d=1 vs
    # 1 0 → F1(1)=0 (one false positive, one miss), F1(0)=0 → 0
    assert transfer["table"]["zero-shot"]["US"]["macro_f1_mean"] == pytest.approx(1 / 6)


def test_fine_tuned_rows_decide_at_the_threshold_their_selection_split_chose():
    def chose(result: dict, threshold: float) -> dict:
        return {**result, "selection_threshold": {"heads": {"US": {"val_threshold": threshold}}}}

    us = {
        0: chose(_fold_result("US", {"a": 0.9, "b": 0.2}, LABELS[0]), 0.95),
        1: chose(_fold_result("US", {"c": 0.6, "d": 0.7}, LABELS[1]), 0.65),
    }
    cell = fold_transfer({"x-FT-US": us})["table"]["FT-US"]
    # fold 0 at .95: a=0 b=0 vs US 1 0 → F1(0)=2/3, F1(1)=0 → 1/3; fold 1 at .65: c=0 d=1 vs US 1 0 → 0
    assert cell["US"]["macro_f1_mean"] == pytest.approx(1 / 6)
    # the same decisions judged by DE labels (0 0 | 1 1): fold 0 → F1(0)=1, F1(1)=0 (no DE positives: zero_division)
    # → 1/2; fold 1 c=0 d=1 vs 1 1 → F1(1)=2/3, F1(0)=0 → 1/3
    assert cell["DE"]["macro_f1_mean"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert cell["US"]["acc_mean"] == pytest.approx(0.75)  # accuracy stays at 0.5, as the study reports it


def test_nothing_to_compare_gives_no_table():
    assert fold_transfer({}) is None
    assert fold_transfer({"x": {0: {"oof_predictions": {"id": [], "head": [], "probability": [], "label": []}}}}) is None


def test_table_11_carries_each_cultures_linear_baselines_by_hand():
    """Each culture column's TF-IDF row is the mean ± std over folds of the baseline its own runs fitted on that
    culture (fold results' `baselines`), judged by its labels; a culture whose runs measured none shows —."""
    us = {0: _fold_result("US", {"a": 0.9, "b": 0.2}, LABELS[0]), 1: _fold_result("US", {"c": 0.6, "d": 0.7}, LABELS[1])}
    de = {0: _fold_result("DE", {"a": 0.1, "b": 0.3}, LABELS[0]), 1: _fold_result("DE", {"c": 0.8, "d": 0.9}, LABELS[1])}
    for fold, (auroc, acc) in {0: (0.6, 0.5), 1: (0.8, 1.0)}.items():
        us[fold]["baselines"] = {"tfidf": {"name": "t", "rule": "r", "test": {"US": {"auroc": auroc, "acc": acc}}}}
    transfer = fold_transfer({"x-FT-DE": de, "x-FT-US": us})
    cell = transfer["baselines"]["tfidf"]["US"]
    assert cell["auroc_mean"] == pytest.approx(0.7) and cell["auroc_std"] == pytest.approx(math.sqrt(0.02))
    assert "DE" not in transfer["baselines"]["tfidf"]
    text = transfer_document(transfer)
    assert "| *TF-IDF+LR on the column's culture* | 0.700 ± 0.141 | — |" in text
    assert "| *TF-IDF+LR on the column's culture* | 75.0 ± 35.4 | — |" in text


def test_table_11_cells_carry_calibration_before_and_after_the_runs_own_map():
    """Each FT row's cells: Brier and log-loss of its probabilities against the column's labels, before and after the
    temperature its own fold run fitted on its selection split (scikit-learn on the same numbers)."""
    from sklearn.metrics import brier_score_loss, log_loss

    from crossmod.evaluation.calibration import with_temperature

    temperatures = {0: 2.0, 1: 0.5}
    us = {0: _fold_result("US", {"a": 0.9, "b": 0.2}, LABELS[0]), 1: _fold_result("US", {"c": 0.6, "d": 0.7}, LABELS[1])}
    for fold, t in temperatures.items():
        us[fold]["calibration"] = {"heads": {"US": {"temperature": t, "calibrator": {"method": "temperature", "temperature": t}}}}
    de = {0: _fold_result("DE", {"a": 0.1, "b": 0.3}, LABELS[0]), 1: _fold_result("DE", {"c": 0.8, "d": 0.9}, LABELS[1])}
    transfer = fold_transfer({"x-FT-US": us, "x-FT-DE": de})
    cell = transfer["table"]["FT-US"]["DE"]
    probs = {0: [0.9, 0.2], 1: [0.6, 0.7]}
    de_labels = {0: [0, 0], 1: [1, 1]}
    before = [brier_score_loss(de_labels[k], probs[k]) for k in (0, 1)]
    after = [brier_score_loss(de_labels[k], with_temperature(probs[k], temperatures[k])) for k in (0, 1)]
    assert cell["brier_before_mean"] == pytest.approx(sum(before) / 2) and cell["brier_after_mean"] == pytest.approx(sum(after) / 2)
    lost = [log_loss(de_labels[k], with_temperature(probs[k], temperatures[k]), labels=[0, 1]) for k in (0, 1)]
    assert cell["log_loss_after_mean"] == pytest.approx(sum(lost) / 2) and cell["log_loss_after_n"] == 2
    assert "brier_after_mean" not in transfer["table"]["FT-DE"]["US"]  # its runs fitted no map: nothing made up
    text = transfer_document(transfer)
    assert "## Calibration" in text and "### Brier score" in text
    row = next(line for line in text.split("### Brier score")[1].splitlines() if line.startswith("| FT-US |"))
    assert f"{sum(before) / 2:.3f}" in row.split("|")[3] and "→" in row and "| FT-DE |" not in text.split("## Calibration")[1]


def test_table_11_cells_carry_the_policys_held_out_rates_at_each_folds_own_thresholds():
    """The policy thresholds a fold run chose on its selection split, applied to its held-out memes and judged by each
    column's labels, by hand; an unreachable action is never taken and shows —."""
    us = {0: _fold_result("US", {"a": 0.9, "b": 0.2}, LABELS[0]), 1: _fold_result("US", {"c": 0.6, "d": 0.7}, LABELS[1])}
    cuts = {0: {"act": 0.5, "review": 0.1}, 1: {"act": 0.65, "review": 0.55}}
    for fold, actions in cuts.items():
        heads = {"US": {a: {"action": a, "threshold": t} for a, t in actions.items()}}
        us[fold]["policy"] = {"name": "cautious", "heads": heads}
    us[1]["policy"]["heads"]["US"]["act"] = {"action": "act", "why": "no threshold reaches precision 0.99"}
    transfer = fold_transfer({"x-FT-US": us})
    assert transfer["policy"] == ["cautious"]
    us_cell, de_cell = transfer["table"]["FT-US"]["US"], transfer["table"]["FT-US"]["DE"]
    # act: fold 0 at .5 flags a (US 1) → precision 1, recall 1; fold 1 unreachable → undefined: mean over one fold
    assert us_cell["act_precision_mean"] == 1.0 and us_cell["act_precision_n"] == 1 and math.isnan(us_cell["act_precision_std"])
    # by DE labels: fold 0 flags a (DE 0) → precision 0, DE has no positive → recall undefined
    assert de_cell["act_precision_mean"] == 0.0 and math.isnan(de_cell["act_recall_mean"])
    # review: fold 0 at .1 flags a, b → US precision 1/2, recall 1; fold 1 at .55 flags c, d → US 1/2, recall 1
    assert us_cell["review_precision_mean"] == pytest.approx(0.5) and us_cell["review_recall_mean"] == 1.0
    assert de_cell["review_precision_mean"] == pytest.approx((0 + 1) / 2) and de_cell["review_recall_mean"] == 1.0
    text = transfer_document(transfer)
    assert "## Policy (cautious): held-out precision / recall at its thresholds" in text
    review = text.split("### review")[1]
    assert "| FT-US | 50.0 ± 0.0 / 100.0 ± 0.0 | 50.0 ± 70.7 / 100.0 |" in review
    # the baseline under it: the held-out positive rate, what acting on every meme would reach as precision
    assert "| *positive rate (precision of acting on every meme)* | 50.0 ± 0.0 | 50.0 ± 70.7 |" in review

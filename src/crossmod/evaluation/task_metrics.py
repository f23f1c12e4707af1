"""The studies' task metrics beyond AUROC: ToxicTags macro F1 per stage, MemeBridge sentiment/emotion and PS."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import f1_score

# MemeBridge Performance Score weights (they reproduce the study's table).
PS_WEIGHTS = {"sim_orig": 1.0, "sim_fmt": 1.0, "acc_mcq": 0.6316, "acc_sent": 0.6316, "acc_emo": 1.7368}


def toxictags_stages(
    toxic_true: np.ndarray, toxic_prob: np.ndarray, type_true: np.ndarray, type_prob: np.ndarray, threshold: float = 0.5
) -> dict[str, float]:
    """Stage I: macro F1 toxic vs normal; stage II: macro F1 over the four-way hateful/dangerous/offensive/normal
    question on memes with a type label (-1 = none: undecided memes, which the study leaves out of stage II)."""
    stage1 = f1_score(toxic_true, (toxic_prob >= threshold).astype(int), average="macro", labels=[0, 1], zero_division=0)
    typed = type_true >= 0
    # classes present in gold or predictions (sklearn's default): a class nobody has or predicts is not a zero
    stage2 = f1_score(type_true[typed], type_prob[typed].argmax(axis=1), average="macro", zero_division=0) if typed.any() else float("nan")
    return {"stage1_macro_f1": float(stage1), "stage2_macro_f1": float(stage2), "stage2_items": int(typed.sum())}


def subset_rule_correct(gold: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Per item (rows of multi-hot sets): whether its gold label set ⊆ the predicted set."""
    gold, predicted = gold.astype(bool), predicted.astype(bool)
    return np.all(~gold | predicted, axis=1)


def subset_rule_accuracy(gold: np.ndarray, predicted: np.ndarray) -> float:
    """MemeBridge emotion accuracy: an item is correct when its gold label set ⊆ the predicted set."""
    return float(np.mean(subset_rule_correct(gold, predicted)))


def ps_terms(
    acc_sent: float | None, acc_emo: float | None, acc_mcq: float | None = None, sim_orig: float | None = None, sim_fmt: float | None = None
) -> dict[str, float | None]:
    """Each term of PS as it enters the sum (weight × value, `PS_WEIGHTS`); None where the value was not measured."""
    values = {"sim_orig": sim_orig, "sim_fmt": sim_fmt, "acc_mcq": acc_mcq, "acc_sent": acc_sent, "acc_emo": acc_emo}
    return {k: None if v is None else PS_WEIGHTS[k] * float(v) for k, v in values.items()}


def performance_score(
    acc_sent: float, acc_emo: float, acc_mcq: float | None = None, sim_orig: float | None = None, sim_fmt: float | None = None
) -> dict[str, float | None]:
    """PS = Sim_orig + Sim_fmt + 0.6316·Acc_MCQ + 0.6316·Acc_Sent + 1.7368·Acc_Emo. A classifier measures
    the sentiment and emotion terms; the total needs the generation terms, else it is None."""
    terms = ps_terms(acc_sent, acc_emo, acc_mcq, sim_orig, sim_fmt)
    classifier_part = terms["acc_sent"] + terms["acc_emo"]
    total = None if any(v is None for v in terms.values()) else sum(terms.values())
    return {"ps": total, "ps_classifier_terms": classifier_part}

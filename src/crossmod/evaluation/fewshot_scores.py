"""ToxicTags few-shot answers read as class indices, and macro F1 per stage (the ToxicTags study, docs/datasets.md).

Stage I asks toxic or normal, stage II hateful, dangerous, offensive or normal (undecided memes are not
asked). A generation (greedy, up to 30 tokens) is read as the one class it names:
1. words that name a class in other terms are read as that class first and masked ("non-toxic",
   "not toxic" → normal; "hate speech" → hateful), then negated class words ("not hateful") are masked,
   so "Normal, it is not hateful" names normal only;
2. the class words are searched as whole words (case-insensitive);
3. exactly one class named → that class; none or several ("hateful or offensive") → None: invalid,
   counted, and scored as wrong (a prediction of no class: a miss for its gold class, a false
   positive for none).
Macro F1 is scikit-learn's over the classes present in the gold labels or the valid predictions (a class
nobody has or predicts is not a zero, as `crossmod.evaluation.task_metrics.toxictags_stages` counts it).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.metrics import f1_score

# class names per stage, in the order of the heads' label indices (`toxic`: 0 normal, 1 toxic; `toxic_type`)
STAGE_CLASSES: dict[int, tuple[str, ...]] = {1: ("normal", "toxic"), 2: ("hateful", "dangerous", "offensive", "normal")}
STAGE_HEADS = {1: "toxic", 2: "toxic_type"}
STAGE_NAMES = {1: "Stage I", 2: "Stage II"}
# other words for a class, read before the class words (and masked, so "non-toxic" is not read as toxic)
ALIASES: dict[int, dict[str, str]] = {
    1: {r"non[\s\-_]*toxic": "normal", r"not(?:\s+\w+){0,2}?\s+toxic": "normal", r"toxicity": "toxic"},
    2: {r"hate(?:\s+speech)?": "hateful", r"danger": "dangerous", r"offense|offence|offending": "offensive"},
}
NEGATION = r"(?:non[\s\-_]*|not(?:\s+\w+){0,2}?\s+)(?:WORD)"
INVALID = -1


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    text = re.sub(r"n't\b", " not", text).replace("*", "").replace("`", "")
    return re.sub(r"\s+", " ", text).strip()


def _spans(pattern: str, text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(rf"(?<!\w)(?:{pattern})(?!\w)", text)]


def _mask(text: str, spans: list[tuple[int, int]]) -> str:
    for start, end in spans:
        text = text[:start] + " " * (end - start) + text[end:]
    return text


def parse_stage_answer(text: str, stage: int) -> int | None:
    """The class index the generation names for `stage` (1 or 2), None when it names none or several."""
    classes = STAGE_CLASSES[stage]
    text = _normalise(text)
    named: set[str] = set()
    for pattern, label in ALIASES[stage].items():
        spans = _spans(pattern, text)
        if spans and not any(_spans(NEGATION.replace("WORD", pattern), text)):
            named.add(label)
        text = _mask(text, spans)
    for label in classes:
        text = _mask(text, _spans(NEGATION.replace("WORD", re.escape(label)), text))
        if _spans(re.escape(label), text):
            named.add(label)
    return classes.index(named.pop()) if len(named) == 1 else None


def stage_scores(gold: Sequence[int], predicted: Sequence[int | None]) -> dict[str, Any]:
    """Macro F1 (scikit-learn), accuracy, invalid count and item count of one stage's answers."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold labels but {len(predicted)} predictions")
    if not gold:
        return {"macro_f1": float("nan"), "accuracy": float("nan"), "invalid": 0, "items": 0}
    y_true = np.asarray(gold, dtype=np.int64)
    y_pred = np.asarray([INVALID if p is None else p for p in predicted], dtype=np.int64)
    present = sorted(set(y_true.tolist()) | (set(y_pred.tolist()) - {INVALID}))
    return {
        "macro_f1": float(f1_score(y_true, y_pred, labels=present, average="macro", zero_division=0)),
        "accuracy": float(np.mean(y_true == y_pred)),
        "invalid": int(np.sum(y_pred == INVALID)),
        "items": len(y_true),
    }


def results_markdown(results: Sequence[Mapping[str, Any]], study: Mapping[str, float] | None = None) -> str:
    """Strategies side by side: one row per strategy, one column per stage × shots (macro F1 %, invalid answers)."""
    columns = sorted({(r["stage"], r["shots"]) for r in results})
    strategies = list(dict.fromkeys(r["strategy"] for r in results))
    cell = {(r["strategy"], r["stage"], r["shots"]): r for r in results}
    header = ["exemplars", *(f"{STAGE_NAMES[s]} {k}-shot" for s, k in columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for strategy in strategies:
        cells = []
        for stage, shots in columns:
            r = cell.get((strategy, stage, shots))
            if r is None:
                cells.append("")
                continue
            alpha = f", α = {r['alpha']:g}" if r.get("alpha") is not None else ""
            cells.append(f"{100 * r['macro_f1']:.2f} ({r['invalid']}/{r['items']} invalid{alpha})")
        lines.append("| " + " | ".join([strategy, *cells]) + " |")
    if study:
        lines += ["", "Study (macro F1 %): " + ", ".join(f"{k} {v}" for k, v in study.items())]
    return "\n".join(lines)

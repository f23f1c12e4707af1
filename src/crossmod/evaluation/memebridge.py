"""MemeBridge prompting scores as pure functions: answers parsed, task accuracies, explanation similarity, PS.

Protocol (the MemeBridge study, docs/datasets.md): a model answers a three-option MCQ (the correct explanation and two
misreadings, letters A/B/C), names the meme's sentiment (3 classes) and emotions (multi-label, scored by
the subset rule: correct when the gold set ⊆ the predicted set), and writes an explanation, scored by the
cosine similarity of its sentence embedding to the original explanation's (Sim_orig) and to the
formatted reference's (Sim_fmt). PS = Sim_orig + Sim_fmt + 0.6316·Acc_MCQ + 0.6316·Acc_Sent +
1.7368·Acc_Emo (`crossmod.evaluation.task_metrics`). An answer that cannot be read is invalid and counts as wrong.

Parsing, and why:
- MCQ: one option letter, by the Multi3Hate parser's letter rules (`crossmod.evaluation.answers.chosen_option`: a
  letter stands alone and is used as an answer, so the article in "A meme about …" is no answer; two
  different letters are no answer). The option texts are not matched.
- Sentiment: exactly one of the label words (negated mentions such as "not negative" set aside first);
  none or several is invalid.
- Emotions: every label word named (and its noun: sarcasm, humor/humour, offense, motivation), negated
  mentions set aside; "none" / "no emotion" alone is the empty set; an answer naming neither is invalid.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from crossmod.data.sources.memebridge import EMOTIONS, SENTIMENTS
from crossmod.evaluation.answers import chosen_option
from crossmod.evaluation.task_metrics import PS_WEIGHTS, performance_score, ps_terms, subset_rule_correct

TASKS = ("mcq", "sentiment", "emotion", "explanation")
MCQ_LETTERS = ("A", "B", "C")

_NEGATION = r"(?:not|no|non|never|neither|nor|without)(?:[\s\-]+\w+){0,2}?[\s\-]+"
_EMOTION_WORDS = {
    "sarcastic": r"sarcas(?:tic|tically|m)",
    "humorous": r"humou?r(?:ous|ously)?",
    "offensive": r"offen(?:sive|se|ce)",
    "motivational": r"motivat(?:ional|ing|ion)",
}
_NO_EMOTION = re.compile(r"\b(?:none|no emotions?|no particular emotions?|nothing)\b")


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    return re.sub(r"n't\b", " not", text).replace("*", "")


def _mentions(text: str, patterns: dict[str, str]) -> list[str]:
    """The labels whose word the text names outside a negation ("not negative", "non-offensive")."""
    masked = text
    for pattern in patterns.values():
        masked = re.sub(rf"\b{_NEGATION}{pattern}\b", lambda m: " " * len(m.group()), masked)
    return [label for label, pattern in patterns.items() if re.search(rf"\b{pattern}\b", masked)]


def parse_mcq(text: str, letters: tuple[str, ...] = MCQ_LETTERS) -> str | None:
    """The option letter answered, None when invalid."""
    return chosen_option(text, letters)


def parse_sentiment(text: str) -> str | None:
    """One of `SENTIMENTS`, None when the answer names none or several."""
    named = _mentions(_normalise(text), {label: re.escape(label) for label in SENTIMENTS})
    return named[0] if len(named) == 1 else None


def parse_emotions(text: str) -> frozenset[str] | None:
    """The set of `EMOTIONS` named (possibly empty: "none"), None when the answer names neither labels nor none."""
    normalised = _normalise(text)
    named = frozenset(_mentions(normalised, _EMOTION_WORDS))
    if named:
        return named
    return frozenset() if _NO_EMOTION.search(normalised) else None


@dataclass(frozen=True)
class TaskScore:
    """One task's items: the parsed answers (None = invalid) and whether each is correct."""

    predictions: list[Any]
    correct: np.ndarray

    @property
    def items(self) -> int:
        return len(self.predictions)

    @property
    def invalid(self) -> int:
        return sum(p is None for p in self.predictions)

    @property
    def accuracy(self) -> float | None:
        return float(np.mean(self.correct)) if self.items else None

    def as_dict(self) -> dict[str, Any]:
        return {"items": self.items, "correct": int(np.sum(self.correct)), "invalid": self.invalid, "accuracy": self.accuracy}


def score_choices(gold: Sequence[str], generations: Sequence[str], parse: Callable[[str], str | None]) -> TaskScore:
    """MCQ or sentiment: an item is correct when its parsed answer equals the gold one (invalid: wrong)."""
    if len(gold) != len(generations):
        raise ValueError(f"{len(gold)} gold answers for {len(generations)} generations")
    predictions = [parse(text) for text in generations]
    return TaskScore(predictions, np.array([p is not None and p == g for p, g in zip(predictions, gold)], dtype=bool))


def emotion_vector(labels: frozenset[str] | set[str]) -> np.ndarray:
    """Multi-hot over `EMOTIONS` (the dataset head's order)."""
    return np.array([e in labels for e in EMOTIONS], dtype=bool)


def score_emotions(gold: np.ndarray, generations: Sequence[str]) -> TaskScore:
    """Subset rule on the valid answers (`task_metrics.subset_rule_correct`); an invalid answer is wrong."""
    gold = np.asarray(gold, dtype=bool).reshape(len(generations), len(EMOTIONS))
    predictions = [parse_emotions(text) for text in generations]
    predicted = np.stack([emotion_vector(p or frozenset()) for p in predictions]) if predictions else gold.copy()
    valid = np.array([p is not None for p in predictions], dtype=bool)
    return TaskScore(predictions, valid & subset_rule_correct(gold, predicted))


def row_cosines(generated: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Cosine similarity of each generated embedding with its reference (row i with row i)."""
    generated, reference = np.asarray(generated, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    if generated.shape != reference.shape or generated.ndim != 2:
        raise ValueError(f"embeddings must be two matrices of one shape, got {generated.shape} and {reference.shape}")
    norms = np.linalg.norm(generated, axis=1) * np.linalg.norm(reference, axis=1)
    return np.einsum("ij,ij->i", generated, reference) / np.where(norms == 0, np.inf, norms)


def similarity(generated: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    """Mean cosine over the memes that have the reference (Sim_orig or Sim_fmt), None without any."""
    cosines = row_cosines(generated, reference) if len(generated) else np.empty(0)
    return {"items": int(len(cosines)), "mean": float(cosines.mean()) if len(cosines) else None}


def summarise(
    scores: dict[str, TaskScore], explanation: dict[str, int], sim_orig: dict[str, Any], sim_fmt: dict[str, Any]
) -> dict[str, Any]:
    """Every task's counts and accuracy, both similarities, and PS with each of its terms. `explanation`:
    `items` (explanations written) and `invalid` (empty ones: embedded and scored as the empty text)."""
    acc = {task: scores[task].accuracy if task in scores else None for task in ("mcq", "sentiment", "emotion")}
    values = {
        "sim_orig": sim_orig["mean"],
        "sim_fmt": sim_fmt["mean"],
        "acc_mcq": acc["mcq"],
        "acc_sent": acc["sentiment"],
        "acc_emo": acc["emotion"],
    }
    missing = [name for name, value in values.items() if value is None]
    total = None
    if acc["sentiment"] is not None and acc["emotion"] is not None:
        total = performance_score(acc["sentiment"], acc["emotion"], acc["mcq"], sim_orig["mean"], sim_fmt["mean"])["ps"]
    return {
        "tasks": {**{task: score.as_dict() for task, score in scores.items()}, "explanation": dict(explanation)},
        "sim_orig": sim_orig,
        "sim_fmt": sim_fmt,
        "ps": {
            "value": total,
            "values": values,
            "weights": dict(PS_WEIGHTS),
            "terms": ps_terms(values["acc_sent"], values["acc_emo"], values["acc_mcq"], values["sim_orig"], values["sim_fmt"]),
            "missing": missing,  # terms without a measurement (no annotated meme): PS is then None
        },
    }


def _number(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(summary: dict[str, Any]) -> str:
    """The summary as one table: each PS term's value, weight and weighted term, with item and invalid counts."""
    ps, tasks = summary["ps"], summary["tasks"]
    counts = {
        "sim_orig": (summary["sim_orig"]["items"], tasks.get("explanation", {}).get("invalid", 0)),
        "sim_fmt": (summary["sim_fmt"]["items"], tasks.get("explanation", {}).get("invalid", 0)),
        "acc_mcq": (tasks.get("mcq", {}).get("items", 0), tasks.get("mcq", {}).get("invalid", 0)),
        "acc_sent": (tasks.get("sentiment", {}).get("items", 0), tasks.get("sentiment", {}).get("invalid", 0)),
        "acc_emo": (tasks.get("emotion", {}).get("items", 0), tasks.get("emotion", {}).get("invalid", 0)),
    }
    lines = [
        f"MemeBridge prompting: condition {summary.get('condition')}, model {summary.get('model')}",
        "",
        "| term | value | weight | weighted | items | invalid |",
        "|---|---|---|---|---|---|",
    ]
    for name, value in ps["values"].items():
        items, invalid = counts[name]
        lines.append(f"| {name} | {_number(value)} | {ps['weights'][name]} | {_number(ps['terms'][name])} | {items} | {invalid} |")
    lines.append(f"| **PS** | **{_number(ps['value'])}** | | | | |")
    if ps["missing"]:
        lines += ["", f"PS is not defined: no annotated meme for {', '.join(ps['missing'])}."]
    return "\n".join(lines)

"""MemeBridge: U.S. memes with sentiment (3 classes), emotions (multi-label) and cultural context.

crossmod's documented layout (docs/datasets.md): `memebridge.jsonl` beside `images/`, one line per
meme: `{"id", "image": "images/x.jpg", "text", "sentiment": "positive|neutral|negative",
"emotions": [subset of sarcastic, humorous, offensive, motivational], "knowledge_type":
"cultural|general", "topic", "split": "train|val|test"}`; any further fields (explanation,
misunderstanding, mcq, significance …) are kept in meta. A null sentiment or emotions list means
"not annotated" (the head is masked); an empty emotions list is a real annotation (no emotion).
The fields the prompting protocol (src/crossmod/prompting/memebridge.py) reads are checked here: `explanation` (the
original explanation) and `explanation_formatted` (the formatted reference) are strings, and `mcq` is
`{"correct", "us_misreading", "generated_misreading"}`, each a non-empty string (the three options).
Version 2 checks them (version 1 kept them unchecked; its shards are not reused).
"""

from __future__ import annotations

from typing import Any

from crossmod.data.sample import Label
from crossmod.data.sources.jsonl_memes import Invalid, JsonlMemeSource, string_list, text_field

SENTIMENTS = ["negative", "neutral", "positive"]
EMOTIONS = ["sarcastic", "humorous", "offensive", "motivational"]
KNOWLEDGE_TYPES = ("cultural", "general")
MCQ_OPTIONS = ("correct", "us_misreading", "generated_misreading")  # the correct explanation and the two misreadings
EXPLANATIONS = ("explanation", "explanation_formatted")  # the original explanation, the formatted reference
RESERVED = {"id", "image", "text", "sentiment", "emotions", "knowledge_type", "topic", "split", "lang"}


class MemeBridgeSource(JsonlMemeSource):
    """Converts the documented MemeBridge layout into sentiment and emotion heads."""

    name = "memebridge"
    version = 2
    file = "memebridge.jsonl"
    heads = {
        "sentiment": {"kind": "multiclass", "classes": SENTIMENTS},
        "emotion": {"kind": "multilabel", "classes": EMOTIONS},
    }

    def convert(self, item: dict[str, Any]) -> tuple[str, dict[str, Label], dict[str, Any]]:
        sentiment = item.get("sentiment")
        if sentiment is not None and sentiment not in SENTIMENTS:
            raise Invalid(f"sentiment {sentiment!r} is not one of {SENTIMENTS}")
        emotions = None if item.get("emotions") is None else string_list(item, "emotions")
        unknown = sorted(set(emotions or []) - set(EMOTIONS))
        if unknown:
            raise Invalid(f"emotions {unknown} are not in {EMOTIONS}")
        knowledge = item.get("knowledge_type")
        if knowledge is not None and knowledge not in KNOWLEDGE_TYPES:
            raise Invalid(f"knowledge_type {knowledge!r} is not one of {list(KNOWLEDGE_TYPES)}")
        for key in EXPLANATIONS:
            text_field(item, key)  # a string when present
        check_mcq(item.get("mcq"))
        labels: dict[str, Label] = {
            "sentiment": None if sentiment is None else SENTIMENTS.index(sentiment),
            "emotion": None if emotions is None else [int(e in emotions) for e in EMOTIONS],
        }
        meta = {"knowledge_type": knowledge, "topic": text_field(item, "topic") or None}
        meta.update({key: value for key, value in item.items() if key not in RESERVED})
        return text_field(item, "text"), labels, meta


def check_mcq(mcq: Any) -> None:
    """`mcq`, when present, names exactly the three options, each a non-empty string."""
    if mcq is None:
        return
    if not isinstance(mcq, dict) or set(mcq) != set(MCQ_OPTIONS):
        raise Invalid(f"'mcq' must be an object with exactly the keys {list(MCQ_OPTIONS)}, got {mcq!r}")
    for key in MCQ_OPTIONS:
        if not isinstance(mcq[key], str) or not mcq[key].strip():
            raise Invalid(f"'mcq.{key}' must be a non-empty string, got {mcq[key]!r}")

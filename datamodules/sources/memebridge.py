"""MemeBridge: U.S. memes with sentiment (3 classes), emotions (multi-label) and cultural context.

crossmod's documented layout (docs/datasets.md): `memebridge.jsonl` beside `images/`, one line per
meme: `{"id", "image": "images/x.jpg", "text", "sentiment": "positive|neutral|negative",
"emotions": [subset of sarcastic, humorous, offensive, motivational], "knowledge_type":
"cultural|general", "topic", "split": "train|val|test"}`; any further fields (explanation,
misunderstanding, mcq, significance …) are kept in meta. A null sentiment or emotions list means
"not annotated" (the head is masked); an empty emotions list is a real annotation (no emotion).
"""

from __future__ import annotations

from typing import Any

from datamodules.sample import Label
from datamodules.sources.jsonl_memes import Invalid, JsonlMemeSource, string_list, text_field

SENTIMENTS = ["negative", "neutral", "positive"]
EMOTIONS = ["sarcastic", "humorous", "offensive", "motivational"]
KNOWLEDGE_TYPES = ("cultural", "general")
RESERVED = {"id", "image", "text", "sentiment", "emotions", "knowledge_type", "topic", "split", "lang"}


class MemeBridgeSource(JsonlMemeSource):
    """Converts the documented MemeBridge layout into sentiment and emotion heads."""

    name = "memebridge"
    version = 1
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
        labels: dict[str, Label] = {
            "sentiment": None if sentiment is None else SENTIMENTS.index(sentiment),
            "emotion": None if emotions is None else [int(e in emotions) for e in EMOTIONS],
        }
        meta = {"knowledge_type": knowledge, "topic": text_field(item, "topic") or None}
        meta.update({key: value for key, value in item.items() if key not in RESERVED})
        return text_field(item, "text"), labels, meta

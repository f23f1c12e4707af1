"""Tag similarity of generated social tags (ToxicTags' tag generator), as pure functions of embeddings.

For one meme, every gold tag takes its best cosine match among the generated tags; the meme's score is
the mean over its gold tags, and a split's score the mean over its memes. A meme for which nothing was
generated scores 0 (and is counted as an empty generation); a meme without gold tags cannot be scored
and is counted apart, never averaged in. The embeddings come from whichever sentence-embedding model
the caller chose (src/crossmod/models/sentence_embedder.py); nothing here loads a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of every row of `a` with every row of `b` (shape len(a) × len(b))."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms_a, norms_b = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    if (norms_a == 0).any() or (norms_b == 0).any():
        raise ValueError("a tag embedding is the zero vector: its cosine similarity is undefined")
    return (a / norms_a[:, None]) @ (b / norms_b[:, None]).T


def meme_tag_similarity(gold: np.ndarray, generated: np.ndarray) -> float | None:
    """Mean over the gold tags' embeddings (rows) of the best cosine among the generated tags' embeddings.

    None when the meme has no gold tags (nothing to score); 0.0 when nothing was generated.
    """
    if len(gold) == 0:
        return None
    if len(generated) == 0:
        return 0.0
    return float(cosine_matrix(gold, generated).max(axis=1).mean())


@dataclass(frozen=True)
class TagSimilaritySummary:
    """One split: `similarity` is the mean over the `scored` memes (those with gold tags), None when there are none."""

    memes: int
    scored: int
    no_gold: int  # memes without gold tags: not scored
    empty: int  # scored memes whose generation held no tag (each scored 0)
    similarity: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def summarise(scores: Sequence[float | None], generated_counts: Sequence[int]) -> TagSimilaritySummary:
    """Per-meme scores (None: no gold tags) and the number of tags generated for each meme → the split's summary."""
    if len(scores) != len(generated_counts):
        raise ValueError(f"{len(scores)} scores but {len(generated_counts)} generation counts")
    scored = [s for s in scores if s is not None]
    empty = sum(1 for s, n in zip(scores, generated_counts) if s is not None and n == 0)
    return TagSimilaritySummary(
        memes=len(scores),
        scored=len(scored),
        no_gold=len(scores) - len(scored),
        empty=empty,
        similarity=float(np.mean(scored)) if scored else None,
    )


def markdown(summaries: dict[str, TagSimilaritySummary], generator: str, embedder: str) -> str:
    """A small table: one row per split."""
    lines = [
        f"Tag similarity of tags written by `{generator}` (embeddings: `{embedder}`): each gold tag's best cosine "
        "match among the generated tags, mean over gold tags, then over memes.",
        "",
        "| split | memes | scored | no gold tags | empty generations | similarity |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for split, s in summaries.items():
        value = "—" if s.similarity is None else f"{s.similarity:.4f}"
        lines.append(f"| {split} | {s.memes} | {s.scored} | {s.no_gold} | {s.empty} | {value} |")
    return "\n".join(lines)

"""Few-shot exemplar retrieval as pure functions of embeddings (the ToxicTags study, docs/datasets.md).

A query meme gets the k training memes that score highest under a strategy:
- `random`: k memes drawn per query from a generator seeded by (seed, query id), so a query's draw
  does not depend on which other queries run;
- `image`: cosine of CLIP image embeddings;
- `tags`: mean over the query's tags of the best cosine with the exemplar's tags (CLIP text embeddings);
- `image_tags`: α·image + (1−α)·tags, α searched on a held-out part of train (`search_alpha`).
A query is never its own exemplar, nor is a meme of its group; ties go to the earlier pool meme.
Memes without tags: a tagless query scores 0 with every exemplar (its tag term cannot rank), a tagless
exemplar scores −1, the lowest cosine, so it comes after every tagged one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

NO_TAGS_QUERY = 0.0
NO_TAGS_EXEMPLAR = -1.0


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero), in float64 so cosines are exact to compare."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def cosine(queries: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """(n_queries, n_pool) cosine similarities."""
    return unit_rows(queries) @ unit_rows(pool).T


def tag_similarity(query_tags: Sequence[Sequence[int]], pool_tags: Sequence[Sequence[int]], tag_vectors: np.ndarray) -> np.ndarray:
    """(n_queries, n_pool): for each pair, the mean over the query's tags of the max cosine with the exemplar's tags.

    Tags are indices into `tag_vectors` (one embedding per distinct tag text)."""
    vectors = unit_rows(tag_vectors)
    flat = np.array([t for tags in pool_tags for t in tags], dtype=np.int64)
    sizes = np.array([len(tags) for tags in pool_tags], dtype=np.int64)
    tagged = sizes > 0
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])[tagged]
    scores = np.full((len(query_tags), len(pool_tags)), NO_TAGS_EXEMPLAR)
    for row, tags in enumerate(query_tags):
        if not len(tags):
            scores[row] = NO_TAGS_QUERY
            continue
        pair = vectors[np.asarray(tags, dtype=np.int64)] @ vectors[flat].T  # (query tags, every pool tag)
        best = np.maximum.reduceat(pair, starts, axis=1) if flat.size else np.empty((len(tags), 0))  # per exemplar
        scores[row, tagged] = best.mean(axis=0)
    return scores


def combined(image_scores: np.ndarray, tag_scores: np.ndarray, alpha: float) -> np.ndarray:
    """α·image + (1−α)·tags."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    return alpha * image_scores + (1.0 - alpha) * tag_scores


def forbidden_pairs(
    query_ids: Sequence[str], query_groups: Sequence[str], pool_ids: Sequence[str], pool_groups: Sequence[str]
) -> np.ndarray:
    """(n_queries, n_pool) True where the exemplar is the query itself or shares its group."""
    same_id = np.asarray(query_ids, dtype=object)[:, None] == np.asarray(pool_ids, dtype=object)[None, :]
    same_group = np.asarray(query_groups, dtype=object)[:, None] == np.asarray(pool_groups, dtype=object)[None, :]
    return same_id | same_group


def _check_room(forbidden: np.ndarray, k: int) -> None:
    allowed = (~forbidden).sum(axis=1)
    if len(allowed) and allowed.min() < k:
        raise ValueError(f"{k} exemplars were asked for, but a query has only {int(allowed.min())} allowed training memes")


def top_k(scores: np.ndarray, k: int, forbidden: np.ndarray) -> np.ndarray:
    """(n_queries, k) pool indices, best first; forbidden pairs never chosen; equal scores: lower index first."""
    _check_room(forbidden, k)
    masked = np.where(forbidden, -np.inf, scores)
    order = np.argsort(-masked, axis=1, kind="stable")
    return order[:, :k]


def unranked(scores: np.ndarray, forbidden: np.ndarray) -> np.ndarray:
    """(n_queries,) True where the allowed exemplars' scores are all equal or not finite: no ranking, only pool order."""
    allowed = ~forbidden
    high = np.where(allowed, scores, -np.inf).max(axis=1)
    low = np.where(allowed, scores, np.inf).min(axis=1)
    return ~np.isfinite(high) | ~np.isfinite(low) | (high == low)


def stable_key(text: str) -> int:
    """A 64-bit integer fixed by the text alone (same on every machine and run)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def random_exemplars(query_ids: Sequence[str], k: int, forbidden: np.ndarray, seed: int) -> np.ndarray:
    """(n_queries, k) pool indices drawn without replacement from the allowed ones, seeded per query."""
    _check_room(forbidden, k)
    chosen = np.empty((len(query_ids), k), dtype=np.int64)
    for row, query_id in enumerate(query_ids):
        allowed = np.flatnonzero(~forbidden[row])
        chosen[row] = np.random.default_rng([seed, stable_key(query_id)]).choice(allowed, size=k, replace=False)
    return chosen


def heldout_split(ids: Sequence[str], size: int, seed: int) -> tuple[list[int], list[int]]:
    """(held-out positions, remaining positions): the `size` ids first in a seeded hash order."""
    if not 0 < size < len(ids):
        raise ValueError(f"the held-out part must hold between 1 and {len(ids) - 1} training memes, got {size}")
    order = sorted(range(len(ids)), key=lambda i: stable_key(f"{seed}:{ids[i]}"))
    held = sorted(order[:size])
    rest = sorted(order[size:])
    return held, rest


def search_alpha(grid: Sequence[float], score: Callable[[float], float]) -> tuple[float, dict[float, float]]:
    """The α of `grid` with the highest score (the first such in grid order) and every α's score."""
    if not grid:
        raise ValueError("the α grid is empty")
    scores = {float(alpha): float(score(float(alpha))) for alpha in grid}
    best = max(scores, key=lambda a: (scores[a], -list(scores).index(a)))
    return best, scores

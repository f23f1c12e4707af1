"""What exemplar retrieval reads: the memes, their CLIP image embeddings, their tags and the tags' embeddings.

Strategies (`selection=`), by what they compare (src/crossmod/prompting/exemplars.py holds the arithmetic):

| strategy | image | query's tags |
|---|---|---|
| random | — | — |
| image | cosine | — |
| tags | — | ground truth |
| image_tags | α·cosine | (1−α)· ground truth |
| generated_tags | — | generated (`fewshot.tags_file`) |
| image_generated_tags | α·cosine | (1−α)· generated |

Exemplars always come from the pool (train) and carry their ground-truth tags; "generated" replaces
the query's tags only, as a meme without tags would have them at prediction time. A tags file is
JSONL, one `{"id": "<meme id>", "tags": ["…", …]}` per line (the id as in toxictags.jsonl; the sample id
`toxictags/<id>` is read too), what `train.py experiment=toxictags_tag_generator` writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from crossmod.data.sources.readers import clean_id, read_jsonl
from crossmod.prompting.exemplars import combined, cosine, forbidden_pairs, random_exemplars, tag_similarity, top_k, unranked

# strategy → (uses the image term, which tags the query brings: None, "gt" or "generated")
STRATEGIES: dict[str, tuple[bool, str | None]] = {
    "random": (False, None),
    "image": (True, None),
    "tags": (False, "gt"),
    "image_tags": (True, "gt"),
    "generated_tags": (False, "generated"),
    "image_generated_tags": (True, "generated"),
}


def strategies_asked(selection: str | Sequence[str], tags_file: str | None) -> list[str]:
    """`all` (every strategy; the generated-tag ones only with a tags file), one name, or a list of names."""
    if isinstance(selection, str):
        if selection == "all":
            return [s for s, (_, tags) in STRATEGIES.items() if tags != "generated" or tags_file]
        selection = [s.strip() for s in selection.split(",")]
    names = list(dict.fromkeys(str(s) for s in selection))
    unknown = [s for s in names if s not in STRATEGIES]
    if unknown or not names:
        raise ValueError(f"selection={unknown or names}: choose all, or among {list(STRATEGIES)}")
    if not tags_file and any(STRATEGIES[s][1] == "generated" for s in names):
        raise ValueError("the generated-tag strategies read the query's tags from fewshot.tags_file: set it (JSONL of {id, tags})")
    return names


def needs_alpha(strategy: str) -> bool:
    uses_image, tags = STRATEGIES[strategy]
    return uses_image and tags is not None


def read_tags_file(path: str | Path, dataset: str) -> dict[str, list[str]]:
    """sample id → generated tags; a line that is not `{"id", "tags": [str, …]}` stops with its file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"fewshot.tags_file {path} does not exist")
    tags: dict[str, list[str]] = {}
    for row in read_jsonl(path):
        where = f"{path}, line {row.line}"
        if row.values is None:
            raise ValueError(f"{where}: {row.problem}")
        meme = clean_id(row.values.get("id"))
        values = row.values.get("tags")
        if meme is None:
            raise ValueError(f'{where}: missing or empty "id"')
        if not isinstance(values, list) or not all(isinstance(t, str) for t in values):
            raise ValueError(f'{where}: "tags" must be a list of strings, got {values!r}')
        sample_id = meme if meme.startswith(f"{dataset}/") else f"{dataset}/{meme}"
        if sample_id in tags:
            raise ValueError(f"{where}: id {meme} appears twice")
        tags[sample_id] = [t.strip() for t in values if t.strip()]
    if tags and not any(tags.values()):
        raise ValueError(
            f"{path}: every tag is blank ({len(tags)} memes): retrieval by generated tags could rank nothing; write the tags again "
            "(crossmod train experiment=toxictags_tag_generator) or leave the generated-tag strategies out of `selection`"
        )
    return tags


@dataclass
class MemeTable:
    """Every meme retrieval may touch, with its embeddings; positions index `records`."""

    records: list[dict[str, Any]]
    image_vectors: np.ndarray | None  # (memes, d) or None when no strategy compares images
    tag_vectors: np.ndarray | None  # (vocabulary, d) or None when no strategy compares tags
    gt_tags: list[list[int]]  # per meme: indices into the vocabulary
    generated_tags: dict[int, list[int]]  # meme position → indices of its generated tags

    def query_tags(self, positions: Sequence[int], source: str) -> list[list[int]]:
        if source == "gt":
            return [self.gt_tags[p] for p in positions]
        missing = [self.records[p]["id"] for p in positions if p not in self.generated_tags]
        if missing:
            raise ValueError(f"fewshot.tags_file has no tags for {len(missing)} queried memes (first: {missing[0]})")
        return [self.generated_tags[p] for p in positions]

    def similarity(self, strategy: str, queries: Sequence[int], pool: Sequence[int], alpha: float | None = None) -> np.ndarray:
        """(queries, pool) scores of a similarity strategy (not `random`)."""
        uses_image, tags = STRATEGIES[strategy]
        image = cosine(self.image_vectors[list(queries)], self.image_vectors[list(pool)]) if uses_image else None
        tag = tag_similarity(self.query_tags(queries, tags), [self.gt_tags[p] for p in pool], self.tag_vectors) if tags else None
        if image is not None and tag is not None:
            if alpha is None:
                raise ValueError(f"strategy {strategy} needs α")
            return combined(image, tag, alpha)
        return image if image is not None else tag

    def exemplars(
        self, strategy: str, queries: Sequence[int], pool: Sequence[int], k: int, seed: int, alpha: float | None = None
    ) -> np.ndarray:
        """(queries, k) meme positions of each query's exemplars, most similar first; never the query or its group."""
        return self.retrieve(strategy, queries, pool, k, seed, alpha)[0]

    def retrieve(
        self, strategy: str, queries: Sequence[int], pool: Sequence[int], k: int, seed: int, alpha: float | None = None
    ) -> tuple[np.ndarray, int]:
        """(`exemplars`, how many queries the strategy could not rank): a query whose allowed exemplars all score
        the same (a tagless query under a tag strategy) gets the pool's first memes, which is counted, not hidden."""
        ids = [self.records[p]["id"] for p in queries]
        forbidden = forbidden_pairs(
            ids,
            [self.records[p]["group"] for p in queries],
            [self.records[p]["id"] for p in pool],
            [self.records[p]["group"] for p in pool],
        )
        if strategy == "random":
            return np.asarray(pool)[random_exemplars(ids, k, forbidden, seed)], 0
        scores = self.similarity(strategy, queries, pool, alpha)
        return np.asarray(pool)[top_k(scores, k, forbidden)], int(unranked(scores, forbidden).sum())


def tag_vocabulary(records: Sequence[Mapping[str, Any]], generated: Mapping[str, list[str]]) -> list[str]:
    """Every distinct tag text, sorted (the tag embedding cache's keys)."""
    texts = {t for r in records for t in r.get("meta", {}).get("tags", [])}
    texts |= {t for tags in generated.values() for t in tags}
    return sorted(texts)


def index_tags(tags: Sequence[str], vocabulary: Mapping[str, int]) -> list[int]:
    return list(dict.fromkeys(vocabulary[t] for t in tags))

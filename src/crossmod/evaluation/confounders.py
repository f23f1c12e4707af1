"""Confounder accuracy: does a model tell a meme from its confounder, the same meme with one modality swapped?

RGCL's claim is that its embedding separates confounders (same caption over another picture, same picture under
another caption) that a plain classifier confuses. Memes whose `meta.role` is `original`, `text_confounder` or
`image_confounder` (the synthetic memes; Hateful Memes' release does not link them) form pairs within a group and
language. A pair counts under a culture when its two labels differ there (the swap flips the judgement); it is
right when both decisions are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

CONFOUNDER_ROLES = ("text_confounder", "image_confounder")


def confounder_pairs(samples: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """(original id, confounder id, which modality was swapped) for every original and each of its confounders."""
    by_key: dict[tuple[str, str], dict[str, str]] = {}
    for sample in samples:
        role = (sample.get("meta") or {}).get("role")
        if role == "original" or role in CONFOUNDER_ROLES:
            by_key.setdefault((str(sample["group"]), str(sample.get("lang"))), {})[role] = str(sample["id"])
    return [
        (roles["original"], roles[role], role.split("_")[0])
        for roles in by_key.values()
        if "original" in roles
        for role in CONFOUNDER_ROLES
        if role in roles
    ]


def flip_pair_accuracy(
    pairs: Iterable[tuple[str, str, str]], labels: Mapping[str, int], decisions: Mapping[str, int], swapped: str | None = None
) -> tuple[float, int]:
    """Share of the scored pairs whose labels differ (under one culture's `labels`) and whose two decisions are both
    right, and how many such pairs there were (NaN, 0 when none). `swapped`: only pairs that swapped that modality."""
    counted = [
        (original, confounder)
        for original, confounder, modality in pairs
        if (swapped is None or modality == swapped)
        and original in decisions
        and confounder in decisions
        and labels.get(original) in (0, 1)
        and labels.get(confounder) in (0, 1)
        and labels[original] != labels[confounder]
    ]
    if not counted:
        return math.nan, 0
    right = sum(decisions[o] == labels[o] and decisions[c] == labels[c] for o, c in counted)
    return right / len(counted), len(counted)

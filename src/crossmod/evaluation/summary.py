"""Mean ± sample standard deviation over repeated runs (folds, seeds): one rule for every report."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def mean_std(values: Iterable[float | None]) -> dict[str, float]:
    """NaN-aware mean and sample std (ddof = 1) with the count of defined values; std is NaN below two values."""
    array = np.array([math.nan if v is None else v for v in values], dtype=float)
    defined = int(np.sum(~np.isnan(array)))
    mean = float(np.nanmean(array)) if defined else math.nan
    std = float(np.nanstd(array, ddof=1)) if defined > 1 else math.nan
    return {"mean": mean, "std": std, "n": defined}


def json_safe(value):
    """NaN → None through dicts and lists, for JSON files that must stay standard (no NaN tokens)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


SCORE_SLACK = 1e-6  # float32 metrics land a rounding step outside [0, 1] (an AUROC of 1.0000001)


def finite_or_null(value: object) -> bool:
    """A finite number or null (an undefined metric is written as null): NaN, infinities and booleans are no score."""
    return value is None or isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def possible_score(name: str, value: object) -> bool:
    """A metric a file may hold: a loss is ≥ 0, every other metric a fraction in [0, 1] (float32 rounding allowed), or
    null (undefined). What reports read from shared files is checked with it."""
    if not finite_or_null(value):
        return False
    return value is None or (value >= 0 if name == "loss" else -SCORE_SLACK <= value <= 1.0 + SCORE_SLACK)


MARKDOWN_SPECIALS = str.maketrans({c: f"\\{c}" for c in "\\`|<>[]"})


def shown(value: object, limit: int = 300) -> str:
    """Text from a shared file (a run's folder name, a baseline's rule, a selection's description) as a report or the
    console shows it: control characters (ANSI escapes included) spelled out, the characters that make markdown
    links, HTML, code or table cells escaped, and at most `limit` characters. What a folder says stays words."""
    text = str(value).translate(MARKDOWN_SPECIALS)
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"

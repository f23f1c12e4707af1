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

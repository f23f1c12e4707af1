"""`model.objective` (RGCL's) and `model.retrieval`: the knobs of RGCL training and retrieval classification, checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossmod.models.retrieval.knn_vote import WEIGHTINGS
from crossmod.models.retrieval.rgcl_loss import LOSSES


@dataclass(frozen=True)
class RGCLSettings:
    """weight: the RGCL share of the loss (the public code mixes 0.5 RGCL + 0.5 cross-entropy); loss: `nll` (the paper)
    or `triplet` (the public script); depth: search only the nearest `depth` bank memes for the positive and the hard
    negative (the code: 12; null: the whole bank, the paper's argmax)."""

    weight: float = 0.5
    loss: str = "nll"
    temperature: float = 1.0
    margin: float = 0.1
    depth: int | None = None

    @classmethod
    def of(cls, config: dict[str, Any] | None) -> RGCLSettings | None:
        if not config:
            return None
        unknown = set(config) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"model.objective (RGCL) has no {sorted(unknown)} (it takes {sorted(cls.__dataclass_fields__)})")
        settings = cls(**config)
        if not 0.0 < settings.weight <= 1.0:
            raise ValueError(f"model.objective.weight must be in (0, 1], got {settings.weight}")
        if settings.loss not in LOSSES:
            raise ValueError(f"model.objective.loss must be one of {LOSSES}, got {settings.loss!r}")
        if settings.temperature <= 0 or (settings.depth is not None and settings.depth < 1):
            raise ValueError("model.objective.temperature must be > 0 and model.objective.depth null or ≥ 1")
        return settings


@dataclass(frozen=True)
class RetrievalSettings:
    """k nearest training memes vote (the public code: 20; the paper's table: 10), weighted by rank and similarity."""

    k: int = 20
    weighting: str = "rank"

    @classmethod
    def of(cls, config: dict[str, Any] | None) -> RetrievalSettings:
        unknown = set(config or {}) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"model.retrieval has no {sorted(unknown)} (it takes {sorted(cls.__dataclass_fields__)})")
        settings = cls(**(config or {}))
        if isinstance(settings.k, bool) or not isinstance(settings.k, int):
            raise ValueError(f"model.retrieval.k must be an integer, got {settings.k!r}")
        if settings.k < 1 or settings.weighting not in WEIGHTINGS:
            raise ValueError(f"model.retrieval needs k ≥ 1 and weighting in {WEIGHTINGS}, got {settings}")
        return settings

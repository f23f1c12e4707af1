"""What training minimises: a component the classifier is given, built from `model.rgcl`.

`CrossEntropy` (every head's masked loss, averaged) unless the config gives `model.rgcl`; then `RGCL`, the joint
(1 − w)·cross-entropy + w·RGCL of Mei et al. (ACL 2024), mined from the retrieval bank of training memes. The classifier
calls `objective(model, batch)` and logs what it returns; it never asks which objective it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from crossmod.models.retrieval.bank import rgcl_objective
from crossmod.models.retrieval.settings import RGCLSettings

if TYPE_CHECKING:
    from crossmod.models.module import MemeClassifier


class Objective(Protocol):
    """`needs_bank`: it reads the training memes' bank, rebuilt at every training epoch's start (the bank callback);
    `needs_embedding`: it trains the meme embedding itself, so the backbone must return one (not logits per modality)."""

    needs_bank: bool
    needs_embedding: bool

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The step's logged losses by name; `train/loss` is what is minimised."""
        ...


@dataclass(frozen=True)
class CrossEntropy:
    """Each head's masked cross-entropy on its annotated memes, averaged over the heads."""

    needs_bank: bool = False
    needs_embedding: bool = False

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {"train/loss": model.heads_loss(model.head_logits(batch), batch["labels"])}


@dataclass(frozen=True)
class RGCL:
    """(1 − w)·cross-entropy + w·RGCL, both from one forward (RGCL's joint loss); `settings` are `model.rgcl`'s."""

    settings: RGCLSettings
    needs_bank: bool = True
    needs_embedding: bool = True

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        features, s = model.embed(batch), self.settings
        cross_entropy = model.heads_loss(model.logits_from(features), batch["labels"])
        contrast = rgcl_objective(features, batch["labels"], batch["ids"], model.bank(), s.loss, s.temperature, s.margin, s.depth)
        loss = (1 - s.weight) * cross_entropy + s.weight * contrast
        return {"train/loss": loss, "train/cross_entropy": cross_entropy, "train/rgcl": contrast}


def objective_from(rgcl: dict[str, Any] | None) -> Objective:
    """The objective `model.rgcl` asks for: RGCL with its settings (checked), or cross-entropy when it is absent."""
    settings = RGCLSettings.of(rgcl)
    return CrossEntropy() if settings is None else RGCL(settings)

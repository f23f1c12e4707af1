"""What training minimises: a component the classifier is given, `model.objective` (a `_target_` config).

`CrossEntropy` (every head's masked loss on its majority labels, averaged: configs/model/objective/cross_entropy.yaml,
every model's default); `RGCL`, the joint (1 − w)·cross-entropy + w·RGCL of Mei et al. (ACL 2024), mined from the
retrieval bank of training memes (`model/objective=rgcl`); or `SoftVotes`, each culture's head trained on its annotators'
vote share instead of their majority (`model/objective=soft_votes`; soft-label training as in the LeWiDi shared tasks,
Uma et al., JAIR 2021); or `AnnotatorGroups`, a head per annotator or annotator group within each culture
(`model/objective=annotator_groups`; Davani et al., TACL 2022). The classifier calls `objective(model, batch)` and logs what it returns; it never asks
which objective it holds. Another objective is a class here with the same call, listed in
src/crossmod/models/trusted_targets.py, and a config beside the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.nn.functional as F

from crossmod.models.retrieval.bank import rgcl_objective
from crossmod.models.retrieval.settings import RGCLSettings

if TYPE_CHECKING:
    from crossmod.models.module import MemeClassifier


class Objective(Protocol):
    """`needs_bank`: it reads the training memes' bank, rebuilt at every training epoch's start (the bank callback);
    `needs_embedding`: it trains the meme embedding itself, so the backbone must return one (not logits per modality);
    `needs_votes`: it trains on the annotators' votes, so the training memes must come with them."""

    needs_bank: bool
    needs_embedding: bool
    needs_votes: bool

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The step's logged losses by name; `train/loss` is what is minimised."""
        ...


@dataclass(frozen=True)
class CrossEntropy:
    """Each head's masked cross-entropy on its annotated memes, averaged over the heads."""

    needs_bank: bool = False
    needs_embedding: bool = False
    needs_votes: bool = False

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return {"train/loss": model.heads_loss(model.head_logits(batch), batch["labels"])}


@dataclass(frozen=True)
class SoftVotes:
    """Each binary head's cross-entropy against its culture's vote share (hate votes / votes of that culture's
    annotators), on the memes that culture voted on; averaged over the heads. A meme without the culture's votes adds
    nothing to its head (masked, as a missing label is), and no host sync is made to find out which."""

    needs_bank: bool = False
    needs_embedding: bool = False
    needs_votes: bool = True

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        logits, shares = model.head_logits(batch), batch["vote_shares"]
        losses = []
        for name in shares:
            voted = ~torch.isnan(shares[name])
            target = torch.where(voted, shares[name], torch.zeros_like(shares[name]))
            per_meme = F.binary_cross_entropy_with_logits(logits[name].float(), target, reduction="none")
            losses.append((per_meme * voted).sum() / voted.sum().clamp(min=1))
        return {"train/loss": torch.stack(losses).mean()}


@dataclass(frozen=True)
class AnnotatorGroups:
    """Davani et al. (TACL 2022), "Dealing with Disagreements: Looking Beyond the Majority Vote in Subjective
    Annotations": a head per annotator (`by=annotator`, their multi-task model) or per group of annotators sharing an
    attribute the release gives (`by=sex`, `age`, `education`, `party`, `ethnicity`), within each culture; each culture's
    probability is the mean of its groups' (src/crossmod/models/heads.py GroupHeadLayers). The loss is the
    cross-entropy of every vote against its group's head (a group's [hate, total] votes on a meme weigh `total`), masked
    where a group did not vote. `groups` are the training memes' (found before fit, kept in the checkpoint)."""

    by: str = "annotator"
    groups: tuple[str, ...] | None = None
    needs_bank: bool = False
    needs_embedding: bool = False
    needs_votes: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.by, str) or not self.by.isidentifier():
            raise ValueError(f"model.objective.by names a grouping (annotator, sex, age, education, party, ethnicity), not {self.by!r}")

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        logits = model.group_logits(batch)  # [memes, groups]
        votes = batch["group_votes"]  # [memes, groups, (hate, total)], in `groups`' order (the collate's)
        hate, total = votes[..., 0], votes[..., 1]
        share = torch.where(total > 0, hate / total.clamp(min=1), torch.zeros_like(total))
        per_group = F.binary_cross_entropy_with_logits(logits, share, reduction="none")
        return {"train/loss": (per_group * total).sum() / total.sum().clamp(min=1)}


class RGCL:
    """(1 − w)·cross-entropy + w·RGCL, both from one forward (RGCL's joint loss); the settings are checked as built
    (src/crossmod/models/retrieval/settings.py)."""

    needs_bank = True
    needs_embedding = True
    needs_votes = False

    def __init__(self, **settings: Any) -> None:
        self.settings = RGCLSettings.of(settings) or RGCLSettings()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RGCL) and other.settings == self.settings

    def __repr__(self) -> str:
        return f"RGCL({self.settings})"

    def __call__(self, model: MemeClassifier, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        features, s = model.embed(batch), self.settings
        cross_entropy = model.heads_loss(model.logits_from(features), batch["labels"])
        contrast = rgcl_objective(features, batch["labels"], batch["ids"], model.bank(), s.loss, s.temperature, s.margin, s.depth)
        loss = (1 - s.weight) * cross_entropy + s.weight * contrast
        return {"train/loss": loss, "train/cross_entropy": cross_entropy, "train/rgcl": contrast}

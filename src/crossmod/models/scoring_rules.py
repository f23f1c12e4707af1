"""How evaluation and prediction score a meme: a component the classifier is given, built from `model.classify`.

`HeadScores`: the head layers' logits (the default). `RetrievalVote`: the k nearest labelled memes of a bank vote
(RGCL's retrieval classifier, `model.classify=retrieval` with `model.retrieval`'s k and weighting; an exported retrieval
adapter's database). The classifier's forward, metrics and predict step go through the rule it holds; only the head
layers train, whatever the rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from crossmod.models.retrieval.bank import explain, nearest, retrieval_logits, votes
from crossmod.models.retrieval.settings import CLASSIFY, RetrievalSettings

if TYPE_CHECKING:
    from crossmod.data.heads import Head


class Scored(Protocol):
    """What a scoring rule reads: a module's heads and forward (a `MemeClassifier`, or a wrapper mapping its heads)."""

    heads: dict[str, Head]

    def __call__(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]: ...


class ScoringRule(Protocol):
    """`name`: what run labels and exports call it (`head`, `retrieval`); `needs_bank`: it votes among the training
    memes, embedded under the weights being scored before every validation, test and prediction."""

    name: str
    needs_bank: bool

    def logits(self, model: Any, batch: dict[str, Any]) -> dict[str, torch.Tensor]: ...

    def predict(self, model: Any, batch: dict[str, Any]) -> dict[str, Any]:
        """The batch's probabilities per head with its memes' positions (`index`), and what explains them, if anything."""
        ...


def _probabilities(model: Scored, logits: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: head.probabilities(logits[name].float()) for name, head in model.heads.items()}


@dataclass(frozen=True)
class HeadScores:
    """The head layers score."""

    name: str = "head"
    needs_bank: bool = False

    def logits(self, model: Any, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return model.head_logits(batch)

    def predict(self, model: Scored, batch: dict[str, Any]) -> dict[str, Any]:
        return {"index": batch["index"], "probabilities": _probabilities(model, model(batch))}


@dataclass(frozen=True)
class RetrievalVote:
    """The k nearest memes of the model's bank vote, weighted by rank or evenly (`mean`) (`settings`); a prediction also
    names the neighbours that voted."""

    settings: RetrievalSettings
    name: str = "retrieval"
    needs_bank: bool = True

    def logits(self, model: Any, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return retrieval_logits(model.embed(batch), batch["ids"], model.bank(), self.settings.k, self.settings.weighting)

    def predict(self, model: Any, batch: dict[str, Any]) -> dict[str, Any]:
        bank = model.bank()
        found = nearest(model.embed(batch), batch["ids"], bank, self.settings.k)  # one search: the vote and its explanation
        probabilities = _probabilities(model, votes(found, bank, self.settings.weighting))
        return {"index": batch["index"], "probabilities": probabilities, "neighbours": explain(found, bank)}


def scoring_rule_from(classify: str, retrieval: dict[str, Any] | None) -> ScoringRule:
    """The rule `model.classify` names (`head` or `retrieval`), with `model.retrieval`'s settings (checked either way:
    a head-scored run still exports as a retrieval adapter with them)."""
    if classify not in CLASSIFY:
        raise ValueError(f"model.classify must be one of {CLASSIFY}, got {classify!r}")
    settings = RetrievalSettings.of(retrieval)
    return HeadScores() if classify == "head" else RetrievalVote(settings)

"""How evaluation and prediction score a meme: a component the classifier is given, `model.scoring` (a `_target_` config).

`HeadScores`: the head layers' logits (configs/model/scoring/head.yaml, every model's default). `RetrievalVote`: the k
nearest labelled memes of a bank vote (RGCL's retrieval classifier, `model/scoring=retrieval`, with `model.retrieval`'s
k and weighting; an exported retrieval adapter's database). The classifier's forward, metrics and predict step go through the rule it holds; only the head
layers train, whatever the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

from crossmod.models.retrieval.bank import explain, nearest, retrieval_logits, votes
from crossmod.models.retrieval.settings import RetrievalSettings

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


class RetrievalVote:
    """The k nearest memes of the model's bank vote, weighted by rank or evenly (`mean`) (`settings`: `model.retrieval`'s,
    checked as built); a prediction also names the neighbours that voted."""

    name = "retrieval"
    needs_bank = True

    def __init__(self, settings: RetrievalSettings | Mapping[str, Any] | None = None) -> None:
        self.settings = settings if isinstance(settings, RetrievalSettings) else RetrievalSettings.of(dict(settings or {}))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RetrievalVote) and other.settings == self.settings

    def __repr__(self) -> str:
        return f"RetrievalVote({self.settings})"

    def logits(self, model: Any, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        return retrieval_logits(model.embed(batch), batch["ids"], model.bank(), self.settings.k, self.settings.weighting)

    def predict(self, model: Any, batch: dict[str, Any]) -> dict[str, Any]:
        bank = model.bank()
        found = nearest(model.embed(batch), batch["ids"], bank, self.settings.k)  # one search: the vote and its explanation
        probabilities = _probabilities(model, votes(found, bank, self.settings.weighting))
        return {"index": batch["index"], "probabilities": probabilities, "neighbours": explain(found, bank)}

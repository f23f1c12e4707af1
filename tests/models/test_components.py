"""The classifier's behaviours are components built from config (src/crossmod/models/objectives.py, scoring_rules.py) and
its backbone declares a contract (src/crossmod/models/backbone.py): each is checked here on its own, with hand-made inputs."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest
import torch
import yaml
from hydra.utils import instantiate
from torch import nn

from crossmod.data.heads import parse_heads
from crossmod.models.backbone import Adapters, Backbone, Generative, checked_backbone
from crossmod.models.module import with_components
from crossmod.models.objectives import RGCL, AnnotatorGroups, CrossEntropy, SoftVotes
from crossmod.models.retrieval.bank import Bank, rgcl_objective
from crossmod.models.retrieval.settings import RetrievalSettings
from crossmod.models.scoring_rules import HeadScores, RetrievalVote

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "crossmod" / "configs" / "model"
HEADS = parse_heads({"US": {"kind": "binary"}, "DE": {"kind": "binary"}})


def test_the_config_names_the_components():
    """Each config in configs/model/{objective,scoring}/ builds its component, settings checked as it is built; an older
    config's flags (`rgcl`, `classify`) become the components they chose."""
    built = {p.stem: instantiate(yaml.safe_load(p.read_text())) for p in sorted((CONFIGS / "objective").glob("*.yaml"))}
    assert built == {
        "cross_entropy": CrossEntropy(),
        "rgcl": RGCL(weight=0.5, loss="nll", temperature=1.0, margin=0.1),
        "soft_votes": SoftVotes(),
        "annotator_groups": AnnotatorGroups(by="annotator"),
    }
    assert built["annotator_groups"].needs_votes and built["annotator_groups"].groups is None  # found by the run
    assert built["rgcl"].needs_bank and built["rgcl"].needs_embedding and not CrossEntropy().needs_bank
    scoring = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((CONFIGS / "scoring").glob("*.yaml"))}
    assert instantiate(scoring["head"]) == HeadScores() and not HeadScores().needs_bank
    vote = instantiate({**scoring["retrieval"], "settings": {"k": 3, "weighting": "mean"}})
    assert vote == RetrievalVote(RetrievalSettings(k=3, weighting="mean")) and vote.needs_bank and vote.name == "retrieval"
    assert RetrievalVote(None).settings == RetrievalSettings()  # no model.retrieval: the public code's k 20, by rank
    with pytest.raises(ValueError, match=r"model.objective.weight must be in \(0, 1\]"):
        RGCL(weight=0)
    with pytest.raises(ValueError, match=r"model.objective \(RGCL\) has no \['wieght'\]"):
        RGCL(wieght=0.5)
    with pytest.raises(ValueError, match=r"model.retrieval.k must be an integer"):
        RetrievalVote({"k": 2.5})
    old = with_components({"rgcl": {"weight": 0.25, "loss": "triplet"}, "classify": "retrieval", "retrieval": {"k": 5}})
    assert instantiate(old["objective"]) == RGCL(weight=0.25, loss="triplet") and "rgcl" not in old and "classify" not in old
    assert instantiate(old["scoring"]) == RetrievalVote({"k": 5})
    default = with_components({"classify": "head"})
    assert instantiate(default["objective"]) == CrossEntropy() and instantiate(default["scoring"]) == HeadScores()
    given = {"_target_": "crossmod.models.objectives.RGCL", "weight": 1.0}
    assert with_components({"objective": given, "rgcl": {"weight": 0.1}})["objective"] == given  # the new key wins


class Stub:
    """What the components call on a classifier, with fixed numbers: features, head logits, a loss, a bank."""

    heads = HEADS

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.features = torch.randn(4, 8, requires_grad=True)
        self.bank_ = Bank.of(torch.randn(6, 8), {h: torch.tensor([0, 1, 0, 1, 1, -1]) for h in HEADS}, [f"b{i}" for i in range(6)])

    def embed(self, batch):
        return self.features

    def head_logits(self, batch):
        return self.logits_from(self.features)

    def logits_from(self, features):
        return {h: features[:, i] for i, h in enumerate(HEADS)}

    def heads_loss(self, logits, labels):
        return sum(v.sum() for v in logits.values()) / 10

    def bank(self):
        return self.bank_

    def __call__(self, batch):
        return self.head_logits(batch)


BATCH = {"ids": ["q0", "q1", "b2", "q3"], "labels": {h: torch.tensor([1, 0, 1, 0]) for h in HEADS}, "index": torch.arange(4)}


def test_cross_entropy_is_the_heads_loss_of_the_head_logits():
    model = Stub()
    assert CrossEntropy()(model, BATCH) == {"train/loss": model.heads_loss(model.head_logits(BATCH), BATCH["labels"])}


def test_soft_votes_is_each_heads_cross_entropy_against_its_vote_share_on_the_memes_it_voted_on():
    model = Stub()
    shares = {"US": torch.tensor([0.25, float("nan"), 1.0, 0.5]), "DE": torch.full((4,), float("nan"))}
    losses = SoftVotes()(model, {**BATCH, "vote_shares": shares})
    logits = model.head_logits(BATCH)["US"]
    voted = [0, 2, 3]  # meme 1 has no US votes; DE voted on none: its head adds 0, the mean is over both heads
    by_hand = sum(
        -(s * math.log(torch.sigmoid(logits[i]).item()) + (1 - s) * math.log(1 - torch.sigmoid(logits[i]).item()))
        for i, s in zip(voted, (0.25, 1.0, 0.5))
    )
    assert losses["train/loss"].item() == pytest.approx(by_hand / 3 / 2, rel=1e-5)
    losses["train/loss"].backward()
    grad = model.features.grad  # US's logit is column 0, DE's column 1
    assert torch.isfinite(grad).all() and (grad[[0, 2, 3], 0] != 0).all() and grad[1, 0] == 0  # no NaN through a mask
    assert grad[:, 1].abs().sum() == 0 and SoftVotes().needs_votes and not CrossEntropy().needs_votes


def test_rgcl_mixes_cross_entropy_and_the_contrastive_loss_by_its_weight():
    model, rgcl = Stub(), RGCL(weight=0.25, loss="nll", depth=3)
    losses = rgcl(model, BATCH)
    contrast = rgcl_objective(model.features, BATCH["labels"], BATCH["ids"], model.bank_, "nll", 1.0, 0.1, 3)
    cross_entropy = model.heads_loss(model.logits_from(model.features), BATCH["labels"])
    assert torch.allclose(losses["train/rgcl"], contrast) and torch.allclose(losses["train/cross_entropy"], cross_entropy)
    assert torch.allclose(losses["train/loss"], 0.75 * cross_entropy + 0.25 * contrast)


def test_the_retrieval_vote_scores_from_the_bank_and_names_its_neighbours():
    model = Stub()
    vote = RetrievalVote(RetrievalSettings(k=2))
    predicted = vote.predict(model, BATCH)
    head = HeadScores().predict(model, BATCH)
    assert set(predicted["probabilities"]) == set(HEADS) and "neighbours" in predicted and "neighbours" not in head
    assert not torch.allclose(predicted["probabilities"]["US"], head["probabilities"]["US"])
    # a meme never votes for itself: b2 is in the bank, and its neighbours are others
    assert all(n["id"] != "b2" for n in predicted["neighbours"]["US"][2])
    # forward (logits) and predict are one vote: the probabilities of the one are those the other reports
    logits = vote.logits(model, BATCH)
    assert all(torch.allclose(HEADS[h].probabilities(logits[h].float()), predicted["probabilities"][h]) for h in HEADS)


def _fusion_classes() -> list[str]:
    targets = set()
    for path in CONFIGS.glob("*.yaml"):
        fusion = (yaml.safe_load(path.read_text()) or {}).get("fusion") or {}
        if isinstance(fusion, dict) and str(fusion.get("_target_", "")).startswith("crossmod."):
            targets.add(fusion["_target_"])
    return sorted(targets)


@pytest.mark.parametrize("target", _fusion_classes())
def test_every_fusion_a_model_config_builds_declares_the_backbone_contract(target):
    module, name = target.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert Backbone in cls.__mro__ and nn.Module in cls.__mro__  # declared, not merely shaped alike
    assert ("VLM" in name) == (Adapters in cls.__mro__) == (Generative in cls.__mro__)  # only a VLM exports an adapter, generates


def test_a_module_without_the_contract_is_refused_by_name():
    class Plain(nn.Module):
        def forward(self, batch):
            return batch

    with pytest.raises(TypeError, match=r"model.fusion built a Plain, which does not declare crossmod.models.backbone.Backbone"):
        checked_backbone(Plain())

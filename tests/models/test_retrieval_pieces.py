"""RGCL's pieces against hand-computed cases: neighbours, mining, the loss (both kinds) and the kNN vote."""

from __future__ import annotations

import math

import pytest
import torch

from crossmod.models.retrieval.knn_vote import knn_scores
from crossmod.models.retrieval.neighbours import cosine_similarities, mine, same_ids
from crossmod.models.retrieval.rgcl_loss import rgcl_loss

ANGLES = [0.0, 0.3, 1.2, 2.0, 3.0]  # bank on the unit circle: cos(a − b) is every similarity


def unit(angle: float) -> list[float]:
    return [math.cos(angle), math.sin(angle)]


def bank() -> torch.Tensor:
    return torch.tensor([unit(a) for a in ANGLES]) * torch.tensor([[1.0], [2.0], [0.5], [3.0], [1.0]])  # norms do not matter


def test_similarities_are_cosines_and_the_query_itself_is_excluded():
    queries = torch.tensor([unit(0.0), unit(2.0)])
    excluded = same_ids(["m0", "m3"], ["m0", "m1", "m2", "m3", "m4"])
    assert excluded.tolist() == [[True, False, False, False, False], [False, False, False, True, False]]
    sims = cosine_similarities(queries, bank(), excluded)
    assert sims[0, 0] == float("-inf") and sims[1, 3] == float("-inf")
    assert sims[0, 2].item() == pytest.approx(math.cos(1.2)) and sims[1, 4].item() == pytest.approx(math.cos(1.0))


def test_mining_takes_the_nearest_same_label_and_the_nearest_other_label_entry():
    bank_labels = torch.tensor([1, 1, 0, 0, 1])
    queries = torch.tensor([unit(0.1), unit(2.9), unit(1.3)])
    sims = cosine_similarities(queries, bank(), same_ids(["m0", "q", "q2"], ["m0", "m1", "m2", "m3", "m4"]))
    positive, negative = mine(sims, torch.tensor([1, 0, -1]), bank_labels)
    # query 0 (at 0.1, label 1, itself m0 excluded): nearest label 1 is m1 (0.3), nearest label 0 is m2 (1.2)
    # query 1 (at 2.9, label 0): nearest label 0 is m3 (2.0), nearest label 1 is m4 (3.0); query 2 unlabelled: neither
    assert positive.tolist() == [1, 3, -1] and negative.tolist() == [2, 4, -1]
    # searching only the 1 nearest: query 0's nearest is m1 (same label) so no hard negative; query 1's is m4
    positive, negative = mine(sims, torch.tensor([1, 0, -1]), bank_labels, depth=1)
    assert positive.tolist() == [1, -1, -1] and negative.tolist() == [-1, 4, -1]


def test_the_nll_loss_equals_the_papers_formula_computed_by_hand():
    g = torch.tensor([unit(0.0), unit(1.0), unit(2.5)], requires_grad=True)
    labels = torch.tensor([1, 0, 1])
    positives = torch.tensor([unit(0.4), unit(1.5), unit(2.0)])
    negatives = torch.tensor([unit(0.9), unit(0.2), unit(0.0)])
    has_negative = torch.tensor([True, True, False])
    loss = rgcl_loss(g, labels, positives, negatives, torch.tensor([True, True, True]), has_negative, temperature=0.5)
    t = 0.5
    by_hand = [
        -math.log(math.exp(math.cos(0.4) / t) / (math.exp(math.cos(0.4) / t) + math.exp(math.cos(0.9) / t) + math.exp(math.cos(1.0) / t))),
        -math.log(
            math.exp(math.cos(0.5) / t)
            / (math.exp(math.cos(0.5) / t) + math.exp(math.cos(0.8) / t) + math.exp(math.cos(1.0) / t) + math.exp(math.cos(1.5) / t))
        ),
        -math.log(math.exp(math.cos(0.5) / t) / (math.exp(math.cos(0.5) / t) + math.exp(math.cos(1.5) / t))),  # no hard negative
    ]
    assert loss.item() == pytest.approx(sum(by_hand) / 3, rel=1e-6)
    loss.backward()
    assert g.grad is not None and g.grad.abs().sum() > 0


def test_the_triplet_loss_equals_the_public_scripts_formula_and_anchors_without_a_positive_are_left_out():
    g = torch.tensor([unit(0.0), unit(1.0), unit(2.5)])
    labels = torch.tensor([1, 0, 1])
    positives = torch.tensor([unit(0.4), unit(1.5), unit(2.0)])
    negatives = torch.tensor([unit(0.9), unit(0.2), unit(0.0)])
    loss = rgcl_loss(
        g, labels, positives, negatives, torch.tensor([True, True, False]), torch.tensor([True, True, True]), kind="triplet", margin=0.1
    )
    first = max(0.0, math.cos(1.0) + math.cos(0.9) - math.cos(0.4) + 0.1)
    second = max(0.0, (math.cos(1.0) + math.cos(1.5)) / 2 + math.cos(0.8) - math.cos(0.5) + 0.1)
    assert loss.item() == pytest.approx((first + second) / 2, rel=1e-6)
    none = rgcl_loss(g, labels, positives, negatives, torch.zeros(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool))
    assert none.item() == 0.0
    with pytest.raises(ValueError, match="nll"):
        rgcl_loss(g, labels, positives, negatives, torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool), kind="infonce")


def test_the_knn_vote_weights_by_rank_and_similarity():
    sims = torch.tensor([[0.9, 0.5, 0.1], [0.8, 0.7, 0.6]])
    labels = torch.tensor([[1, 0, 1], [0, -1, 1]])
    rank = knn_scores(sims, labels)
    assert rank[0].item() == pytest.approx((3 * 0.9 - 2 * 0.5 + 1 * 0.1) / 6)
    assert rank[1].item() == pytest.approx((-3 * 0.8 + 1 * 0.6) / 4)  # an unlabelled neighbour does not vote
    mean = knn_scores(sims, labels, weighting="mean")
    assert mean[0].item() == pytest.approx((0.9 - 0.5 + 0.1) / 3) and mean[1].item() == pytest.approx((-0.8 + 0.6) / 2)


def test_each_head_mines_by_its_own_labels_and_the_heads_losses_are_averaged():
    from crossmod.models.retrieval.bank import Bank, rgcl_objective

    bank_ids = ["m0", "m1", "m2", "m3", "m4"]
    us = torch.tensor([1, 1, 0, 0, 1])
    de = torch.tensor([0, 1, 1, -1, 0])  # m3 has no DE label
    the_bank = Bank.of(bank(), {"US": us, "DE": de}, bank_ids)
    g = torch.tensor([unit(0.1), unit(2.9)], requires_grad=True)
    labels = {"US": torch.tensor([1, 0]), "DE": torch.tensor([1, -1])}
    loss = rgcl_objective(g, labels, ["q0", "q1"], the_bank)
    sims = cosine_similarities(g.detach(), the_bank.embeddings)
    expected = []
    for head, bank_labels in (("US", us), ("DE", de)):
        positive, negative = mine(sims, labels[head], bank_labels)
        expected.append(
            rgcl_loss(
                g,
                labels[head],
                the_bank.embeddings[positive.clamp(min=0)],
                the_bank.embeddings[negative.clamp(min=0)],
                positive >= 0,
                negative >= 0,
            )
        )
    # US: q0's positive m1, negative m2; DE: q0 (label 1) takes m1 too, its negative is m0 (DE 0), q1 is unlabelled
    assert mine(sims, labels["DE"], de)[1].tolist() == [0, -1]
    assert loss.item() == pytest.approx(torch.stack(expected).mean().item())
    loss.backward()
    assert g.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="repeat"):
        Bank.of(bank()[:2], {"US": us[:2]}, ["m0", "m0"])


def test_retrieval_scores_vote_among_the_neighbours_labelled_for_each_head():
    from crossmod.models.retrieval.bank import Bank, retrieval_logits

    us, de = torch.tensor([1, 1, 0, 0, 1]), torch.tensor([0, 1, 1, -1, 0])
    the_bank = Bank.of(bank(), {"US": us, "DE": de}, ["m0", "m1", "m2", "m3", "m4"])
    scores = retrieval_logits(torch.tensor([unit(1.9)]), ["m3"], the_bank, k=2)  # m3 itself is not its own neighbour
    # US: nearest besides m3 are m2 (1.2, label 0, cos 0.7) then m4 (3.0, label 1, cos 1.1); DE skips unlabelled m3 too
    assert scores["US"].item() == pytest.approx((2 * -math.cos(0.7) + 1 * math.cos(1.1)) / 3, rel=1e-6)
    assert scores["DE"].item() == pytest.approx((2 * math.cos(0.7) - 1 * math.cos(1.1)) / 3, rel=1e-6)


def _scored_on(device: torch.device) -> dict[str, torch.Tensor]:
    """A database loaded on the host, scored by a model on `device` (what predict.py trainer=gpu does)."""
    from crossmod.models.retrieval.bank import Bank, retrieval_logits

    bank = Bank.of(torch.tensor([unit(a) for a in ANGLES]), {"US": torch.tensor([1, 1, 0, 0, 1])}, [f"b{n}" for n in range(5)])
    moved = bank.to(device)
    assert moved.embeddings.device.type == device.type and moved.labels["US"].device.type == device.type and moved.ids == bank.ids
    return {head: v.cpu() for head, v in retrieval_logits(torch.tensor([unit(0.1)], device=device), ["q"], moved, k=2).items()}


def test_a_bank_moves_to_the_scoring_device_with_its_votes_unchanged():
    # the two nearest to 0.1 rad are b0 (0.0, hateful) and b1 (0.3, hateful): (2·cos 0.1 + 1·cos 0.2) / 3
    expected = (2 * math.cos(0.1) + math.cos(0.2)) / 3
    assert _scored_on(torch.device("cpu"))["US"].item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_bank_scores_the_same_on_the_gpu():
    torch.testing.assert_close(_scored_on(torch.device("cuda")), _scored_on(torch.device("cpu")), atol=1e-5, rtol=0)

"""The baselines beside every number: scikit-learn's fits, C chosen on the selection split only, the held-out memes
scored by the model's own metric function, and a probe that becomes the head layers exactly (LP-FT)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

from crossmod.data.heads import parse_heads
from crossmod.evaluation.baselines import (
    C_GRID,
    FIXED_C,
    TFIDF,
    Stage,
    fit_logistic,
    head_weights,
    logistic_row,
    majority_probabilities,
    majority_row,
    standardized,
    tfidf_features,
)
from crossmod.models.heads import HeadLayers

HEADS = parse_heads({"US": {"kind": "binary"}, "DE": {"kind": "binary"}})


def _data(seed: int, n: int, dim: int = 6) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    us = (x[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(int)
    de = (x[:, 1] - x[:, 2] + 0.8 * rng.normal(size=n) > 0.3).astype(int)
    return x, {"US": torch.tensor(us, dtype=torch.float32), "DE": torch.tensor(de, dtype=torch.float32)}


def test_majority_is_the_training_rate_for_every_meme() -> None:
    train = torch.tensor([1.0, 1.0, 0.0, 1.0, -1.0])  # one meme unannotated: left out of the rate
    probs = majority_probabilities(train, 4, HEADS["US"])
    assert probs.tolist() == [0.75] * 4
    held_out = Stage(np.zeros((4, 1)), {"US": torch.tensor([1.0, 0.0, 0.0, 0.0]), "DE": torch.tensor([0.0, 1.0, 1.0, -1.0])})
    row = majority_row(Stage(np.zeros((5, 1)), {"US": train, "DE": torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0])}), {"test": held_out}, HEADS)
    assert row["test"]["US"]["auroc"] == 0.5  # a constant ranks nothing
    assert row["test"]["US"]["acc"] == 0.25  # the training majority (1) is right on one of four
    assert row["test"]["DE"]["acc"] == pytest.approx(2 / 3)  # the unannotated meme is not scored


def test_c_is_chosen_on_the_selection_split_only() -> None:
    x, y = _data(0, 300)
    sel_x, sel_y = _data(1, 120)
    test_x, test_y = _data(2, 150)
    model, chosen, tried = fit_logistic(Stage(x, y), Stage(sel_x, sel_y), "US", HEADS["US"])
    expected = {
        str(c): roc_auc_score(
            sel_y["US"], LogisticRegression(C=c, max_iter=2000, random_state=0).fit(x, y["US"]).predict_proba(sel_x)[:, 1]
        )
        for c in C_GRID
    }
    assert tried == pytest.approx(expected, abs=1e-6)
    assert chosen == max(C_GRID, key=lambda c: (expected[str(c)], -C_GRID.index(c)))
    # held-out memes never move the choice: other held-out labels, the same C
    _, again, _ = fit_logistic(Stage(x, y), Stage(sel_x, sel_y), "US", HEADS["US"])
    assert again == chosen
    row, _ = logistic_row("probe", Stage(x, y), Stage(sel_x, sel_y), {"test": Stage(test_x, test_y)}, HEADS)
    flipped = {k: 1 - v for k, v in test_y.items()}
    row_flipped, _ = logistic_row("probe", Stage(x, y), Stage(sel_x, sel_y), {"test": Stage(test_x, flipped)}, HEADS)
    assert row["C"] == row_flipped["C"]
    reference = LogisticRegression(C=row["C"]["US"], max_iter=2000, random_state=0).fit(x, y["US"]).predict_proba(test_x)[:, 1]
    assert row["test"]["US"]["auroc"] == pytest.approx(roc_auc_score(test_y["US"], reference), abs=1e-6)
    assert row["test"]["US"]["acc"] == pytest.approx(accuracy_score(test_y["US"], reference >= 0.5), abs=1e-6)
    assert row["test"]["mean"]["auroc"] == pytest.approx((row["test"]["US"]["auroc"] + row["test"]["DE"]["auroc"]) / 2)


def test_without_a_selection_split_c_is_fixed_and_the_rule_says_so() -> None:
    x, y = _data(0, 100)
    _, chosen, tried = fit_logistic(Stage(x, y), None, "US", HEADS["US"])
    assert (chosen, tried) == (FIXED_C, {})
    one_class = Stage(x[:20], {"US": torch.zeros(20), "DE": torch.ones(20)})  # AUROC undefined: nothing to rank by
    _, chosen, _ = fit_logistic(Stage(x, y), one_class, "US", HEADS["US"])
    assert chosen == FIXED_C
    row, _ = logistic_row("tfidf", Stage(x, y), None, {"test": Stage(x, y)}, HEADS)
    assert "no selection split" in row["rule"]


def test_tfidf_vocabulary_comes_from_the_training_texts() -> None:
    train = ["ich hasse alle", "wir lieben euch"] * 30
    held_out = ["zzzz qqqq"]
    train_x, held_x = tfidf_features(train, held_out)
    reference = TfidfVectorizer(**TFIDF).fit(train)
    assert train_x.shape == reference.transform(train).shape
    assert held_x.nnz == 0  # n-grams only the held-out memes have are not features


def test_the_probe_becomes_the_head_layers_exactly() -> None:
    """LP-FT starts fine-tuning where the probe ended: the head layers' logits are the regressions' decision functions."""
    heads = parse_heads({"US": {"kind": "binary"}, "sentiment": {"kind": "multiclass", "classes": ["neg", "neu", "pos"]}})
    x, y = _data(3, 200)
    y["sentiment"] = torch.tensor(np.digitize(x[:, 3], [-0.5, 0.5]), dtype=torch.long)
    raw = x * 3.0 + 1.0
    (scaled,), mean, std = standardized(raw)
    layers = HeadLayers(raw.shape[1], heads)
    with torch.no_grad():
        for name, head in heads.items():
            model, _, _ = fit_logistic(Stage(scaled, y), None, name, head)
            weight, bias = head_weights(model, head, mean, std)
            layers.linear.weight[layers.rows(name)] = weight
            layers.linear.bias[layers.rows(name)] = bias
            logits = layers(torch.tensor(raw, dtype=torch.float32))[name]
            probs = logits.sigmoid() if head.is_binary else logits.softmax(-1)
            expected = model.predict_proba(scaled)
            expected = expected[:, 1] if head.is_binary else expected
            assert np.allclose(probs.numpy(), expected, atol=1e-4), name


def test_a_head_with_one_class_in_training_answers_that_class() -> None:
    x, _ = _data(0, 50)
    labels = {"US": torch.ones(50), "DE": torch.zeros(50)}
    row, models = logistic_row("probe", Stage(x, labels), None, {"test": Stage(x, {"US": torch.ones(50), "DE": torch.zeros(50)})}, HEADS)
    assert math.isnan(row["test"]["US"]["auroc"]) and row["test"]["US"]["acc"] == 1.0
    weight, bias = head_weights(models["US"], HEADS["US"], np.zeros(6), np.ones(6))
    assert float(weight.abs().sum()) == 0.0 and float(bias[0]) > 5

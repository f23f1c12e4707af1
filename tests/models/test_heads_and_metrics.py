"""Heads, masked losses and epoch metrics against independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.metrics import accuracy_score, f1_score, hamming_loss, roc_auc_score

from crossmod.data.heads import Head, parse_heads
from crossmod.evaluation.metrics import HeadMetrics
from crossmod.models.heads import HeadLayers, masked_loss

HEADS = parse_heads(
    {
        "US": {"kind": "binary"},
        "sentiment": {"kind": "multiclass", "classes": ["neg", "neu", "pos"]},
        "emotion": {"kind": "multilabel", "classes": ["a", "b", "c", "d"]},
    }
)
BINARY = {name: Head(name, "binary") for name in ("US", "DE")}


def test_head_layers_shapes_and_rows():
    layers = HeadLayers(16, HEADS)
    features = torch.randn(5, 16)
    logits = layers(features)
    assert logits["US"].shape == (5,)
    assert logits["sentiment"].shape == (5, 3)
    assert logits["emotion"].shape == (5, 4)
    rows = layers.rows("sentiment")
    assert (rows.start, rows.stop) == (1, 4)
    expected = features @ layers.linear.weight[rows].T + layers.linear.bias[rows]
    torch.testing.assert_close(logits["sentiment"], expected)  # float32 tolerances: addmm and matmul+add round apart
    with pytest.raises(KeyError, match="'DE' is not a head"):
        layers.rows("DE")


@pytest.mark.parametrize(
    "name, logits, target",
    [
        ("US", torch.tensor([2.0, -1.0, 0.5]), torch.tensor([1.0, -1.0, 0.0])),
        ("sentiment", torch.randn(3, 3), torch.tensor([2, -1, 0])),
        ("emotion", torch.randn(3, 4), torch.tensor([[1.0, 0, 0, 1], [-1, -1, -1, -1], [0, 1, 0, 0]])),
    ],
)
def test_masked_loss_ignores_unannotated_items(name, logits, target):
    head = HEADS[name]
    loss, count = masked_loss(logits, target, head)
    keep = [0, 2]
    expected, _ = masked_loss(logits[keep], target[keep], head)
    assert count == 2
    assert torch.allclose(loss, expected)
    changed = logits.clone()
    changed[1] = changed[1] + 100  # the unannotated item's logits must not matter
    assert torch.allclose(masked_loss(changed, target, head)[0], loss)


def test_masked_loss_per_kind_equals_torch_on_the_annotated_items():
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.0], [0.3, 0.2, -2.0, 1.0]])
    emotion = torch.tensor([[1.0, 0, 0, 1], [0, 1, 1, 0]])
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, emotion)  # mean over items and labels
    assert torch.allclose(masked_loss(logits, emotion, HEADS["emotion"])[0], expected)
    sentiment = torch.tensor([2, 0])
    expected = torch.nn.functional.cross_entropy(logits[:, :3], sentiment)
    assert torch.allclose(masked_loss(logits[:, :3], sentiment, HEADS["sentiment"])[0], expected)
    us = torch.tensor([1.0, 0.0])
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[:, 0], us)
    assert torch.allclose(masked_loss(logits[:, 0], us, HEADS["US"])[0], expected)


def test_all_unannotated_gives_zero_loss_not_nan():
    loss, count = masked_loss(torch.randn(4), torch.full((4,), -1.0), HEADS["US"])
    assert count == 0 and loss.item() == 0.0


def test_epoch_metrics_match_sklearn_and_skip_missing_labels():
    rng = np.random.default_rng(0)
    metric = HeadMetrics(BINARY)
    all_logits, all_us, all_de = [], [], []
    for _ in range(4):
        logits = {h: torch.tensor(rng.normal(size=16), dtype=torch.float32) for h in ("US", "DE")}
        us = torch.tensor(rng.integers(0, 2, 16), dtype=torch.float32)
        de = torch.tensor(rng.integers(-1, 2, 16), dtype=torch.float32)  # some items unannotated for DE
        metric.update(logits, {"US": us, "DE": de})
        all_logits.append(logits), all_us.append(us), all_de.append(de)
    result = metric.compute()
    us_probs = torch.cat([lg["US"] for lg in all_logits]).sigmoid().numpy()
    us_target = torch.cat(all_us).numpy()
    assert result["US/auroc"] == pytest.approx(roc_auc_score(us_target, us_probs), abs=1e-6)
    assert result["US/acc"] == pytest.approx(accuracy_score(us_target, us_probs >= 0.5), abs=1e-6)
    assert result["US/f1"] == pytest.approx(f1_score(us_target, us_probs >= 0.5), abs=1e-6)
    de_probs = torch.cat([lg["DE"] for lg in all_logits]).sigmoid().numpy()
    de_target = torch.cat(all_de).numpy()
    keep = de_target >= 0
    assert result["DE/auroc"] == pytest.approx(roc_auc_score(de_target[keep], de_probs[keep]), abs=1e-6)
    assert result["mean/auroc"] == pytest.approx((result["US/auroc"] + result["DE/auroc"]) / 2)


def test_auroc_is_nan_when_a_head_has_one_class_and_the_mean_skips_it():
    metric = HeadMetrics(BINARY)
    metric.update(
        {"US": torch.tensor([0.1, 0.9]), "DE": torch.tensor([0.3, 0.2])}, {"US": torch.tensor([0.0, 1.0]), "DE": torch.tensor([1.0, 1.0])}
    )
    result = metric.compute()
    assert math.isnan(result["DE/auroc"])
    assert result["mean/auroc"] == result["US/auroc"] == 1.0


def test_multiclass_and_multilabel_metrics():
    metric = HeadMetrics({k: HEADS[k] for k in ("sentiment", "emotion")})
    logits = {"sentiment": torch.eye(3)[[0, 1, 2, 0]] * 5, "emotion": torch.tensor([[5.0, -5, -5, 5]] * 4)}
    labels = {"sentiment": torch.tensor([0, 1, 2, -1]), "emotion": torch.tensor([[1.0, 0, 0, 1]] * 3 + [[-1.0] * 4])}
    metric.update(logits, labels)
    result = metric.compute()
    assert result["sentiment/acc"] == 1.0
    assert result["emotion/acc"] == 1.0


def _sklearn_scores(kind: str, probs: np.ndarray, target: np.ndarray) -> dict[str, float]:
    """The scikit-learn reference for each head kind (multilabel accuracy: the share of correct label decisions)."""
    if kind == "multiclass":
        auroc = roc_auc_score(target, probs, multi_class="ovr", average="macro", labels=list(range(probs.shape[1])))
        decided = probs.argmax(1)
        return {"auroc": auroc, "acc": accuracy_score(target, decided), "f1": f1_score(target, decided, average="macro")}
    decided = (probs >= 0.5).astype(int)
    return {
        "auroc": roc_auc_score(target, probs, average="macro"),
        "acc": 1 - hamming_loss(target, decided),
        "f1": f1_score(target, decided, average="macro"),
    }


@pytest.mark.parametrize("kind", ["multiclass", "multilabel"])
def test_multiclass_and_multilabel_scores_equal_sklearn(kind):
    rng = np.random.default_rng(1)
    head = HEADS["sentiment" if kind == "multiclass" else "emotion"]
    width = head.width
    logits = torch.tensor(rng.normal(size=(60, width)), dtype=torch.float32)
    target = torch.tensor(rng.integers(0, width, 60)) if kind == "multiclass" else torch.tensor(rng.integers(0, 2, (60, width)))
    metric = HeadMetrics({"h": head})
    for rows in torch.arange(60).split(16):  # several steps, one epoch
        metric.update({"h": logits[rows]}, {"h": target[rows]})
    result = metric.compute()
    probs = (logits.softmax(-1) if kind == "multiclass" else logits.sigmoid()).numpy()
    expected = _sklearn_scores(kind, probs, target.numpy())
    for name in ("auroc", "acc", "f1"):
        assert result[f"h/{name}"] == pytest.approx(expected[name], abs=1e-6), name
    assert metric.undefined == {}


@pytest.mark.parametrize(
    "kind, target, reason",
    [
        ("binary", [1, 1, 1, 1], "one class only: all 4 annotated items are 1"),
        ("multiclass", [0, 0, 2, 2], "class 'neu' absent from the 4 annotated items"),
        ("multiclass", [1, 1, 1, 1], "class 'neg', 'pos' absent from the 4 annotated items"),
        ("multilabel", [[1, 0, 1, 0], [1, 1, 0, 0], [1, 0, 0, 1], [1, 1, 1, 0]], "label 'a' is 1 in all 4 annotated items"),
    ],
)
def test_undefined_auroc_is_nan_for_every_kind_as_in_sklearn(kind, target, reason):
    head = {"binary": HEADS["US"], "multiclass": HEADS["sentiment"], "multilabel": HEADS["emotion"]}[kind]
    logits = torch.tensor(np.random.default_rng(2).normal(size=(4, head.width)), dtype=torch.float32).squeeze(-1)
    metric = HeadMetrics({"h": head, "US": HEADS["US"]})
    metric.update({"h": logits, "US": torch.tensor([0.2, 0.8, 0.3, 0.9])}, {"h": torch.tensor(target), "US": torch.tensor([0, 1, 0, 1])})
    result = metric.compute()
    probs = (logits.softmax(-1) if kind == "multiclass" else logits.sigmoid()).numpy()
    with pytest.warns(UndefinedMetricWarning):
        if kind == "multiclass":
            reference = roc_auc_score(np.array(target), probs, multi_class="ovr", labels=[0, 1, 2])
        else:
            reference = roc_auc_score(np.array(target), probs)
    assert math.isnan(reference) and math.isnan(result["h/auroc"])
    assert result["mean/auroc"] == result["US/auroc"] == 1.0  # the undefined head is left out, not counted as 0
    assert metric.undefined == {"h": f"auroc undefined ({reason})"}


@pytest.mark.parametrize("kind", ["binary", "multiclass", "multilabel"])
def test_majority_rate_is_the_accuracy_of_always_answering_the_most_frequent_class(kind):
    """scikit-learn's DummyClassifier(most_frequent) accuracy on the same labels (per label, averaged, for multilabel)."""
    from sklearn.dummy import DummyClassifier
    from sklearn.metrics import accuracy_score

    rng = np.random.default_rng(3)
    head = HEADS["sentiment"] if kind == "multiclass" else HEADS["emotion"] if kind == "multilabel" else BINARY["US"]
    width = 1 if kind == "binary" else head.width
    target = rng.integers(0, 2, (50, width)) if kind == "multilabel" else rng.choice(width if kind == "multiclass" else 2, 50, p=None)
    if kind == "binary":
        target = (rng.random(50) < 0.8).astype(int)  # imbalanced: 80 % ones
    logits = torch.zeros(50, width) if kind != "binary" else torch.zeros(50)
    metric = HeadMetrics({"h": head})
    metric.update({"h": logits}, {"h": torch.tensor(target)})
    columns = target.T if kind == "multilabel" else [target]
    expected = np.mean(
        [accuracy_score(y, DummyClassifier(strategy="most_frequent").fit(np.zeros((50, 1)), y).predict(np.zeros((50, 1)))) for y in columns]
    )
    assert metric.compute()["h/majority"] == pytest.approx(expected)

"""The baselines every per-culture number stands beside, on the same memes: the majority class, TF-IDF character
n-grams + logistic regression, and a frozen-encoder linear probe (logistic regression on the pretrained encoder's
pooled features).

Each is fitted on the training memes only; its regularization strength C is chosen per head by AUROC on the
selection split only (C = 1 where a run has no selection split, and the rule says so); the held-out memes are scored
once, by `crossmod.evaluation.metrics.head_scores`, the function that scores the model. Pure functions of features and
labels: scikit-learn does the fitting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from crossmod.data.heads import Head, label_mask
from crossmod.evaluation.metrics import auroc_undefined, head_scores, macro_mean

C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)  # logistic regression strengths tried on the selection split
FIXED_C = 1.0  # without a selection split nothing may choose: scikit-learn's default strength
TFIDF = {"analyzer": "char_wb", "ngram_range": (2, 4), "sublinear_tf": True, "min_df": 2, "max_features": 200_000}
LABELS = {"majority": "majority", "tfidf": "TF-IDF+LR", "probe": "probe"}  # the tables' column headings
NAMES = {
    "majority": "majority class",
    "tfidf": "TF-IDF char 2-4-grams + logistic regression",
    "probe": "frozen-encoder linear probe (logistic regression)",
}


@dataclass
class Stage:
    """One stage's memes as a baseline sees them: features (rows: memes; dense or sparse) and each head's labels
    (`Head.labels`: -1, or a row of -1, where a meme was not annotated for that head)."""

    features: Any
    labels: dict[str, torch.Tensor]

    def __len__(self) -> int:
        return int(self.features.shape[0])


def _targets(labels: torch.Tensor, head: Head) -> tuple[np.ndarray, np.ndarray]:
    mask = label_mask(labels).numpy()
    return mask, labels.numpy()[mask].astype(np.int64)


def _probabilities(model: Any, features: Any, head: Head) -> np.ndarray:
    """P(class) in the layout `head_scores` reads: P(1) for binary heads, one column per class (multiclass) or label."""
    if head.kind == "multilabel":
        return np.stack([_positive(m, features) for m, _ in model], 1)
    if head.is_binary:
        return _positive(model, features)
    probs = model.predict_proba(features)
    full = np.zeros((features.shape[0], head.width))
    full[:, model.classes_] = probs
    return full


class Constant:
    """What answers a head whose training memes carry one class: that class's rate, for every meme."""

    def __init__(self, rate: np.ndarray, classes: list[int]) -> None:
        self.rate, self.classes_ = rate, np.array(classes)

    def predict_proba(self, features: Any) -> np.ndarray:
        return np.tile(self.rate, (features.shape[0], 1))


def _positive(model: Any, features: Any) -> np.ndarray:
    """P(1) of a binary model (0 where training never saw class 1)."""
    classes = list(model.classes_)
    return model.predict_proba(features)[:, classes.index(1)] if 1 in classes else np.zeros(features.shape[0])


def _fit(features: Any, target: np.ndarray, head: Head, c: float, seed: int) -> Any:
    from sklearn.linear_model import LogisticRegression  # here: scikit-learn is only needed where a baseline is fitted

    def one(y: np.ndarray) -> Any:
        if len(set(y.tolist())) < 2:
            return Constant(np.array([1.0]), [int(y[0])] if len(y) else [0])
        return LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(features, y)

    if head.kind == "multilabel":  # one binary model per label
        return [(one(target[:, i]), float(target[:, i].mean()) if len(target) else 0.0) for i in range(head.width)]
    return one(target)


def _auroc(features: Any, labels: torch.Tensor, model: Any, head: Head) -> float:
    probs = torch.as_tensor(_probabilities(model, features, head), dtype=torch.float32)
    return head_scores(probs, labels, head)["auroc"]


def majority_probabilities(train: torch.Tensor, count: int, head: Head) -> torch.Tensor:
    """What always answering the training memes' class frequencies gives `count` memes: a constant (AUROC 0.5, the
    decisions those of the training majority)."""
    mask = label_mask(train)
    seen = train[mask].float()
    if head.kind == "multiclass":
        rates = torch.bincount(seen.long(), minlength=head.width).float() / max(len(seen), 1)
        return rates.expand(count, head.width).clone()
    rate = seen.mean(0) if len(seen) else torch.zeros(head.width if head.kind == "multilabel" else ())
    return rate.expand(count, *rate.shape).clone()


def fit_logistic(
    train: Stage, selection: Stage | None, head_name: str, head: Head, grid: Sequence[float] = C_GRID, seed: int = 0
) -> tuple[Any, float, dict[str, float]]:
    """Logistic regression of one head on the training memes, C chosen by the selection split's AUROC (the first best
    of the grid; FIXED_C where the selection split cannot rank: absent, or one class only). Returns the model, C and
    the selection AUROC of each C tried."""
    mask, target = _targets(train.labels[head_name], head)
    features = train.features[mask]
    if not _rankable(selection, head_name, head):
        return _fit(features, target, head, FIXED_C, seed), FIXED_C, {}
    assert selection is not None
    tried: dict[str, float] = {}
    best: tuple[float, float, Any] | None = None
    for c in grid:
        model = _fit(features, target, head, c, seed)
        auroc = _auroc(selection.features, selection.labels[head_name], model, head)
        tried[str(c)] = auroc
        if best is None or (not math.isnan(auroc) and (math.isnan(best[0]) or auroc > best[0])):
            best = (auroc, c, model)
    assert best is not None
    return best[2], best[1], tried


def _rankable(selection: Stage | None, head_name: str, head: Head) -> bool:
    """Whether AUROC is defined on the selection split's labels of this head (annotated memes of every class)."""
    if selection is None or not len(selection):
        return False
    labels = selection.labels[head_name]
    return auroc_undefined(labels[label_mask(labels)], head) is None


def stage_scores(probs: dict[str, torch.Tensor], labels: dict[str, torch.Tensor], heads: dict[str, Head]) -> dict[str, Any]:
    """Per-head scores (the model's metrics) and their macro mean."""
    per_head = {name: head_scores(probs[name], labels[name], head) for name, head in heads.items()}
    return {**per_head, "mean": macro_mean(per_head)}


def majority_row(train: Stage, scored: dict[str, Stage], heads: dict[str, Head]) -> dict[str, Any]:
    """The majority baseline's scores on each scored stage (e.g. val, test)."""
    row: dict[str, Any] = {"name": NAMES["majority"], "rule": "the training memes' class frequencies, answered for every meme"}
    for stage, memes in scored.items():
        probs = {n: majority_probabilities(train.labels[n], len(memes), h) for n, h in heads.items()}
        row[stage] = stage_scores(probs, memes.labels, heads)
    return row


def logistic_row(
    kind: str, train: Stage, selection: Stage | None, scored: dict[str, Stage], heads: dict[str, Head], seed: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A logistic-regression baseline (`kind`: tfidf or probe) on given features: its scores on each scored stage, the
    C each head chose and the rule; plus the fitted models per head (the probe's become LP-FT's head layers)."""
    from threadpoolctl import threadpool_limits

    models, chosen, tried = {}, {}, {}
    # one BLAS thread: L-BFGS's vector steps are tiny, and a threaded BLAS spends 5-8x their time waking threads that
    # compete with the run's own (measured on 261 memes x 730 n-grams, 2 cores; the same coefficients either way)
    with threadpool_limits(limits=1, user_api="blas"):
        for name, head in heads.items():
            models[name], chosen[name], tried[name] = fit_logistic(train, selection, name, head, seed=seed)
    rule = (
        f"C per head from {list(C_GRID)} by AUROC on the selection split; fitted on the training memes"
        if any(tried.values())
        else f"C = {FIXED_C} (no selection split to choose on); fitted on the training memes"
    )
    row: dict[str, Any] = {"name": NAMES[kind], "rule": rule, "C": chosen, "selection_auroc_by_C": tried}
    for stage, memes in scored.items():
        probs = {n: torch.as_tensor(_probabilities(models[n], memes.features, h), dtype=torch.float32) for n, h in heads.items()}
        row[stage] = stage_scores(probs, memes.labels, heads)
    return row, models


def tfidf_features(train_texts: Sequence[str], *others: Sequence[str]) -> tuple[Any, ...]:
    """TF-IDF character n-grams (inside word boundaries, 2-4), vocabulary and weights from the training texts only."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    min_df = TFIDF["min_df"] if len(train_texts) >= 50 else 1  # a tiny training set keeps every n-gram it has
    vectorizer = TfidfVectorizer(**{**TFIDF, "min_df": min_df})
    return (vectorizer.fit_transform(train_texts), *(vectorizer.transform(texts) for texts in others))


def standardized(train: np.ndarray, *others: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
    """Features scaled by the training memes' mean and std (what the probe fits on), with that mean and std."""
    mean, std = train.mean(0), train.std(0)
    std = np.where(std > 1e-8, std, 1.0)
    return tuple((x - mean) / std for x in (train, *others)), mean, std


def _binary_row(model: Any, mean: np.ndarray) -> tuple[np.ndarray, float]:
    if isinstance(model, Constant):  # one class in training: a large logit of that class, no feature weight
        return np.zeros_like(mean), 10.0 if 1 in list(model.classes_) else -10.0
    return model.coef_[0], float(model.intercept_[0])


def head_weights(model: Any, head: Head, mean: np.ndarray, std: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """A probe's logistic regression as the linear layer rows of `head` on the raw (unscaled) features: logits equal
    the regression's decision function, so LP-FT's fine-tuning starts where the probe ended."""
    if head.kind == "multilabel":
        rows = [_binary_row(m, mean) for m, _ in model]
        coef, bias = np.stack([r[0] for r in rows]), np.array([r[1] for r in rows])
    elif head.is_binary:
        coef, bias = _binary_row(model, mean)
        coef, bias = coef[None], np.array([bias])
    elif isinstance(model, Constant):
        coef, bias = np.zeros((head.width, mean.shape[0])), np.full(head.width, -10.0)
        bias[model.classes_] = 10.0
    else:
        coef, bias = np.zeros((head.width, mean.shape[0])), np.full(head.width, -30.0)
        coef[model.classes_], bias[model.classes_] = model.coef_, model.intercept_
        if len(model.classes_) == 2:  # scikit-learn keeps one row for two classes: logit(second) - logit(first)
            coef[model.classes_] = np.stack([-model.coef_[0] / 2, model.coef_[0] / 2])
            bias[model.classes_] = np.array([-model.intercept_[0] / 2, model.intercept_[0] / 2])
    weight = coef / std
    return torch.as_tensor(weight, dtype=torch.float32), torch.as_tensor(bias - weight @ mean, dtype=torch.float32)

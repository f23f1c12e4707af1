"""The one reader of crossmod's predictions files (`predictions/{val,test}.csv`: id, head, probability, label).

Probabilities of binary heads are numbers, of multiclass/multilabel heads JSON lists; an empty label
means "not annotated". Everything that scores predictions after a run reads them here.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

COLUMNS = ("id", "head", "probability", "label")


def read_prediction_columns(path: str | Path) -> dict[str, list[Any]]:
    """Columnar copy of a predictions CSV; JSON cells decoded, empty labels as None."""
    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            columns["id"].append(row["id"])
            columns["head"].append(row["head"])
            columns["probability"].append(json.loads(row["probability"]))
            columns["label"].append(None if row["label"] == "" else json.loads(row["label"]))
    return columns


def binary_scores(columns: dict[str, list[Any]]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """Binary heads only (scalar probabilities): head → id → P, and head → id → label where annotated."""
    probs: dict[str, dict[str, float]] = {}
    labels: dict[str, dict[str, int]] = {}
    for sample_id, head, prob, label in zip(columns["id"], columns["head"], columns["probability"], columns["label"]):
        if isinstance(prob, list):
            continue
        probs.setdefault(head, {})[sample_id] = prob
        if label is not None:
            labels.setdefault(head, {})[sample_id] = label
    return probs, labels


def labelled_pairs(probs: dict[str, dict[str, float]], labels: dict[str, dict[str, int]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per head with labels: (labels, probabilities) over its labelled ids that were scored, in id order, as ROC
    curves take them (labels of memes never scored, as in a run with limited test batches, are left out)."""
    pairs = {}
    for head in probs:
        ids = sorted(set(labels.get(head, {})) & set(probs[head]))
        if ids:
            pairs[head] = (np.array([labels[head][i] for i in ids]), np.array([probs[head][i] for i in ids]))
    return pairs

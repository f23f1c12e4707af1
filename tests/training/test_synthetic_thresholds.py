"""The synthetic memes behave as designed when trained for real (fixed seeds, default budget).

Fusion must reach val mean AUROC >= 0.90; text-only and image-only stay <= 0.75 on the same budget;
a model trained on one culture's labels scores measurably lower against a disagreeing culture's labels.
"""

from __future__ import annotations

import pytest

from datamodules.folds import iter_records
from datamodules.shards import read_manifest
from evaluation.alignment import alignment_matrix, read_predictions

pytestmark = pytest.mark.slow


def _val_mean_auroc(train_run, *overrides: str) -> float:
    train_run(*overrides, "test=false", "seed=1234")
    (run_dir,) = train_run.run_dirs("synthetic_concat")
    return train_run.metrics(run_dir)["best"]["val"]["mean"]["auroc"]


def test_default_fusion_reaches_the_threshold(train_run):
    assert _val_mean_auroc(train_run) >= 0.90


@pytest.mark.parametrize("model", ["text_only", "image_only"])
def test_unimodal_models_stay_below_the_ceiling(train_run, model):
    assert _val_mean_auroc(train_run, f"model={model}") <= 0.75


def test_one_culture_model_scores_lower_on_a_disagreeing_culture(train_run):
    only_us = [f"~data.heads.{c}" for c in ("DE", "MX", "IN", "CN")]
    train_run(*only_us, "seed=1234")
    (run_dir,) = train_run.run_dirs("synthetic_concat")
    probs, _ = read_predictions(run_dir / "predictions" / "test.csv")
    assert set(probs) == {"US"}
    # Every culture's labels for the same test memes, read from the shards the run used.
    dataset_dir = next((train_run.data_dir / "shards").glob("synthetic-*/manifest.json")).parent
    manifest = read_manifest(dataset_dir)
    test_shards = [s["name"] for s in manifest["shards"] if s["split"] == "test"]
    labels: dict[str, dict[str, int]] = {}
    for record in iter_records(dataset_dir, test_shards):
        for culture, value in record["labels"].items():
            labels.setdefault(culture, {})[record["id"]] = value
    matrix = alignment_matrix(probs, labels)["US"]
    assert matrix["US"] >= 0.85
    assert matrix["US"] - matrix["CN"] >= 0.05, matrix
    assert max(matrix, key=matrix.get) == "US", matrix

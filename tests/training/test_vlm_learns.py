"""VLMs learn the synthetic memes' cultural rule through crossmod, and both modalities reach the classifier.

A tiny random VLM trained by `python train.py experiment=synthetic_vlm` (head mode) must reach val mean AUROC
≥ 0.90; the same run with the image or the caption removed at load time (`data.ablate`) must
fall to what the remaining modality allows (the generator's measured ceiling on the val split +
CEILING_TOLERANCE). A bug that drops or misplaces the image tokens, reads the wrong position or trains the
wrong weights fails here. Two more families must reach ≥ 0.85 in head mode.
"""

from __future__ import annotations

import pytest

from scripts.zoo_table import TINY_VLM, val_ceiling
from tests.training.test_synthetic_thresholds import CEILING_TOLERANCE

pytestmark = pytest.mark.slow


def _train(train_run, experiment: str, *overrides: str) -> tuple[dict, object]:
    train_run(f"experiment={experiment}", "seed=1234", "test=false", *overrides, timeout=1200)
    (run_dir,) = train_run.run_dirs(experiment)
    return train_run.metrics(run_dir), run_dir


@pytest.mark.parametrize("ablate, view", [(None, None), ("image", "text_only"), ("text", "image_only")])
def test_qwen2_vl_head_learns_the_rule_from_both_modalities(train_run, ablate, view):
    metrics, run_dir = _train(train_run, "synthetic_vlm", *([f"data.ablate={ablate}"] if ablate else []))
    score = metrics["best"]["val"]["mean"]["auroc"]
    if ablate is None:
        assert score >= 0.90
        assert metrics["parameters"]["trained"] == metrics["parameters"]["total"]  # full fine-tuning, as the recipe says
    else:
        assert score <= val_ceiling(run_dir, view) + CEILING_TOLERANCE, (ablate, score)


@pytest.mark.parametrize("kind", ["gemma3", "smolvlm"])
def test_other_families_learn_the_rule_in_head_mode(train_run, kind):
    metrics, _ = _train(train_run, "synthetic_vlm", TINY_VLM.format(kind=kind))
    assert metrics["best"]["val"]["mean"]["auroc"] >= 0.85, kind

"""Two more VLM families (Gemma 3, SmolVLM) learn the synthetic memes' rule in head mode: val mean AUROC ≥ 0.85.

Each run stops at its first validation reaching the threshold (tests/conftest.py stop_once_reached): the question is
whether the recipe's first 4 epochs reach it, as in the zoo's 6-epoch runs (margins: scripts/learning_margins.py).
"""

from __future__ import annotations

import pytest

from scripts.learning_margins import CHECKS
from scripts.zoo_table import TINY_VLM
from tests.conftest import TrainRun, stop_once_reached

pytestmark = pytest.mark.slow


def _train(train_run: TrainRun, experiment: str, *overrides: str) -> tuple[dict, object]:
    train_run(f"experiment={experiment}", "seed=1234", "test=false", *overrides, timeout=1200)
    (run_dir,) = train_run.log_dir.glob("*/runs/*")
    return train_run.metrics(run_dir), run_dir


@pytest.mark.parametrize("kind", ["gemma3", "smolvlm"])
def test_other_families_learn_the_rule_in_head_mode(train_run, kind):
    threshold = CHECKS[f"{kind}_head"].threshold
    metrics, _ = _train(train_run, "synthetic_vlm", TINY_VLM.format(kind=kind), "trainer.max_epochs=4", stop_once_reached(threshold))
    assert metrics["best"]["val"]["mean"]["auroc"] >= threshold, kind

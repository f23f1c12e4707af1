"""The tag generator (ToxicTags' recipe) writes the synthetic memes' tags far better than the same model untrained."""

from __future__ import annotations

import json

import pytest

from scripts.learning_margins import CHECKS

pytestmark = pytest.mark.slow


def test_tag_generator_writes_the_tags_far_better_than_untrained(train_run):
    """Tag similarity of the test memes' greedy tags, trained vs the same model with no training (side by side)."""
    similarity = {}
    for name, epochs in (("untrained", 0), ("trained", None)):
        overrides = ["experiment=synthetic_tag_generator", "seed=1234", *([f"trainer.max_epochs={epochs}"] if epochs == 0 else [])]
        train_run(*overrides, env={"CROSSMOD_RUN_ID": name}, timeout=1200)
        run_dir = train_run.log_dir / "synthetic_tag_generator" / "runs" / name
        similarity[name] = train_run.metrics(run_dir)["best"]["test"]["tags"]["similarity"]
        rows = [json.loads(line) for line in (run_dir / "tags" / "test.jsonl").read_text().splitlines()]
        assert len(rows) == train_run.metrics(run_dir)["best"]["test"]["tags"]["memes"]
    assert similarity["trained"] >= CHECKS["tag_generator"].threshold and similarity["trained"] - similarity["untrained"] >= 0.3, similarity

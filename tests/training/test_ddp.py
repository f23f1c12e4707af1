"""Two DDP processes on CPU (gloo), two loader workers each, shards that do not divide evenly."""

from __future__ import annotations

import csv
import json
from collections import Counter

from tests.conftest import SMALL_DATA


def test_ddp_two_processes_score_every_eval_sample_exactly_once(train_run):
    train_run(
        "trainer=ddp_cpu",
        "data.num_workers=2",
        "trainer.max_epochs=2",
        *SMALL_DATA,
        "data.samples_per_shard=23",
        "data.eval_batch_size=5",
        timeout=600,
    )
    (run_dir,) = train_run.run_dirs("synthetic_concat")
    manifest_counts = json.loads((run_dir / "manifest.json").read_text())["counts"]["split"]
    for stage, split in (("val", "val"), ("test", "test")):
        rows = list(csv.DictReader(open(run_dir / "predictions" / f"{stage}.csv")))
        per_id = Counter(row["id"] for row in rows)
        assert len(per_id) == manifest_counts[split], f"{stage}: {len(per_id)} ids vs {manifest_counts[split]} in the manifest"
        assert set(per_id.values()) == {5}, f"{stage}: some sample scored more or less than once per head"
    assert not list((run_dir / "predictions").glob("*.rank*.csv"))
    metrics = train_run.metrics(run_dir)
    assert metrics["best"]["val"]["mean"]["auroc"] is not None

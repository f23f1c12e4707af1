"""Two DDP processes on CPU (gloo), two loader workers each, shards that do not divide evenly."""

from __future__ import annotations

import csv
import json
from collections import Counter

from tests.conftest import SMALL_DATA, scaled


def test_ddp_two_processes_score_every_eval_sample_exactly_once(train_run):
    result = train_run(
        "trainer=ddp_cpu",
        "data.num_workers=2",
        "trainer.max_epochs=2",
        *SMALL_DATA,
        "data.samples_per_shard=23",
        "data.eval_batch_size=5",
        timeout=scaled(600),
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
    assert "broadcast_buffers" not in result.stdout + result.stderr  # torch's rename notice, filtered (src/crossmod/runtime/console.py)


def test_ddp_fold_run_scores_the_held_out_fold_once_and_selects_without_it(train_run):
    """Two ranks, inner selection: the held-out fold is scored exactly once as test and never validated on."""
    train_run(
        "trainer=ddp_cpu", "data.num_workers=2", "trainer.max_epochs=1", "fold=1", "num_folds=3", "+data.val_splits=[]", *SMALL_DATA,
        "data.samples_per_shard=23", timeout=scaled(600),
    )  # fmt: skip
    (run_dir,) = train_run.run_dirs("synthetic_concat")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assignment = next(e for e in manifest["folds"] if e["num_folds"] == 3)["assignment"]
    fold_result = json.loads((run_dir / "fold_result.json").read_text())
    groups = {i: i.rsplit("/", 2)[0] for i in fold_result["held_out_labels"]}
    held_out = {i for i, g in groups.items() if assignment[g] == 1}
    assert held_out and held_out == set(groups)
    tested = Counter(row["id"] for row in csv.DictReader(open(run_dir / "predictions" / "test.csv")))
    assert set(tested) == held_out and set(tested.values()) == {5}  # every held-out meme once per head, over both ranks
    validated = {row["id"] for row in csv.DictReader(open(run_dir / "predictions" / "val.csv"))}
    assert validated and not validated & held_out
    assert fold_result["selection"]["rule"] == "inner"

"""A run folder cannot lie about what it held out: `evaluate.py split=auto` checks the run's manifest copy.

`split=auto` scores a fold run on its held-out fold, as the `manifest.json` copy in its run folder
assigns groups to folds. The attacks edit that copy of a real fold run: groups of another fold swapped
into the held-out fold (the same counts, so every other check passes), and the fold entry rewritten
to divide other splits (the run's config changed to match). Unchecked, the report scores memes the
run trained on and calls them "held-out fold 0". Each must be refused, naming the run's copy and the
dataset's own manifest, with nothing scored and no report written.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, SMALL_DATA, TrainRun, scaled
from tests.zygote import run_python


@pytest.fixture(scope="module")
def fold_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = TrainRun(data_dir, tmp_path_factory.mktemp("fold_run"))
    runs("fold=0", "num_folds=3", "debug=limit", "trainer.limit_test_batches=1.0", *SMALL_DATA, env={"CROSSMOD_RUN_ID": "f0"})
    return runs.log_dir / "synthetic_concat" / "runs" / "f0"


def _evaluate(run: Path, data_dir: Path, out: Path) -> subprocess.CompletedProcess:
    return run_python(
        [sys.executable, str(ROOT / "evaluate.py"), f"ckpt={run}", f"paths.data_dir={data_dir}", *SMALL_DATA, f"out={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )


def _entry(manifest: dict) -> dict:
    (entry,) = [e for e in manifest["folds"] if e["num_folds"] == 3 and e["seed"] == 0]
    return entry


def _dataset_manifest(run: Path) -> Path:
    config = yaml.safe_load((run / "config.yaml").read_text())
    copy = json.loads((run / "manifest.json").read_text())
    return Path(config["paths"]["data_dir"]) / "shards" / f"{copy['dataset']}-{copy['fingerprint']}" / "manifest.json"


def _swap_folds(entry: dict) -> None:
    """Move held-out groups to fold 1 and as many fold-1 groups into fold 0: same fold sizes in groups."""
    held = [g for g, k in entry["assignment"].items() if k == 0][:3]
    other = [g for g, k in entry["assignment"].items() if k == 1][:3]
    for group in held:
        entry["assignment"][group] = 1
    for group in other:
        entry["assignment"][group] = 0


def test_an_altered_fold_assignment_in_the_run_folder_is_refused(fold_run, data_dir, tmp_path):
    run = Path(shutil.copytree(fold_run, tmp_path / "run"))
    manifest = json.loads((run / "manifest.json").read_text())
    _swap_folds(_entry(manifest))
    (run / "manifest.json").write_text(json.dumps(manifest))

    result = _evaluate(run, data_dir, tmp_path / "report")

    assert result.returncode != 0, "the altered run folder was scored on memes it trained on"
    assert str(run / "manifest.json") in result.stderr and str(_dataset_manifest(run)) in result.stderr, result.stderr[-3000:]
    assert "fold assignment" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "report").exists()


def test_a_fold_entry_claiming_other_splits_is_refused(fold_run, data_dir, tmp_path):
    """The copy's folds divide train and val (config changed to match), so val memes count as held out."""
    run = Path(shutil.copytree(fold_run, tmp_path / "run"))
    manifest = json.loads((run / "manifest.json").read_text())
    entry = _entry(manifest)
    dataset = json.loads(_dataset_manifest(run).read_text())
    val_groups = sorted({g for g in _groups_of(run, "val")} - set(entry["assignment"]))
    assert val_groups, "the dataset has no val groups to smuggle in"
    entry["splits"] = ["train", "val"]
    entry["assignment"].update(dict.fromkeys(val_groups, 0))
    entry["samples_per_fold"][0] += dataset["counts"]["split"]["val"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["data"]["train_splits"] = ["train", "val"]
    (run / "config.yaml").write_text(yaml.safe_dump(config))

    result = _evaluate(run, data_dir, tmp_path / "report")

    assert result.returncode != 0, "the run folder's claimed splits were scored as its held-out fold"
    assert str(run / "manifest.json") in result.stderr and str(_dataset_manifest(run)) in result.stderr, result.stderr[-3000:]
    assert not (tmp_path / "report").exists()


def _groups_of(run: Path, split: str) -> set[str]:
    from crossmod.data.shards import read_samples

    return {r["group"] for r in read_samples(_dataset_manifest(run).parent, [split])}


def test_the_untouched_run_folder_is_still_scored_on_its_held_out_fold(fold_run, data_dir, tmp_path):
    result = _evaluate(fold_run, data_dir, tmp_path / "report")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(next((tmp_path / "report").rglob("*.json")).read_text())
    assert "held-out fold 0 of 3" in json.dumps(report)

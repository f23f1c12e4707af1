"""evaluate.py: reports for runs and folders of runs, dataset-specific sections, and the task metrics."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from crossmod.data.folds import iter_records
from crossmod.data.memes import MemeDataModule
from crossmod.data.shards import read_samples
from crossmod.data.sources.mhc import MHCSource
from crossmod.evaluation.task_metrics import performance_score, subset_rule_accuracy, toxictags_stages
from crossmod.results.scored_splits import run_facts, scored_splits
from tests.conftest import ROOT, SMALL_DATA, TrainRun, scaled
from tests.data.sources import layouts
from tests.fixtures.small import small_synthetic
from tests.zygote import run_python


def _evaluate(*args: str) -> subprocess.CompletedProcess:
    result = run_python([sys.executable, str(ROOT / "evaluate.py"), *args], cwd=ROOT, capture_output=True, text=True, timeout=scaled(600))
    assert result.returncode == 0, result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def fold_sweep(data_dir, tmp_path_factory) -> Path:
    """Three real fold runs (fold=0,1,2 of 3) on the small synthetic set, shared by this module's tests."""
    runs = TrainRun(data_dir, tmp_path_factory.mktemp("cv"))
    runs(
        "-m",
        "fold=0,1,2",
        "num_folds=3",
        "debug=limit",
        "trainer.limit_test_batches=1.0",
        "keep_resume_checkpoints=true",
        *SMALL_DATA,
        env={"CROSSMOD_RUN_ID": "cv"},
    )
    return runs.log_dir / "synthetic_concat" / "multiruns" / "cv"


def _fold_run(sweep: Path, fold: int) -> Path:
    (run,) = [p.parent for p in sweep.glob("*/metrics.json") if json.loads(p.read_text())["fold"] == fold]
    return run


def _dataset_dir(run: Path) -> Path:
    """The shards a run trained on: <data_dir>/shards/<dataset>-<fingerprint> (its manifest copy names both)."""
    config = OmegaConf.load(run / "config.yaml")
    manifest = json.loads((run / "manifest.json").read_text())
    return Path(config.paths.data_dir) / "shards" / f"{manifest['dataset']}-{manifest['fingerprint']}"


def _held_out_ids(run: Path) -> set[str]:
    """The ids the run's own manifest copy puts in its held-out fold, read straight from the shards."""
    fold = json.loads((run / "metrics.json").read_text())["fold"]
    manifest = json.loads((run / "manifest.json").read_text())
    (entry,) = [f for f in manifest["folds"] if f["num_folds"] == 3 and f["seed"] == 0]
    shards = [s["name"] for s in manifest["shards"] if s["split"] in entry["splits"]]
    return {r["id"] for r in iter_records(_dataset_dir(run), shards) if entry["assignment"][r["group"]] == fold}


def test_folder_of_fold_runs_scores_each_run_on_its_own_held_out_fold(fold_sweep, data_dir, tmp_path):
    _evaluate(f"ckpt={fold_sweep}", f"paths.data_dir={data_dir}", *SMALL_DATA, f"out={tmp_path / 'report'}")
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert len(report["runs"]) == 3 and report["alignment"]["runs"] == 3
    assert set(report["alignment"]["markers"]) == {"US", "DE", "MX", "IN", "CN"}
    assert set(report["alignment"]["mean"]["US"]) == {"US", "DE", "MX", "IN", "CN"}
    # 3 folds: the exact one-sided rank-sum test cannot go below p = 1/20 = .05, so no marker, and the report says so
    assert set(report["alignment"]["markers"].values()) == {""}
    assert report["alignment"]["test"] == "exact one-sided Wilcoxon rank-sum (permutation over all splits)"
    assert "with 3 runs the exact one-sided rank-sum test cannot go below p = 0.05" in report["alignment"]["note"]
    assert report["alignment"]["note"] in summary
    folds = {}
    for name, entry in report["runs"].items():
        run = fold_sweep / name
        metrics = json.loads((run / "metrics.json").read_text())
        ids = [row["id"] for row in csv.DictReader(open(tmp_path / "report" / "predictions" / f"{name}.csv"))]
        assert len(ids) == len(set(ids)) == entry["split"]["items"]
        assert set(ids) == _held_out_ids(run)  # exactly the run's held-out fold, nothing else
        folds[metrics["fold"]] = set(ids)
        assert entry["split"] == {
            "requested": "auto",
            "scored": f"held-out fold {metrics['fold']} of 3",
            "items": len(ids),
            "trained_on": 0,
            "selected_on": 0,
            "warning": None,
        }
        assert entry["selection"] == metrics["selection"]
        # same weights, same memes: the report's scores are the run's own test scores
        assert set(entry["metrics"]) == {"US", "DE", "MX", "IN", "CN"}
        for head, scores in entry["metrics"].items():
            for metric in ("auroc", "acc", "f1"):
                assert scores[metric] == pytest.approx(metrics["best"]["test"][head][metric], abs=1e-5), (name, head, metric)
        # the run's calibration map, applied beside the raw probability: the run's own before/after on the same memes
        for head, row in metrics["calibration"]["heads"].items():
            for when in ("before", "after"):
                for score in ("ece", "brier", "log_loss"):
                    got = entry["calibration"]["heads"][head][when][score]
                    assert got == pytest.approx(row[when][score], abs=1e-5), (name, head, when, score)
        section = summary.split(f"## {name}\n")[1].split("\n## ")[0]
        assert "| head | ECE before → after |" in section and "fitted on its selection split" in section
        assert f"Scored on: held-out fold {metrics['fold']} of 3 ({len(ids)} memes; split=auto)" in section
        assert f"rule `{metrics['selection']['rule']}` — {metrics['selection']['description']}" in section
    assert sorted(folds) == [0, 1, 2] and not (folds[0] & folds[1] or folds[0] & folds[2] or folds[1] & folds[2])
    train_ids = {r["id"] for r in read_samples(_dataset_dir(_fold_run(fold_sweep, 0)), ["train"])}
    assert folds[0] | folds[1] | folds[2] == train_ids and report["items"] == len(train_ids)
    for name in ("alignment.png", "roc.png"):
        assert (tmp_path / "report" / name).is_file()


def test_an_export_scores_its_runs_held_out_fold_and_counts_what_it_trained_on(fold_sweep, data_dir, tmp_path):
    """The export carries its run's fold assignment: split=auto scores exactly the run's held-out memes, with the run's
    numbers; split=all is scored with the warning, and report.json counts the memes it trained and selected on."""
    run = _fold_run(fold_sweep, 1)
    export = [sys.executable, str(ROOT / "export.py"), f"run={run}", "culture=US", f"out={tmp_path / 'export'}"]
    run_python(export, cwd=ROOT, check=True, capture_output=True, text=True, timeout=scaled(300))
    folder = tmp_path / "export" / "US"
    card, manifest = (json.loads((folder / name).read_text()) for name in ("culture_card.json", "manifest.json"))
    run_manifest, metrics = (json.loads((run / name).read_text()) for name in ("manifest.json", "metrics.json"))
    assert (
        card["trained_on"]["fold"] == 1
        and card["trained_on"]["num_folds"] == 3
        and card["selection"]["rule"] == metrics["selection"]["rule"]
    )
    assert card["trained_on"]["fingerprint"] == run_manifest["fingerprint"] and manifest["folds"] == run_manifest["folds"]

    _evaluate(f"ckpt={folder}", f"paths.data_dir={data_dir}", *SMALL_DATA, f"out={tmp_path / 'auto'}")
    (entry,) = json.loads((tmp_path / "auto" / "report.json").read_text())["runs"].values()
    ids = [row["id"] for row in csv.DictReader(open(tmp_path / "auto" / "predictions" / "US.csv"))]
    assert entry["split"]["scored"] == "held-out fold 1 of 3" and set(ids) == _held_out_ids(run) and entry["split"]["trained_on"] == 0
    for metric in ("auroc", "acc", "f1"):  # the export's held-out numbers are the run's
        assert entry["metrics"]["US"][metric] == pytest.approx(metrics["best"]["test"]["US"][metric], abs=1e-5), metric

    _evaluate(f"ckpt={folder}", f"paths.data_dir={data_dir}", *SMALL_DATA, "split=all", f"out={tmp_path / 'all'}")
    (entry,) = json.loads((tmp_path / "all" / "report.json").read_text())["runs"].values()
    (fold_entry,) = [f for f in run_manifest["folds"] if f["num_folds"] == 3 and f["seed"] == 0]
    trained = run_manifest["counts"]["split"]["train"] - fold_entry["samples_per_fold"][1]
    assert entry["split"]["trained_on"] == trained and entry["split"]["selected_on"] == run_manifest["counts"]["split"]["val"]
    assert f"trained on {trained} of these" in entry["split"]["warning"]


def test_explicit_split_all_warns_how_many_memes_the_fold_run_trained_on(fold_sweep, caplog):
    run = _fold_run(fold_sweep, 1)
    manifest = json.loads((run / "manifest.json").read_text())
    (entry,) = [f for f in manifest["folds"] if f["num_folds"] == 3 and f["seed"] == 0]
    scored = scored_splits(run_facts(run), "all", _dataset_dir(run), ["test"])[run.name]
    assert len(scored.records) == manifest["samples_written"]
    trained = manifest["counts"]["split"]["train"] - entry["samples_per_fold"][1]
    rule = json.loads((run / "metrics.json").read_text())["selection"]["rule"]
    assert rule == "val_split"  # the synthetic set has its own validation split
    assert f"trained on {trained} of these {manifest['samples_written']} memes" in scored.warning
    assert f"chose its weights on {manifest['counts']['split']['val']} of them (rule val_split)" in scored.warning
    assert any(scored.warning in record.getMessage() and record.levelname == "WARNING" for record in caplog.records)
    (last,) = run_facts(run / "checkpoints" / "last.ckpt")  # a checkpoint file: its run's facts, and whether it is the chosen one
    assert last.fold == 1 and "not the weights the run's rule chose" in last.selection["note"]
    (best,) = run_facts(Path(json.loads((run / "metrics.json").read_text())["best_checkpoint"]))
    assert best.fold == 1 and "note" not in best.selection
    test_split = scored_splits(run_facts(run), "test", _dataset_dir(run), ["test"])[run.name]
    assert test_split.warning is None and test_split.scored == "split test"  # never in its training folds


def test_a_fold_run_pointed_at_other_data_is_refused(fold_sweep, tmp_path):
    run = _fold_run(fold_sweep, 1)
    fewer_groups, _ = small_synthetic(tmp_path, num_groups=30)  # same dataset name, other memes
    with pytest.raises(
        ValueError, match=r"was trained on dataset synthetic \[.*\] .*but the evaluated dataset is synthetic .*run's groups missing.*split="
    ):
        scored_splits(run_facts(run), "auto", fewer_groups, ["test"])
    with pytest.raises(ValueError, match=r"was trained on dataset synthetic .* but the evaluated dataset is mhc .*give split="):
        scored_splits(run_facts(run), "auto", _mhc_shards(tmp_path), [])


def test_a_run_that_is_no_fold_run_on_data_without_a_test_split_errors_clearly(train_run, tmp_path):
    train_run(
        "debug=limit", "trainer.max_epochs=1", "trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "test=false", *SMALL_DATA
    )
    (run,) = train_run.run_dirs("synthetic_concat")
    assert json.loads((run / "metrics.json").read_text())["fold"] is None
    message = r"run .* is not a fold run, so split=auto scores the dataset's test split .*dataset mhc .* has only the splits \['all'\]: give split="
    with pytest.raises(ValueError, match=message):
        scored_splits(run_facts(run), "auto", _mhc_shards(tmp_path), [])


def _mhc_shards(tmp_path: Path) -> Path:
    datamodule = MemeDataModule(
        {"hateful": {"kind": "binary"}},
        source=MHCSource(layouts.mhc(tmp_path / "mhc_raw")),
        shard_root=str(tmp_path / "shards"),
        train_splits=["all"],
        val_splits=[],
        test_splits=[],
    )
    datamodule.prepare_data()
    return datamodule.dataset_dir


def test_mhc_fold_run_gets_the_functional_report_on_its_held_out_fold(train_run, tmp_path):
    raw = layouts.mhc(tmp_path / "mhc")
    train_run("data=mhc", f"data.raw_dir={raw}", "model=text", "fold=0", "num_folds=2", "debug=limit", env={"CROSSMOD_RUN_ID": "mhc"})
    run = train_run.log_dir / "mhc_text" / "runs" / "mhc"
    _evaluate(f"ckpt={run}", "data=mhc", f"data.raw_dir={raw}", f"paths.data_dir={train_run.data_dir}", f"out={tmp_path / 'r'}")
    entry = next(iter(json.loads((tmp_path / "r" / "report.json").read_text())["runs"].values()))
    assert entry["split"]["scored"] == "held-out fold 0 of 2"  # MHC has no test split: split=auto scores the held-out fold
    assert len(entry["mhc"]["languages"]) >= 2 and entry["mhc"]["functionalities"]
    (folds,) = json.loads((run / "manifest.json").read_text())["folds"]
    assert entry["mhc"]["cases"] == entry["split"]["items"] == folds["samples_per_fold"][0]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["selection"]["weights"] == "final"  # its tiny inner validation split has one class: no selection
    for metric in ("auroc", "acc", "f1"):  # the final weights (last.ckpt) on the same memes: the run's own test scores
        assert entry["metrics"]["hateful"][metric] == pytest.approx(metrics["best"]["test"]["hateful"][metric], abs=1e-5)
    assert "## Multilingual HateCheck" in (tmp_path / "r" / "summary.md").read_text()


def test_toxictags_stages_subset_rule_and_performance_score():
    stages = toxictags_stages(
        np.array([1, 1, 0, 0]),
        np.array([0.9, 0.2, 0.1, 0.6]),
        np.array([0, 2, -1, -1]),
        np.array([[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [1, 0, 0], [1, 0, 0]]),
    )
    assert (
        stages["stage1_macro_f1"] == pytest.approx(0.5) and stages["stage2_macro_f1"] == pytest.approx(1.0) and stages["stage2_items"] == 2
    )
    gold = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    predicted = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0]])
    assert subset_rule_accuracy(gold, predicted) == pytest.approx(2 / 3)  # ⊆: rows 1 and 3 correct
    partial = performance_score(acc_sent=0.5, acc_emo=0.25)
    assert partial["ps"] is None and partial["ps_classifier_terms"] == pytest.approx(0.6316 * 0.5 + 1.7368 * 0.25)
    full = performance_score(0.5, 0.25, acc_mcq=1.0, sim_orig=0.3, sim_fmt=0.2)
    assert full["ps"] == pytest.approx(0.3 + 0.2 + 0.6316 + 0.6316 * 0.5 + 1.7368 * 0.25)


def test_functional_tests_callback_logs_per_functionality_accuracy(train_run, tmp_path):
    import csv

    raw = layouts.mhc(tmp_path / "mhc")
    # validation is an inner split of the training fold; this one holds cases of both languages
    overrides = ("fold=1", "num_folds=2", "cv.inner_share=0.4", "debug=limit")
    train_run("data=mhc", f"data.raw_dir={raw}", "model=text", *overrides, env={"CROSSMOD_RUN_ID": "fn"})
    run = train_run.log_dir / "mhc_text" / "runs" / "fn"
    rows = [r for r in csv.DictReader(open(run / "csv" / "metrics.csv")) if r.get("val/mean/auroc")]
    header = rows[0].keys()
    functionality = [k for k in header if k.startswith("val/mhc/acc/")]
    languages = [k for k in header if k.startswith("val/mhc/macro_f1/")]
    assert functionality and len(languages) >= 2
    assert sum(1 for r in rows if r[functionality[0]] != "") == 2  # both validations of fit (not the final scoring)
    assert (run / "predictions" / "val.csv").is_file()  # the prediction files are unaffected


def _predictions(report: Path) -> dict[str, list[dict[str, str]]]:
    return {p.stem: list(csv.DictReader(open(p))) for p in sorted((report / "predictions").glob("*.csv"))}


def test_two_processes_score_exactly_what_one_does(fold_sweep, data_dir, tmp_path):
    """`trainer=ddp_cpu` (2 processes, gloo): Lightning's predict loop gives each meme to one rank; the gathered rows
    are the single-process rows, in the same order, and the report the same report."""
    common = (f"ckpt={fold_sweep}", f"paths.data_dir={data_dir}", *SMALL_DATA)
    _evaluate(*common, f"out={tmp_path / 'one'}")
    two_processes = _evaluate(*common, f"out={tmp_path / 'two'}", "trainer=ddp_cpu")
    assert "MEMBER: 2/2" in two_processes.stdout + two_processes.stderr  # the second rank joined
    one, two = _predictions(tmp_path / "one"), _predictions(tmp_path / "two")
    assert one.keys() == two.keys() and len(one) == 3
    for name in one:
        assert [r["id"] for r in one[name]] == [r["id"] for r in two[name]]  # every meme once, order restored
        for a, b in zip(one[name], two[name]):
            for key in a:
                if key.endswith(("_probability", "_probability_calibrated")):  # float sums: rank order may differ
                    assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-6), (name, a["id"], key)
                else:
                    assert a[key] == b[key], (name, a["id"], key)
    report_one = json.loads((tmp_path / "one" / "report.json").read_text())
    report_two = json.loads((tmp_path / "two" / "report.json").read_text())
    for name, entry in report_one["runs"].items():
        for head, scores in entry["metrics"].items():
            assert scores == pytest.approx(report_two["runs"][name]["metrics"][head], abs=1e-6)
    assert not list((tmp_path / "two").glob("**/*rank*"))  # one writer


def test_a_culture_model_on_mhc_is_scored_by_the_head_it_names(train_run, tmp_path):
    """evaluate.py data=mhc on a five-culture text model: refused naming the heads until head= says which one answers
    for MHC's `hateful`; then every case is scored by it (the report says so) and the functional report is filled."""
    raw = layouts.mhc(tmp_path / "mhc")
    train_run("model=text", *SMALL_DATA, "debug=limit", env={"CROSSMOD_RUN_ID": "cultures"})
    run = train_run.log_dir / "synthetic_text" / "runs" / "cultures"
    common = (f"ckpt={run}", "data=mhc", f"data.raw_dir={raw}", f"paths.data_dir={train_run.data_dir}", "split=all")
    refused = run_python(
        [sys.executable, str(ROOT / "evaluate.py"), *common, f"out={tmp_path / 'refused'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    assert refused.returncode != 0 and "binary heads ['US', 'DE', 'MX', 'IN', 'CN']" in refused.stderr and "head=<head>" in refused.stderr
    assert "Traceback" not in refused.stderr
    _evaluate(*common, "head=DE", f"out={tmp_path / 'r'}")
    entry = next(iter(json.loads((tmp_path / "r" / "report.json").read_text())["runs"].values()))
    assert entry["head"] == "head=DE" and set(entry["metrics"]) == {"hateful"}
    assert entry["mhc"]["cases"] == entry["split"]["items"] > 0
    rows = list(csv.DictReader(open(next((tmp_path / "r" / "predictions").glob("*.csv")))))
    assert rows and set(rows[0]) >= {"id", "hateful_probability", "hateful_decision", "hateful_probability_calibrated"}
    # the mapped head is calibrated by the map its trained head (DE) was given on the run's own selection split
    from crossmod.evaluation.calibration import apply_calibrator, calibrator_of

    recorded = calibrator_of(json.loads((run / "metrics.json").read_text())["calibration"]["heads"]["DE"])
    raw_p = [float(r["hateful_probability"]) for r in rows]
    assert [float(r["hateful_probability_calibrated"]) for r in rows] == pytest.approx(apply_calibrator(raw_p, recorded).tolist(), abs=1e-6)
    assert set(entry["calibration"]["heads"]) == {"hateful"}

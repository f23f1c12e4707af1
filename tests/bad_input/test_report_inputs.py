"""Reports built from files of someone else's runs write inside their output folder only, and name what is wrong.

`crossmod cv-report runs=<runs>` names its report folders after `fold_result.json`'s `experiment`
field: the attacks set it to climb out (`../..`) or to an absolute path, and plant a symlink where the
default report folder goes. Malformed fold results (not JSON, a field missing or of the wrong type,
prediction columns of different lengths) must be one error naming the file and the field, raised before
any output folder exists. Folds evaluated with `debug=limit` (held-out labels for memes never scored)
are reported as a problem, not a KeyError. `export.py` on a run whose metric is undefined (null) writes
its README with the metric shown as undefined, instead of dying after the weights are written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crossmod.reports.cv import ReportInputError, report
from tests.conftest import ROOT, scaled
from tests.zygote import run_python

HEADS = ("US", "DE")


def fold_result(fold: int, experiment: str = "exp", num_folds: int = 2, groups: int = 6) -> dict:
    """A fold result as the cross-validation callback writes it: two binary heads, `groups` held-out memes."""
    ids = [f"m/{fold}/{i}" for i in range(groups)]
    labels = {i: {"US": n % 2, "DE": (n // 2) % 2} for n, i in enumerate(ids)}
    columns: dict[str, list] = {"id": [], "head": [], "probability": [], "label": []}
    for n, sample in enumerate(ids):
        for head in HEADS:
            columns["id"].append(sample)
            columns["head"].append(head)
            columns["probability"].append(round(0.1 + 0.13 * n, 3))
            columns["label"].append(labels[sample][head])
    scores = {"auroc": 0.75, "acc": 0.7, "f1": 0.6}
    return {
        "experiment": experiment,
        "fold": fold,
        "num_folds": num_folds,
        "selection": {"rule": "inner", "monitor": "val/mean/auroc", "mode": "max"},
        "selected_epoch": 0,
        "selected_step": 3,
        "held_out": {"US": scores, "DE": scores, "mean": scores},
        "selection_scores": {"US": scores, "DE": scores, "mean": scores},
        "history": [],
        "oof_predictions": columns,
        "held_out_labels": labels,
    }


def write_folds(root: Path, results: list[dict]) -> Path:
    for n, result in enumerate(results):
        (root / f"fold{n}").mkdir(parents=True)
        (root / f"fold{n}" / "fold_result.json").write_text(json.dumps(result))
    return root


def cv_report(root: Path, out: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "crossmod.recipes.cv_report", f"runs={root}", *([f"out={out}"] if out else [])]
    return run_python(command, cwd=ROOT, capture_output=True, text=True, timeout=scaled(300))


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("experiment", ["../../escaped", "ABSOLUTE", "..", "a/../../escaped", ""])
def test_an_experiment_name_cannot_place_report_files_outside_the_output_folder(experiment, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if experiment == "ABSOLUTE":
        experiment = str(outside / "absolute")
    runs = write_folds(tmp_path / "box" / "runs", [fold_result(k, experiment) for k in (0, 1)])
    out = tmp_path / "box" / "report"
    before = _files(tmp_path)

    with pytest.raises(ReportInputError, match=r"fold0/fold_result.json: experiment .* is not a plain folder name"):
        report(runs, out)

    assert _files(tmp_path) == before, "report files were written"
    assert not out.exists()


def test_the_command_refuses_it_in_one_line(tmp_path):
    runs = write_folds(tmp_path / "box" / "runs", [fold_result(k, "../../escaped") for k in (0, 1)])
    result = cv_report(runs)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    assert f"[cv_report] error: {runs / 'fold0' / 'fold_result.json'}: experiment '../../escaped'" in result.stderr
    assert _files(tmp_path) == ["box/runs/fold0/fold_result.json", "box/runs/fold1/fold_result.json"]


def test_a_symlink_where_the_default_report_folder_goes_is_not_followed(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    runs = write_folds(tmp_path / "runs", [fold_result(k) for k in (0, 1)])
    (runs / "cv_report").symlink_to(outside)

    result = cv_report(runs)

    assert result.returncode != 0 and "cv_report" in result.stderr and "outside" in result.stderr, result.stderr
    assert _files(outside) == []


def test_a_symlinked_report_file_is_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    runs = write_folds(tmp_path / "runs", [fold_result(k) for k in (0, 1)])
    (runs / "cv_report" / "exp").mkdir(parents=True)
    (runs / "cv_report" / "exp" / "cv_summary.json").symlink_to(victim)

    result = cv_report(runs)

    assert victim.read_text() == "precious"
    assert result.returncode != 0 and "cv_summary.json" in result.stderr and "outside" in result.stderr, result.stderr


def _broken(case: str) -> tuple[str, str]:
    """(fold_result.json content, the field the error must name)."""
    result = fold_result(1)
    if case == "not_json":
        return "{'experiment': 'exp'", "not JSON"
    if case == "a_list":
        return json.dumps([result]), "not an object"
    if case == "no_fold":
        result.pop("fold")
        return json.dumps(result), "fold"
    if case == "fold_a_string":
        result["fold"] = "1"
        return json.dumps(result), "fold"
    if case == "no_oof":
        result.pop("oof_predictions")
        return json.dumps(result), "oof_predictions"
    if case == "columns_of_other_lengths":
        result["oof_predictions"]["probability"].pop()
        return json.dumps(result), "oof_predictions"
    if case == "held_out_a_list":
        result["held_out"] = [0.5]
        return json.dumps(result), "held_out"
    if case == "labels_a_list":
        result["held_out_labels"] = ["m/1/0"]
        return json.dumps(result), "held_out_labels"
    if case == "threshold_scores_not_numbers":
        result["selection_threshold"] = {"heads": {"US": {"macro_f1_at_val_threshold": "0.9"}}, "mean": {}}
        return json.dumps(result), "selection_threshold.heads.US"
    # impossible numbers: Python's json reads NaN and Infinity, so they must be refused by value
    if case == "held_out_nan":
        return json.dumps(result).replace('"auroc": 0.75', '"auroc": NaN', 1), "held_out.US.auroc"
    if case == "auroc_above_one":
        result["held_out"]["DE"] = {"auroc": 1.5, "acc": 0.7, "f1": 0.6}
        return json.dumps(result), "held_out.DE.auroc"
    if case == "negative_loss":
        result["selection_scores"]["all"] = {"loss": -0.1}
        return json.dumps(result), "selection_scores.all.loss"
    if case == "probability_infinite":
        result["oof_predictions"]["probability"][3] = float("inf")
        return json.dumps(result), "oof_predictions.probability[3]"
    if case == "probability_above_one":
        result["oof_predictions"]["probability"][0] = 7.0
        return json.dumps(result), "oof_predictions.probability[0]"
    if case == "a_meme_scored_twice":
        columns = result["oof_predictions"]
        for column in columns.values():
            column.append(column[0])
        return json.dumps(result), "more than once"
    if case == "threshold_nan":
        result["selection_threshold"] = {"heads": {"US": {"val_threshold": float("nan")}}, "mean": {}}
        return json.dumps(result), "selection_threshold.heads.US"
    calibrated = {"ece": 0.1, "brier": 0.2, "log_loss": 0.5}
    if case == "temperature_zero":
        row = {"temperature": 0.0, "before": calibrated, "after": calibrated}
        result["calibration"] = {"heads": {"US": row}, "mean": {"before": calibrated, "after": calibrated}}
        return json.dumps(result), "calibration.heads.US.temperature"
    if case == "ece_above_one":
        row = {"temperature": 1.2, "before": {**calibrated, "ece": 1.7}, "after": calibrated}
        result["calibration"] = {"heads": {"US": row}, "mean": {"before": calibrated, "after": calibrated}}
        return json.dumps(result), "calibration.heads.US.before"
    if case == "calibration_without_heads":
        result["calibration"] = {"mean": {"before": calibrated, "after": calibrated}}
        return json.dumps(result), "calibration needs heads"
    abstained = {"aurc": 0.2, "aurc_random": 0.3, "aurc_oracle": 0.05}
    if case == "aurc_a_string":
        result["abstention"] = {"rule": "r", "heads": {"US": {**abstained, "aurc": "0.2"}}, "mean": abstained}
        return json.dumps(result), "abstention.heads.US must hold aurc"
    if case == "abstention_without_rule":
        result["abstention"] = {"heads": {"US": abstained}, "mean": abstained}
        return json.dumps(result), "abstention needs a rule"
    if case == "calibrator_unknown_method":  # Table 11 applies the map: one a file names must be one crossmod fits
        row = {"temperature": 1.2, "calibrator": {"method": "os.system", "temperature": 1.2}, "before": calibrated, "after": calibrated}
        result["calibration"] = {"heads": {"US": row}, "mean": {"before": calibrated, "after": calibrated}}
        return json.dumps(result), "calibration.heads.US.calibrator.method"
    if case == "isotonic_knots_strings":
        map_ = {"method": "isotonic", "knots_in": ["0", "1"], "knots_out": [0.0, 1.0]}
        row = {"temperature": 1.2, "calibrator": map_, "before": calibrated, "after": calibrated}
        result["calibration"] = {"heads": {"US": row}, "mean": {"before": calibrated, "after": calibrated}}
        return json.dumps(result), "calibration.heads.US.calibrator.knots_in"
    chosen = {"action": "act", "threshold": 0.7, "reached": 0.9, "test": {"precision": 0.8, "recall": 0.4}}
    if case == "policy_threshold_a_string":
        result["policy"] = {"name": "cautious", "rule": "r", "heads": {"US": {"act": {**chosen, "threshold": "0.7"}}}}
        return json.dumps(result), "policy.heads.US.act needs a threshold"
    if case == "policy_unreachable_without_why":
        result["policy"] = {"name": "cautious", "rule": "r", "heads": {"US": {"review": {"action": "review"}}}}
        return json.dumps(result), "policy.heads.US.review has neither a threshold nor"
    if case == "policy_unknown_action":
        result["policy"] = {"name": "cautious", "rule": "r", "heads": {"US": {"delete_account": chosen}}}
        return json.dumps(result), "policy.heads.US.delete_account is not an action"
    raise AssertionError(case)


CASES = [
    *("not_json", "a_list", "no_fold", "fold_a_string", "no_oof", "columns_of_other_lengths", "held_out_a_list", "labels_a_list"),
    "threshold_scores_not_numbers",
    *("held_out_nan", "auroc_above_one", "negative_loss", "probability_infinite", "probability_above_one", "a_meme_scored_twice"),
    "threshold_nan",
    *("temperature_zero", "ece_above_one", "calibration_without_heads"),
    *("aurc_a_string", "abstention_without_rule"),
    *("calibrator_unknown_method", "isotonic_knots_strings"),
    *("policy_threshold_a_string", "policy_unreachable_without_why", "policy_unknown_action"),
]


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_fold_result_is_named_with_its_field_before_anything_is_written(case, tmp_path):
    runs = write_folds(tmp_path / "runs", [fold_result(0), fold_result(1)])
    content, field = _broken(case)
    (runs / "fold1" / "fold_result.json").write_text(content)

    with pytest.raises(ReportInputError) as refused:
        report(runs)

    assert str(runs / "fold1" / "fold_result.json") in str(refused.value) and field in str(refused.value), refused.value
    assert not (runs / "cv_report").exists()


def test_folds_evaluated_on_part_of_their_held_out_memes_are_a_problem_not_a_key_error(tmp_path):
    """debug=limit scores a few test batches: the held-out labels name memes the predictions never reached."""
    results = [fold_result(0), fold_result(1)]
    for result in results:
        result["held_out_labels"][f"m/{result['fold']}/never-scored"] = {"US": 1, "DE": 0}
    runs = write_folds(tmp_path / "runs", results)

    result = cv_report(runs)

    assert result.returncode == 0, result.stderr[-3000:]
    assert "held-out memes were never scored" in result.stdout
    summary = json.loads((runs / "cv_report" / "exp" / "cv_summary.json").read_text())
    assert any("never scored" in problem for problem in summary["problems"])


def test_cv_and_report_cv_name_a_partly_scored_fold_the_same_way_and_exit_0(tmp_path, capsys):
    """`crossmod cv … debug=limit` wrote its report, then exited 1 on the problem `crossmod report cv` printed with exit 0."""
    from omegaconf import OmegaConf

    from crossmod.recipes.cross_validate import finish, limited_test

    results = [fold_result(0), fold_result(1)]
    results[1]["held_out_labels"]["m/1/never-scored"] = {"US": 1, "DE": 0}
    runs = write_folds(tmp_path / "runs", results)
    cfg = OmegaConf.create({"cv_metric": "cv_selection/mean/auroc_mean", "logger": None, "trainer": {"limit_test_batches": 3}})

    value = finish(cfg, runs, ["exp"])
    printed = capsys.readouterr().out.splitlines()
    reported = cv_report(runs, tmp_path / "again")

    assert value == pytest.approx(0.75)
    assert reported.returncode == 0, reported.stderr[-3000:]
    problems = [line for line in printed if line.startswith("  problem:")]
    assert problems and problems == [line for line in reported.stdout.splitlines() if line.startswith("  problem:")]
    assert "fold 1: 1 held-out memes were never scored" in problems[0]
    assert printed[0].startswith("[cross_validate] exp: held-out mean AUROC ") and "(selection: inner)" in printed[0]
    assert "limit_test_batches=3" in limited_test(cfg) and limited_test(OmegaConf.create({"trainer": {}})) is None


def test_export_writes_its_readme_when_a_metric_is_undefined(leaky_run, tmp_path):
    run = Path(shutil.copytree(leaky_run, tmp_path / "run", ignore=shutil.ignore_patterns("wandb")))
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["best"]["val"]["US"]["auroc"] = None  # undefined (one class): json_safe writes NaN as null
    metrics["best"].setdefault("test", {}).setdefault("US", {})["auroc"] = float("nan")
    (run / "metrics.json").write_text(json.dumps(metrics))

    result = run_python(
        [sys.executable, str(ROOT / "export.py"), f"run={run}", "culture=US", f"out={tmp_path / 'export'}"],
        cwd=ROOT,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )

    assert result.returncode == 0, result.stderr[-3000:]
    readme = (tmp_path / "export" / "US" / "README.md").read_text()
    assert "undefined" in readme and "| val |" in readme


@pytest.mark.parametrize(
    "best, field",
    [
        ({"test": {"mean": {"auroc": float("nan")}}}, "best.test.mean.auroc is nan"),
        ({"test": {"mean": {"auroc": float("inf")}}}, "best.test.mean.auroc is inf"),
        ({"test": {"mean": {"acc": 1.7}}}, "best.test.mean.acc is 1.7"),
        ({"test": {"all": {"loss": -1.0}}}, "best.test.all.loss is -1.0"),
        ({"test": {"mean": {"auroc": "0.9"}}}, "best.test.mean.auroc is '0.9'"),
        ({"test": ["x"]}, "best.test is not an object of heads"),
    ],
    ids=["nan", "inf", "above_one", "negative_loss", "string", "list"],
)
def test_a_seed_report_refuses_an_impossible_number_by_name_and_writes_nothing(tmp_path, best, field):
    from crossmod.reports.seeds import SeedInputError, summarise

    for seed in (1, 2):
        run = tmp_path / "runs" / f"{seed}_splits"
        run.mkdir(parents=True)
        scores = best if seed == 2 else {"test": {"mean": {"auroc": 0.7}}}
        (run / "metrics.json").write_text(json.dumps({"experiment": "exp", "seed": seed, "best": scores}))
    with pytest.raises(SeedInputError, match=re.escape(field)) as refused:
        summarise(tmp_path / "runs")
    assert "2_splits/metrics.json" in str(refused.value) and not (tmp_path / "runs" / "seed_summary.json").exists()


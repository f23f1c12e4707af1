"""Tie the folds of a cross-validation together: `crossmod cv-report runs=<runs dir> [out=<folder>]`.

Finds every fold run (a directory with `fold_result.json`, written by the cross-validation
callback) under the given directory, groups them by
experiment, and writes per experiment: mean ± std per head and metric over folds of the held-out
fold's single test pass, pooled out-of-fold AUROC, the culture alignment matrix (each head's scores
against each culture's labels, best marked), ROC and heatmap PNGs, `cv_summary.json` and a markdown
summary that states the selection rule. Missing or duplicated folds, folds of different rules and
fold results without a rule (selected on their own held-out fold) are reported and never averaged over.
The numbers and the markdown come from `crossmod.evaluation.cv_summary`; this module finds, reads and writes.

The runs folder may be someone else's: every fold result is checked (fields and types, an experiment
name that is one plain folder name) before anything is written, and every report file must land inside
the report folder (no `..`, absolute name or symlink out).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from crossmod.data.paths import OutsideRoot, ensure_within, resolve_within
from crossmod.evaluation.calibration import check_calibrator
from crossmod.evaluation.cv_summary import check_folds, check_rules, check_scored, cv_markdown, oof_reliability, pool_out_of_fold, summarise
from crossmod.evaluation.plots import alignment_heatmap, reliability_figure, roc_figure
from crossmod.evaluation.predictions import labelled_pairs
from crossmod.evaluation.summary import SCORE_SLACK, finite_or_null, json_safe, possible_score
from crossmod.reports.transfer import transfer_report
from crossmod.runtime.user_errors import UserError
from crossmod.training.callbacks.fold_results import FILENAME as FOLD_RESULT

TRANSFER = "_culture_transfer"  # key of the culture-transfer table among the per-experiment results
REPORT_FILES = ("roc_oof.png", "alignment.png", "reliability_oof.png", "cv_summary.json", "cv_report.md")
TRANSFER_FILES = ("culture_transfer.md", "culture_transfer.png", "culture_transfer.json")
FIX = "rerun that fold (the cross-validation callback writes the file), or move it out of the runs folder"
COLUMNS = ("id", "head", "probability", "label")


class ReportInputError(UserError, ValueError):
    """A fold result (or a report path) cv_report refuses: names the file, the field and the fix."""


KINDS = {dict: "an object", int: "an integer", str: "a string", list: "a list"}


def _field(result: dict[str, Any], path: Path, field: str, kind: type, optional: bool = False) -> Any:
    value = result.get(field)
    if (value is None and optional) or (isinstance(value, kind) and not isinstance(value, bool)):
        return value
    found = "missing" if field not in result else f"a {type(value).__name__}"
    raise ReportInputError(f"{path}: {field} is {found}, not {KINDS[kind]}", FIX)


_number, _score = finite_or_null, possible_score  # the one rule for a metric read from a shared file


SLACK = SCORE_SLACK


def _probability(value: Any) -> bool:
    if isinstance(value, list):
        return all(_probability(v) for v in value)
    return value is not None and _number(value) and -SLACK <= value <= 1.0 + SLACK


def read_fold_result(path: Path) -> dict[str, Any]:
    """A fold result with the fields and types the report reads (see src/crossmod/training/callbacks/fold_results.py)."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ReportInputError(f"{path}: not JSON ({type(error).__name__})", FIX) from None
    if not isinstance(result, dict):
        raise ReportInputError(f"{path}: holds a JSON {type(result).__name__}, not an object", FIX)
    name = _field(result, path, "experiment", str)
    if name in ("", ".", "..") or name != Path(name).name or any(c in name for c in "\\\0"):
        raise ReportInputError(
            f"{path}: experiment {name!r}"[:300] + " is not a plain folder name: its report would be written elsewhere", FIX
        )
    if _field(result, path, "fold", int) < 0:
        raise ReportInputError(f"{path}: fold is {result['fold']}, not a fold number", FIX)
    _field(result, path, "num_folds", int, optional=True)
    _field(result, path, "selection", dict, optional=True)
    for field in ("held_out", "selection_scores", "held_out_labels"):  # head → metric → number; id → head → label
        # a fold result without a selection rule (an old file) is reported and left out, so it may lack its scores
        required = field == "held_out" and result.get("selection") is not None
        table = _field(result, path, field, dict, optional=not required) or {}
        for key, row in table.items():
            if not isinstance(row, dict):
                raise ReportInputError(f"{path}: {field}.{key} is a {type(row).__name__}, not an object", FIX)
            if field == "held_out_labels":
                wrong = [name for name, value in row.items() if not (_number(value) or isinstance(value, list))]
                if wrong:
                    raise ReportInputError(f"{path}: {field}.{key}.{wrong[0]} is not a number", FIX)
                continue
            wrong = [name for name, value in row.items() if not _score(name, value)]
            if wrong:
                raise ReportInputError(
                    f"{path}: {field}.{key}.{wrong[0]} is {row[wrong[0]]!r}"[:300]
                    + ": a metric is a finite number (a loss ≥ 0, any other score in [0, 1]) or null",
                    FIX,
                )
    _check_threshold(result, path)
    _check_calibration(result, path)
    _check_abstention(result, path)
    _check_votes(result, path)
    _check_policy(result, path)
    _check_baselines(result, path)
    columns = _field(result, path, "oof_predictions", dict)
    lengths = {column: len(columns[column]) if isinstance(columns.get(column), list) else None for column in COLUMNS}
    if None in lengths.values() or len(set(lengths.values())) > 1:
        raise ReportInputError(f"{path}: oof_predictions must hold the lists {list(COLUMNS)} of one length, not {lengths}", FIX)
    texts = all(isinstance(v, str) for column in ("id", "head") for v in columns[column])
    if not texts or not all(_number(v) or isinstance(v, list) for v in columns["label"]):
        raise ReportInputError(f"{path}: oof_predictions holds ids or heads that are not strings, or labels that are not numbers", FIX)
    bad = next((k for k, v in enumerate(columns["probability"]) if not _probability(v)), None)
    if bad is not None:
        raise ReportInputError(
            f"{path}: oof_predictions.probability[{bad}] is {columns['probability'][bad]!r}"[:300] + ", not a probability in [0, 1]", FIX
        )
    pairs = list(zip(columns["id"], columns["head"]))
    if len(set(pairs)) != len(pairs):
        twice = next(pair for pair, count in Counter(pairs).items() if count > 1)
        raise ReportInputError(f"{path}: oof_predictions scores meme {twice[0]!r} for head {twice[1]!r} more than once"[:300], FIX)
    return result


def _check_baselines(result: dict[str, Any], path: Path) -> None:
    """`baselines` (optional): {kind: {name, rule, test: {head: {metric: number}}, …}}, finite numbers in [0, 1]."""
    recorded = _field(result, path, "baselines", dict, optional=True) or {}
    for kind, row in recorded.items():
        if not isinstance(row, dict) or not isinstance(row.get("name"), str) or not isinstance(row.get("rule"), str):
            raise ReportInputError(f"{path}: baselines.{kind} needs a name and a rule (strings)", FIX)
        for stage in ("val", "test"):
            table = row.get(stage) or {}
            if not isinstance(table, dict):
                raise ReportInputError(f"{path}: baselines.{kind}.{stage} is not an object", FIX)
            for head, scores in table.items():
                good = isinstance(scores, dict) and all(_score(name, v) for name, v in scores.items())
                if not good:
                    raise ReportInputError(f"{path}: baselines.{kind}.{stage}.{head} is not an object of scores in [0, 1]", FIX)


def _check_threshold(result: dict[str, Any], path: Path) -> None:
    """`selection_threshold` (optional: older files lack it): {rule, heads: {head: {name: number}}, mean: {name: number}}."""
    recorded = _field(result, path, "selection_threshold", dict, optional=True)
    if recorded is None:
        return
    heads, mean = recorded.get("heads"), recorded.get("mean")
    tables = {f"heads.{h}": row for h, row in heads.items()} if isinstance(heads, dict) else {"heads": heads}
    for where, row in {**tables, "mean": mean}.items():
        if not isinstance(row, dict) or not all(v is not None and _number(v) for v in row.values()):
            raise ReportInputError(f"{path}: selection_threshold.{where} is not an object of numbers", FIX)


CALIBRATION_SCORES = ("ece", "brier", "log_loss")


def _check_abstention(result: dict[str, Any], path: Path) -> None:
    """`abstention` (optional: older files lack it): {rule, heads: {head: {aurc, aurc_random, aurc_oracle}}, mean}, each
    AURC a number in [0, 1]."""
    recorded = _field(result, path, "abstention", dict, optional=True)
    if recorded is None:
        return
    heads, mean = recorded.get("heads"), recorded.get("mean")
    if not isinstance(heads, dict) or not heads or not isinstance(mean, dict) or not isinstance(recorded.get("rule"), str):
        raise ReportInputError(f"{path}: abstention needs a rule, and heads and mean objects", FIX)
    for where, row in {**{f"heads.{h}": r for h, r in heads.items()}, "mean": mean}.items():
        good = isinstance(row, dict) and all(_score(name, row.get(name)) and row.get(name) is not None for name in ("aurc", "aurc_random", "aurc_oracle"))
        if not good:
            raise ReportInputError(f"{path}: abstention.{where} must hold aurc, aurc_random and aurc_oracle in [0, 1]", FIX)


def _check_votes(result: dict[str, Any], path: Path) -> None:
    """`votes` (optional: datasets without votes, and older files, lack it): {rule, heads: {head: {model, constant}}},
    each an object of a cross-entropy ≥ 0 and a JSD in [0, 1] (null where no meme had votes)."""
    recorded = _field(result, path, "votes", dict, optional=True)
    if recorded is None:
        return
    heads = recorded.get("heads")
    if not isinstance(heads, dict) or not heads or not isinstance(recorded.get("rule"), str):
        raise ReportInputError(f"{path}: votes needs a rule and a heads object", FIX)
    for head, row in heads.items():
        for side in ("model", "constant"):
            scores = row.get(side) if isinstance(row, dict) else None
            if not isinstance(scores, dict):
                raise ReportInputError(f"{path}: votes.heads.{head}.{side} is not an object", FIX)
            entropy, jsd = scores.get("cross_entropy"), scores.get("jsd")
            if not (entropy is None or (_number(entropy) and entropy >= 0)) or not (jsd is None or _score("jsd", jsd)):
                raise ReportInputError(f"{path}: votes.heads.{head}.{side} needs a cross-entropy ≥ 0 and a JSD in [0, 1]", FIX)


def _check_policy(result: dict[str, Any], path: Path) -> None:
    """`policy` (optional: runs without one lack it): {name, rule, heads: {head: {action: {threshold in [0, 1], reached,
    test: {precision, recall}} or {why}}}}, each rate in [0, 1] or null."""
    recorded = _field(result, path, "policy", dict, optional=True)
    if recorded is None:
        return
    heads = recorded.get("heads")
    if not isinstance(heads, dict) or not isinstance(recorded.get("name"), str) or not isinstance(recorded.get("rule"), str):
        raise ReportInputError(f"{path}: policy needs a name, a rule and a heads object", FIX)
    for head, actions in heads.items():
        if not isinstance(actions, dict):
            raise ReportInputError(f"{path}: policy.heads.{head} is not an object", FIX)
        for action, chosen in actions.items():
            where = f"policy.heads.{head}.{action}"[:200]
            if action not in ("act", "review") or not isinstance(chosen, dict):
                raise ReportInputError(f"{path}: {where} is not an action (act or review) with an object", FIX)
            if "threshold" not in chosen:
                if not isinstance(chosen.get("why"), str):
                    raise ReportInputError(f"{path}: {where} has neither a threshold nor the reason it has none (why)", FIX)
                continue
            held_out = chosen.get("test")
            rates = [chosen.get("threshold"), chosen.get("reached")] + ([held_out.get(k) for k in ("precision", "recall")] if isinstance(held_out, dict) else [])
            if chosen.get("threshold") is None or not isinstance(held_out, dict) or not all(_score("rate", v) for v in rates):
                raise ReportInputError(f"{path}: {where} needs a threshold, reached and test precision / recall in [0, 1]", FIX)


def _check_calibration(result: dict[str, Any], path: Path) -> None:
    """`calibration` (optional: older files lack it): {rule, bins, heads: {head: {temperature > 0, before, after}},
    mean: {before, after}}, each before/after an object of ECE and Brier in [0, 1] and a log-loss ≥ 0."""
    recorded = _field(result, path, "calibration", dict, optional=True)
    if recorded is None:
        return
    heads = recorded.get("heads")
    if not isinstance(heads, dict) or not heads or not isinstance(recorded.get("mean"), dict):
        raise ReportInputError(f"{path}: calibration needs heads and mean objects", FIX)
    for where, row in {**{f"heads.{h}": r for h, r in heads.items()}, "mean": recorded["mean"]}.items():
        if not isinstance(row, dict):
            raise ReportInputError(f"{path}: calibration.{where} is not an object", FIX)
        if where != "mean" and "calibrator" in row:  # the map Table 11 applies to the held-out probabilities
            try:
                check_calibrator(row["calibrator"])
            except ValueError as error:
                raise ReportInputError(f"{path}: calibration.{where}.{error}", FIX) from None
        if where != "mean":
            temperature = row.get("temperature")
            if not (_number(temperature) and temperature is not None and 0 < temperature < float("inf")):
                raise ReportInputError(f"{path}: calibration.{where}.temperature is {temperature!r}"[:300] + ", not a number above 0", FIX)
        for when in ("before", "after"):
            scores = row.get(when)
            good = isinstance(scores, dict) and all(
                _score("loss" if name == "log_loss" else name, scores.get(name)) and scores.get(name) is not None for name in CALIBRATION_SCORES
            )
            if not good:
                raise ReportInputError(
                    f"{path}: calibration.{where}.{when} must hold ece and brier in [0, 1] and a log_loss ≥ 0", FIX
                )


def find_runs(root: Path) -> dict[str, list[tuple[dict[str, Any], Path]]]:
    """Experiment name → [(fold result, run dir)] for every fold result file under `root`, each checked."""
    runs: dict[str, list[tuple[dict[str, Any], Path]]] = defaultdict(list)
    for path in sorted(root.rglob(FOLD_RESULT)):
        result = read_fold_result(path)
        runs[result["experiment"]].append((result, path.parent))
    return runs


def _inside(base: Path, path: Path) -> Path:
    """A report file's path, refused when a symlink on the way (planted in a shared runs folder) leads out of `base`."""
    try:
        return ensure_within(base, path, "report file", str(path))
    except OutsideRoot as error:
        raise ReportInputError(f"{error}; refused", "remove the link, or give another report folder: out=<dir>") from None


def _report_folders(root: Path, out: Path | None, names: list[str]) -> tuple[Path, dict[str, Path]]:
    """The report folder (default `<root>/cv_report`, which must not lead out of `root`) and each experiment's, all files checked."""
    try:
        base = out or resolve_within(root, "cv_report", "report folder")
    except OutsideRoot as error:
        raise ReportInputError(f"{error}; refused", "remove the link, or give another report folder: out=<dir>") from None
    folders = {name: _inside(base, base / name) for name in names}
    for folder in folders.values():
        for file in REPORT_FILES:
            _inside(base, folder / file)
    for file in TRANSFER_FILES:
        _inside(base, base / file)
    return base, folders


def report(root: Path, out: Path | None = None) -> dict[str, Any]:
    """Write one report folder per experiment found under `root`; return the summaries.

    Everything is read and checked before the first folder is created."""
    found = find_runs(root)
    base, targets = _report_folders(root, out, list(found))
    results = {}
    clean: dict[str, dict[int, dict[str, Any]]] = {}
    for name, runs in found.items():
        runs, rule_problems = check_rules(runs)
        folds, problems = check_folds(runs) if runs else ({}, [])
        problems = rule_problems + problems + check_scored({fold: result for fold, (result, _) in folds.items()})
        if not folds:
            results[name] = {"problems": problems}
            continue
        results_by_fold = {fold: fold_result for fold, (fold_result, _) in folds.items()}
        oof = pool_out_of_fold(results_by_fold)
        result = summarise(results_by_fold, oof)
        if result["ids_in_two_folds"]:
            problems.append(f"{len(result['ids_in_two_folds'])} sample ids are in two folds' validation sets")
        result["problems"] = problems
        result["folds"] = {str(k): str(d) for k, (_, d) in folds.items()}
        if not problems:
            clean[name] = results_by_fold
        target = targets[name]
        target.mkdir(parents=True, exist_ok=True)
        roc_scores = labelled_pairs(oof.probs, oof.labels)
        if roc_scores:
            roc_figure(roc_scores, target / "roc_oof.png", f"{name}: pooled out-of-fold ROC")
            alignment_heatmap(result["alignment"], target / "alignment.png", f"{name}: culture alignment")
        curves = oof_reliability(results_by_fold)
        if curves:  # the cultures as panels, pooled over the held-out folds, before and after each fold's map
            reliability_figure(curves, target / "reliability_oof.png", f"{name}: held-out reliability, pooled over folds")
        (target / "cv_summary.json").write_text(json.dumps(json_safe(result), indent=1, allow_nan=False))
        (target / "cv_report.md").write_text(cv_markdown(name, list(folds), problems, result))
        results[name] = result
    transfer = transfer_report(clean, root, base)
    if transfer is not None:
        results[TRANSFER] = transfer
    return results


def summary_lines(name: str, result: dict[str, Any]) -> list[str]:
    """What `crossmod cv` and `crossmod report cv` print for one report: its held-out mean and selection rule, then each
    problem it found (a fold scored on part of its memes, a fold missing or twice). Both jobs print the same lines and
    exit 0 once the report is written: the problems are in it, named."""
    mean = result.get("metrics", {}).get("cv/mean/auroc_mean")
    std = result.get("metrics", {}).get("cv/mean/auroc_std")
    rule = result.get("selection", {}).get("rule")
    head = f"{name}: held-out mean AUROC {mean:.4f} ± {std:.4f} (selection: {rule})" if mean is not None else f"{name}: no usable folds"
    return [head, *(f"  problem: {problem}" for problem in result.get("problems", []))]


"""Tie the folds of a cross-validation together: `python -m training.cv_report <runs dir> [--out DIR]`.

Finds every fold run (a directory with `fold_result.json`, written by the cross-validation
callback) under the given directory, groups them by
experiment, and writes per experiment: mean ± std per head and metric over folds of the held-out
fold's single test pass, pooled out-of-fold AUROC, the culture alignment matrix (each head's scores
against each culture's labels, best marked), ROC and heatmap PNGs, `cv_summary.json` and a markdown
summary that states the selection rule. Missing or duplicated folds, folds of different rules and
fold results without a rule (selected on their own held-out fold) are reported and never averaged over.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from datamodules.memes import RULES
from evaluation.alignment import alignment_matrix
from evaluation.plots import alignment_heatmap, roc_figure
from evaluation.predictions import binary_scores
from evaluation.summary import json_safe, mean_std
from training.callbacks.fold_results import FILENAME as FOLD_RESULT
from training.transfer_report import transfer_report

TRANSFER = "_culture_transfer"  # key of the culture-transfer table among the per-experiment results


def find_runs(root: Path) -> dict[str, list[tuple[dict[str, Any], Path]]]:
    """Experiment name → [(fold result, run dir)] for every fold result file under `root`."""
    runs: dict[str, list[tuple[dict[str, Any], Path]]] = defaultdict(list)
    for path in sorted(root.rglob(FOLD_RESULT)):
        result = json.loads(path.read_text())
        runs[result["experiment"]].append((result, path.parent))
    return runs


def binary_oof(result: dict[str, Any]) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, int]]]:
    """Out-of-fold scores of binary heads (scalar probabilities): head → id → p, and every binary
    dataset head's labels of the held-out memes (culture → id → label), not only the model's heads."""
    probs, labels = binary_scores(result["oof_predictions"])
    labels = defaultdict(dict, labels)
    for sample_id, heads in result.get("held_out_labels", {}).items():
        for head, label in heads.items():
            if isinstance(label, int) and label in (0, 1):
                labels[head][sample_id] = label
    return dict(probs), dict(labels)


def rule_of(result: dict[str, Any]) -> str | None:
    return (result.get("selection") or {}).get("rule")


def check_rules(runs: list[tuple[dict[str, Any], Path]]) -> tuple[list[tuple[dict[str, Any], Path]], list[str]]:
    """Keep fold results that name their selection rule; the folds of one report must share one rule."""
    problems = []
    unruled = [d for r, d in runs if rule_of(r) not in RULES or rule_of(r) == "dataset_val"]
    if unruled:
        problems.append(
            f"{len(unruled)} fold result(s) name no cross-validation selection rule (written when the held-out fold also "
            f"chose the checkpoint): left out ({', '.join(str(d) for d in unruled)})"
        )
    kept = [(r, d) for r, d in runs if rule_of(r) in RULES and rule_of(r) != "dataset_val"]
    rules = sorted({rule_of(r) for r, _ in kept})
    if len(rules) > 1:
        problems.append(f"folds were selected by different rules {rules}: nothing averaged")
        return [], problems
    return kept, problems


def check_folds(runs: list[tuple[dict[str, Any], Path]]) -> tuple[dict[int, tuple[dict, Path]], list[str]]:
    """Keep folds present exactly once; describe every missing or duplicated fold."""
    by_fold: dict[int, list[tuple[dict, Path]]] = defaultdict(list)
    for metrics, run_dir in runs:
        by_fold[metrics["fold"]].append((metrics, run_dir))
    expected = {m["num_folds"] for m, _ in runs if m.get("num_folds")}
    problems = []
    if len(expected) > 1:
        problems.append(f"runs disagree on num_folds: {sorted(expected)}")
    num_folds = max(expected) if expected else max(by_fold) + 1
    missing = sorted(set(range(num_folds)) - set(by_fold))
    if missing:
        problems.append(f"missing folds {missing} of {num_folds}")
    kept = {}
    for fold, entries in sorted(by_fold.items()):
        if len(entries) > 1:
            problems.append(f"fold {fold} appears {len(entries)} times ({', '.join(str(d) for _, d in entries)}); left out")
        else:
            kept[fold] = entries[0]
    return kept, problems


def _mean_std(per_metric: dict[str, list[float]], prefix: str) -> dict[str, float]:
    summary = {}
    for key, values in sorted(per_metric.items()):
        stats = mean_std(values)
        summary[f"{prefix}/{key}_mean"], summary[f"{prefix}/{key}_std"] = stats["mean"], stats["std"]
    return summary


def summarise(folds: dict[int, tuple[dict[str, Any], Path]]) -> dict[str, Any]:
    """Mean ± sample std over folds of the held-out folds' metrics, plus pooled out-of-fold scores."""
    per_metric: dict[str, list[float]] = defaultdict(list)
    for result, _ in folds.values():
        for head, scores in result["held_out"].items():
            if head == "all":
                continue
            for name, value in scores.items():
                per_metric[f"{head}/{name}"].append(math.nan if value is None else value)
    summary = _mean_std(per_metric, "cv")
    # the selection set's scores of the selected weights: what a hyperparameter sweep may be scored by
    per_selection: dict[str, list[float]] = defaultdict(list)
    for result, _ in folds.values():
        for head, scores in (result.get("selection_scores") or {}).items():
            for name, value in scores.items():
                if head != "all":
                    per_selection[f"{head}/{name}"].append(math.nan if value is None else value)
    if all(len(v) == len(folds) for v in per_selection.values()):
        summary.update(_mean_std(per_selection, "cv_selection"))
    probs: dict[str, dict[str, float]] = defaultdict(dict)
    labels: dict[str, dict[str, int]] = defaultdict(dict)
    seen: dict[str, int] = {}
    overlap = set()
    for fold, (result, _) in folds.items():
        fold_probs, fold_labels = binary_oof(result)
        ids = set(result["oof_predictions"]["id"])
        overlap |= {i for i in ids if i in seen}
        seen.update({i: fold for i in ids})
        for head in fold_probs:
            probs[head].update(fold_probs[head])
        for culture in fold_labels:  # every culture's labels, also those no head of this model predicts
            labels[culture].update(fold_labels[culture])
    alignment = alignment_matrix(dict(probs), dict(labels))
    rule = rule_of(next(iter(folds.values()))[0])
    return {
        "selection": {"rule": rule, "description": RULES[rule]},
        "metrics": summary,
        "pooled_oof_auroc": {head: row[head] for head, row in alignment.items() if head in row},  # own labels, all folds pooled
        "alignment": alignment,
        "oof_samples": len(seen),
        "ids_in_two_folds": sorted(overlap),
        "_oof": (dict(probs), dict(labels)),
    }


def markdown(name: str, folds: dict, problems: list[str], result: dict[str, Any]) -> str:
    heads = sorted({k.split("/")[1] for k in result["metrics"] if k.startswith("cv/")} - {"mean"}) + ["mean"]
    lines = [f"# Cross-validation: {name}", "", f"Folds used: {sorted(folds)}; out-of-fold samples: {result['oof_samples']}."]
    lines += ["", f"Selection rule: **{result['selection']['rule']}** — {result['selection']['description']}."]
    lines += ["Every number below is the held-out folds' single test pass (mean ± sample std over folds)."]
    lines += [f"- **problem**: {p}" for p in problems] + [""]
    lines += ["| head | AUROC | acc | F1 | pooled OOF AUROC |", "|---|---|---|---|---|"]
    for head in heads:
        cells = [
            f"{result['metrics'][f'cv/{head}/{m}_mean']:.3f} ± {result['metrics'][f'cv/{head}/{m}_std']:.3f}"
            for m in ("auroc", "acc", "f1")
        ]
        pooled = result["pooled_oof_auroc"].get(head)
        lines.append(f"| {head} | " + " | ".join(cells) + f" | {'' if pooled is None else f'{pooled:.3f}'} |")
    if not result["alignment"]:
        return "\n".join([*lines, "", "No binary heads: no pooled ROC or alignment matrix.", ""])
    cultures = list(next(iter(result["alignment"].values())))
    lines += ["", "Alignment (AUROC of each head's scores against each culture's labels; * = best culture):", ""]
    lines += ["| head \\ labels | " + " | ".join(cultures) + " |", "|---|" + "---|" * len(cultures)]
    for head, row in result["alignment"].items():
        best = max(row, key=lambda c: -1 if math.isnan(row[c]) else row[c])
        lines.append(f"| {head} | " + " | ".join(f"{row[c]:.3f}" + ("*" if c == best else "") for c in cultures) + " |")
    lines += ["", "![ROC](roc_oof.png)", "", "![alignment](alignment.png)", ""]
    return "\n".join(lines)


def report(root: Path, out: Path | None = None) -> dict[str, Any]:
    """Write one report folder per experiment found under `root`; return the summaries."""
    results = {}
    clean: dict[str, dict[int, dict[str, Any]]] = {}
    for name, runs in find_runs(root).items():
        runs, rule_problems = check_rules(runs)
        folds, problems = check_folds(runs) if runs else ({}, [])
        problems = rule_problems + problems
        if not folds:
            results[name] = {"problems": problems}
            continue
        result = summarise(folds)
        probs, labels = result.pop("_oof")
        if result["ids_in_two_folds"]:
            problems.append(f"{len(result['ids_in_two_folds'])} sample ids are in two folds' validation sets")
        result["problems"] = problems
        result["folds"] = {str(k): str(d) for k, (_, d) in folds.items()}
        if not problems:
            clean[name] = {k: r for k, (r, _) in folds.items()}
        target = (out or root / "cv_report") / name
        target.mkdir(parents=True, exist_ok=True)
        roc_scores = {}
        for head in probs:
            ids = sorted(labels.get(head, {}))
            if not ids:
                continue
            roc_scores[head] = (np.array([labels[head][i] for i in ids]), np.array([probs[head][i] for i in ids]))
        if roc_scores:
            roc_figure(roc_scores, target / "roc_oof.png", f"{name}: pooled out-of-fold ROC")
            alignment_heatmap(result["alignment"], target / "alignment.png", f"{name}: culture alignment")
        (target / "cv_summary.json").write_text(json.dumps(json_safe(result), indent=1, allow_nan=False))
        (target / "cv_report.md").write_text(markdown(name, folds, problems, result))
        results[name] = result
    transfer = transfer_report(clean, root, out or root / "cv_report")
    if transfer is not None:
        results[TRANSFER] = transfer
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description="Summarise the folds of cross-validation runs.")
    parser.add_argument("runs", type=Path, help="directory holding the fold runs (searched recursively)")
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: <runs>/cv_report)")
    args = parser.parse_args()
    if not args.runs.is_dir():
        parser.error(f"{args.runs} is not a directory")
    results = report(args.runs, args.out)
    if not results:
        parser.error(f"no fold runs ({FOLD_RESULT}) under {args.runs}")
    transfer = results.pop(TRANSFER, None)
    for name, result in results.items():
        mean = result.get("metrics", {}).get("cv/mean/auroc_mean")
        std = result.get("metrics", {}).get("cv/mean/auroc_std")
        rule = result.get("selection", {}).get("rule")
        print(f"{name}: held-out mean AUROC {mean:.4f} ± {std:.4f} (selection: {rule})" if mean is not None else f"{name}: no usable folds")
        for problem in result["problems"]:
            print(f"  problem: {problem}")
    if transfer is not None:
        print(f"culture transfer (Table 11): {(args.out or args.runs / 'cv_report') / 'culture_transfer.md'}")


if __name__ == "__main__":
    main()

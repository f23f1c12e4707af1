"""Tie the folds of a cross-validation together: `python -m training.cv_report <runs dir> [--out DIR]`.

Finds every fold run (a directory with `fold_result.json`, written by the cross-validation
callback) under the given directory, groups them by
experiment, and writes per experiment: mean ± std per head and metric over folds of the held-out
fold's single test pass, pooled out-of-fold AUROC, the culture alignment matrix (each head's scores
against each culture's labels, best marked), ROC and heatmap PNGs, `cv_summary.json` and a markdown
summary that states the selection rule. Missing or duplicated folds, folds of different rules and
fold results without a rule (selected on their own held-out fold) are reported and never averaged over.
The numbers and the markdown come from `evaluation.cv_summary`; this module finds, reads and writes.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from evaluation.cv_summary import check_folds, check_rules, cv_markdown, pool_out_of_fold, summarise
from evaluation.plots import alignment_heatmap, roc_figure
from evaluation.predictions import labelled_pairs
from evaluation.summary import json_safe
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
        results_by_fold = {fold: fold_result for fold, (fold_result, _) in folds.items()}
        oof = pool_out_of_fold(results_by_fold)
        result = summarise(results_by_fold, oof)
        if result["ids_in_two_folds"]:
            problems.append(f"{len(result['ids_in_two_folds'])} sample ids are in two folds' validation sets")
        result["problems"] = problems
        result["folds"] = {str(k): str(d) for k, (_, d) in folds.items()}
        if not problems:
            clean[name] = results_by_fold
        target = (out or root / "cv_report") / name
        target.mkdir(parents=True, exist_ok=True)
        roc_scores = labelled_pairs(oof.probs, oof.labels)
        if roc_scores:
            roc_figure(roc_scores, target / "roc_oof.png", f"{name}: pooled out-of-fold ROC")
            alignment_heatmap(result["alignment"], target / "alignment.png", f"{name}: culture alignment")
        (target / "cv_summary.json").write_text(json.dumps(json_safe(result), indent=1, allow_nan=False))
        (target / "cv_report.md").write_text(cv_markdown(name, list(folds), problems, result))
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

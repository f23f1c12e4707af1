"""Mean ± std over seeds of one experiment's runs: `python -m training.seed_report <multirun dir>`.

The Hateful Memes study reports every model as mean ± std over 3 seeds of the best-dev-AUROC
checkpoint's test scores; this gathers `metrics.json` of such runs (e.g. `multirun=seeds`) per
experiment and writes `seed_summary.json` beside them. Runs with the same seed twice are reported.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.summary import mean_std


def summarise(root: Path) -> dict[str, dict[str, Any]]:
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(root.rglob("metrics.json")):
        metrics = json.loads(path.read_text())
        runs[metrics["experiment"]].append(metrics)
    summary = {}
    for name, group in runs.items():
        seeds = [m["seed"] for m in group]
        values: dict[str, list[float]] = defaultdict(list)
        for metrics in group:
            for stage, heads in metrics["best"].items():
                for head, scores in heads.items():
                    for metric, value in scores.items():
                        values[f"{stage}/{head}/{metric}"].append(np.nan if value is None else value)
        summary[name] = {
            "seeds": seeds,
            "problems": [f"seed {s} appears {seeds.count(s)} times" for s in sorted(set(seeds)) if seeds.count(s) > 1],
            "metrics": {key: mean_std(v) for key, v in sorted(values.items())},
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description="Mean ± std over the seeds of each experiment's runs.")
    parser.add_argument("runs", type=Path)
    args = parser.parse_args()
    summary = summarise(args.runs)
    if not summary:
        parser.error(f"no runs (metrics.json) under {args.runs}")
    (args.runs / "seed_summary.json").write_text(json.dumps(summary, indent=1))
    for name, result in summary.items():
        print(f"{name} (seeds {result['seeds']})")
        for key in ("val/mean/auroc", "test/mean/auroc", "test/mean/acc"):
            if key in result["metrics"]:
                m = result["metrics"][key]
                print(f"  {key}: {m['mean']:.4f} ± {m['std']:.4f}")
        for problem in result["problems"]:
            print(f"  problem: {problem}")


if __name__ == "__main__":
    main()

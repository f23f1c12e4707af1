"""Mean ± std over seeds of one experiment's runs: `python -m crossmod.training.seed_report <multirun dir>`.

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

from crossmod.evaluation.seed_summary import seed_summary


def summarise(root: Path) -> dict[str, dict[str, Any]]:
    """Every run (`metrics.json`) under `root`, grouped by experiment, summarised over its seeds."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(root.rglob("metrics.json")):
        metrics = json.loads(path.read_text())
        runs[metrics["experiment"]].append(metrics)
    return seed_summary(runs)


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

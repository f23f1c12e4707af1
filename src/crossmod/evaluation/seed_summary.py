"""Mean ± sample std over the seeds of each experiment (the Hateful Memes study's 3-seed protocol).

Input: per experiment, the `metrics.json` contents of its runs (`seed` and `best[stage][head][metric]`);
output per experiment: the seeds, every seed given twice as a problem, and mean/std/n per
`stage/head/metric` (a missing value is NaN and left out of that metric's mean).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from crossmod.evaluation.summary import mean_std


def seed_summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """`runs[experiment]` = the runs' metrics.json contents → per experiment {seeds, problems, metrics}."""
    summary = {}
    for name, group in runs.items():
        seeds = [m["seed"] for m in group]
        values: dict[str, list[float]] = defaultdict(list)
        for metrics in group:
            for stage, heads in metrics["best"].items():
                for head, scores in heads.items():
                    for metric, value in scores.items():
                        values[f"{stage}/{head}/{metric}"].append(math.nan if value is None else value)
        summary[name] = {
            "seeds": seeds,
            "problems": [f"seed {s} appears {seeds.count(s)} times" for s in sorted(set(seeds)) if seeds.count(s) > 1],
            "metrics": {key: mean_std(v) for key, v in sorted(values.items())},
        }
    return summary

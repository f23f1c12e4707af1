"""Mean ± std over seeds of one experiment's runs: `crossmod seed-report runs=<multirun dir>`.

The Hateful Memes study reports every model as mean ± std over 3 seeds of the best-dev-AUROC
checkpoint's test scores; this gathers `metrics.json` of such runs (e.g. `multirun=seeds`) per
experiment and writes `seed_summary.json` beside them. Runs with the same seed twice are reported.
"""

from __future__ import annotations

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

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

from crossmod.data.paths import OutsideRoot, ensure_within
from crossmod.evaluation.seed_summary import seed_summary
from crossmod.evaluation.summary import possible_score
from crossmod.runtime.user_errors import UserError

MAX_BYTES = 16 << 20  # a metrics.json is a few kB
FIX = "use the run folders as crossmod train wrote them, or leave this one out of runs="


class SeedInputError(UserError, ValueError):
    """A metrics.json a seed report cannot stand on: named with its field, before anything is written."""


def summarise(root: Path) -> dict[str, dict[str, Any]]:
    """Every run (`metrics.json`) under `root`, grouped by experiment, summarised over its seeds. Each file is read as
    data and checked first (a folder of runs may come from someone else): a number that cannot be true is refused."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(root.rglob("metrics.json")):
        metrics = checked(path, root)
        runs[metrics["experiment"]].append(metrics)
    return seed_summary(runs)


def checked(path: Path, root: Path) -> dict[str, Any]:
    """The parts of a run's metrics.json a seed report reads: experiment, seed and `best[stage][head][metric]`."""
    try:
        ensure_within(root, path, "metrics.json")
    except OutsideRoot as error:
        raise SeedInputError(str(error), FIX) from None
    if path.stat().st_size > MAX_BYTES:
        raise SeedInputError(f"{path}: larger than a run's metrics ({MAX_BYTES} bytes at most)", FIX)
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise SeedInputError(f"{path}: not JSON ({type(error).__name__})", FIX) from None
    if not isinstance(metrics, dict) or not isinstance(metrics.get("experiment"), str):
        raise SeedInputError(f"{path}: experiment is not a name", FIX)
    if isinstance(metrics.get("seed"), bool) or not isinstance(metrics.get("seed"), int):
        raise SeedInputError(f"{path}: seed is {metrics.get('seed')!r}, not a whole number", FIX)
    best = metrics.get("best")
    if not isinstance(best, dict):
        raise SeedInputError(f"{path}: best is not an object of stages", FIX)
    for stage, heads in best.items():
        if not isinstance(heads, dict):
            raise SeedInputError(f"{path}: best.{stage} is not an object of heads", FIX)
        for head, scores in heads.items():
            if not isinstance(scores, dict):
                raise SeedInputError(f"{path}: best.{stage}.{head} is not an object of scores", FIX)
            for metric, value in scores.items():  # null: undefined (AUROC of a one-class split), left out of the mean
                if not possible_score(metric, value):
                    raise SeedInputError(f"{path}: best.{stage}.{head}.{metric} is {value!r}, not a possible score", FIX)
    return metrics

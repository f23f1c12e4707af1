"""What the comparison scripts (zoo_table.py, retrieval_table.py) share: a results file that keeps the rows measured on
the same budget, and a markdown table kept between two markers."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any


def save_row(
    path: Path, row: dict[str, Any], key: Callable[[dict[str, Any]], Any], order: Callable[[dict[str, Any]], Any], budget: dict[str, Any]
) -> dict[str, Any]:
    """Add `row` to the results file, replacing the row of the same `key`; rows measured on another `budget` (epochs,
    seed) are dropped. Written after each run, so an interrupted job keeps what it measured."""
    import torch

    old = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    same_budget = all(old.get(name) == value for name, value in budget.items())
    rows = [r for r in old["rows"] if same_budget and key(r) != key(row)] + [row]
    results = {
        **budget,
        "rows": sorted(rows, key=order),
        "torch": torch.__version__,
        "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}), no GPU",
    }
    path.write_text(json.dumps(results, indent=1) + "\n")
    return results


def write_between(path: Path, start: str, end: str, text: str, root: Path) -> None:
    """Replace what lies between the `start` and `end` markers of `path` by `text`."""
    content = path.read_text()
    if start not in content or end not in content:
        raise SystemExit(f"{path.relative_to(root)} has no {start} … {end} markers")
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{text}\n{end}{tail}")


def train_run(root: Path, overrides: list[str], run_id: str, log_dir: Path, epochs: int, seed: int, reuse: bool = False) -> Path:
    """`python train.py <overrides>` on the script's budget, its run folder named `run_id` under `log_dir`; `reuse`: a
    finished run already there (an interrupted job's) is returned, not retrained."""
    import subprocess
    import sys

    done = [run for run in log_dir.glob(f"*/runs/{run_id}") if (run / "metrics.json").is_file()]
    if not (reuse and done):
        command = [
            sys.executable,
            str(root / "train.py"),
            *overrides,
            f"trainer.max_epochs={epochs}",
            f"seed={seed}",
            f"paths.log_dir={log_dir}",
        ]
        env = {**os.environ, "CROSSMOD_RUN_ID": run_id, "WANDB_MODE": "offline"}
        subprocess.run([*command, "print_table=false"], cwd=root, check=True, env=env)
    (run_dir,) = log_dir.glob(f"*/runs/{run_id}")
    return run_dir


def cv_summary(overrides: list[str], work: Path, what: str) -> dict[str, Any]:
    """`crossmod cv <overrides>` in `work` (its data and runs kept there, offline), and the one cv_summary.json it wrote."""
    import subprocess
    import sys

    logs = work / "runs"
    command = [sys.executable, "-m", "crossmod", "cv", *overrides, f"paths.data_dir={work / 'data'}", f"paths.log_dir={logs}", "print_table=false"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"{what}: crossmod cv failed ({done.returncode}):\n{done.stderr[-3000:]}")
    (summary,) = logs.glob("*/runs/*/cv_report/*/cv_summary.json")
    return json.loads(summary.read_text())

"""Shared fixtures: a session-wide data/asset cache and a helper that runs `train.py` as users do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Timeouts catch hangs, not slowness: a 2-core machine under other jobs' load (load average 6–12 seen) runs a
# training subprocess several times slower than an idle one. Every subprocess timeout in the suite goes through
# `scaled`; CROSSMOD_TEST_TIMEOUT_SCALE sets the margin (default 3×).
TIMEOUT_SCALE = float(os.environ.get("CROSSMOD_TEST_TIMEOUT_SCALE", "3"))


def scaled(seconds: float) -> float:
    """A subprocess timeout with the suite's margin for a loaded machine."""
    return seconds * TIMEOUT_SCALE


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data dir per test session: synthetic shards and the tiny BERT are built once and reused."""
    return tmp_path_factory.mktemp("data")


class TrainRun:
    """Runs `python train.py <overrides>` in a subprocess with data and runs kept under tmp dirs."""

    def __init__(self, data_dir: Path, log_dir: Path) -> None:
        self.data_dir, self.log_dir = data_dir, log_dir

    def __call__(
        self, *overrides: str, check: bool = True, env: dict[str, str] | None = None, timeout: int = 900, script: str = "train.py"
    ) -> subprocess.CompletedProcess:
        flags = [o for o in overrides if o.startswith("-") and not o.startswith("~")]
        rest = [o for o in overrides if o not in flags]
        command = [sys.executable, str(ROOT / script), *flags, f"paths.data_dir={self.data_dir}", f"paths.log_dir={self.log_dir}", *rest]
        full_env = {**os.environ, "HYDRA_FULL_ERROR": "1", "WANDB_MODE": "offline", "COLUMNS": "120", **(env or {})}
        result = subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=scaled(timeout))
        if check and result.returncode != 0:
            raise AssertionError(
                f"{script} {' '.join(overrides)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
            )
        return result

    def run_dirs(self, name: str) -> list[Path]:
        return sorted((self.log_dir / name / "runs").iterdir())

    def metrics(self, run_dir: Path) -> dict:
        return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture
def train_run(data_dir: Path, tmp_path: Path) -> TrainRun:
    return TrainRun(data_dir, tmp_path / "runs")


# A small synthetic dataset for fast pipeline tests (full-size data is only used by the slow tests).
SMALL_DATA = ("data.source.num_groups=40", "data.samples_per_shard=64")

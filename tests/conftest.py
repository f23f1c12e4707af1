"""Shared fixtures: a session-wide data/asset cache and a helper that runs `train.py` as users do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.zygote import _ZYGOTE as ZYGOTE
from tests.zygote import run_python

ROOT = Path(__file__).resolve().parents[1]
# Timeouts catch hangs, not slowness: a 2-core machine under other jobs' load (load average 6–12 seen) runs a
# training subprocess several times slower than an idle one. Every subprocess timeout in the suite goes through
# `scaled`; CROSSMOD_TEST_TIMEOUT_SCALE sets the margin (default 3×).
TIMEOUT_SCALE = float(os.environ.get("CROSSMOD_TEST_TIMEOUT_SCALE", "3"))


# Cache entries are signed with the user's cache key (src/crossmod/data/cache_keys.py); the suite keeps its own key out of
# the home folder. One file for every worker and subprocess (created once, atomically).
os.environ.setdefault("CROSSMOD_CACHE_KEY_FILE", str(Path(tempfile.gettempdir()) / f"crossmod-tests-{os.getuid()}" / "cache_key"))

# Under pytest-xdist (make test) the workers share the cores: each worker, and every training subprocess it starts,
# computes on its share. Left at torch's default (one thread per core) every process spins OpenMP threads on cores
# the other worker holds, and a training ran 2–3× slower than alone.
# As crossmod.cli sets it before a job (and so torch) is imported; set here, before the suite's own, so that torch,
# loaded once by this worker's zygote (tests/zygote.py), reads the value a fresh `python train.py` has.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The suite never uses the network: every command is offline (and so forkable from one zygote, read at import).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    _threads = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(_threads)
    import torch

    torch.set_num_threads(_threads)

# The zygote (tests/zygote.py) starts with the environment as set above, whichever test happens to start it.
ZYGOTE.use_environment(dict(os.environ))

# Modules that take minutes (trainings, the cluster, every benchmark at once) go to the workers first, so the short
# modules fill in around them and no worker is left running a long one alone at the end (longest first).
LONG_MODULES = (
    "tests/training/test_vlm_learns.py",
    "tests/training/test_dataset_job_matrix.py",
    "tests/training/test_tag_generator_learns.py",
    "tests/slurm/test_local_cluster.py",
    "tests/training/test_vlm_families_learn.py",
    "tests/test_bench_smoke.py",
    "tests/serving/test_serve.py",
    "tests/test_gpu_proof.py",
    "tests/training/test_synthetic_thresholds.py",
    "tests/training/test_zero3.py",
    "tests/training/test_zero3_families.py",
    "tests/training/test_unimodal_ceilings.py",
    "tests/training/test_zero3_inference.py",
    "tests/training/test_sweeps.py",
    "tests/inference/test_predict_ocr.py",
    "tests/reports/test_culture_transfer_cv.py",
    "tests/artifacts/test_export_predict.py",
    "tests/results/test_evaluate.py",
    "tests/training/test_rgcl_runs.py",
    "tests/artifacts/test_portable_exports.py",
    "tests/serving/test_mixed_adapters.py",
    "tests/artifacts/test_seq_cls_export.py",
    "tests/training/test_interruption.py",
    "tests/training/test_same_seed.py",
    "tests/test_wheelhouse.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long modules first, in LONG_MODULES' order; every other test keeps its place (a stable sort)."""
    rank = {module: i for i, module in enumerate(LONG_MODULES)}

    def key(item: pytest.Item) -> int:
        return rank.get(Path(str(item.path)).relative_to(ROOT).as_posix(), len(rank))

    items.sort(key=key)


def offline_pip_env() -> dict[str, str]:
    """pip with no configuration file and no index: what it resolves comes from the command's own folders."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "WANDB_MODE": "disabled"}


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
        self,
        *overrides: str,
        check: bool = True,
        env: dict[str, str] | None = None,
        timeout: int = 900,
        script: str = "train.py",
        fresh: bool = False,
    ) -> subprocess.CompletedProcess:
        """`fresh`: a new interpreter rather than a fork of the worker's zygote (tests/zygote.py says when it matters)."""
        flags = [o for o in overrides if o.startswith("-") and not o.startswith("~")]
        rest = [o for o in overrides if o not in flags]
        command = [sys.executable, str(ROOT / script), *flags, f"paths.data_dir={self.data_dir}", f"paths.log_dir={self.log_dir}", *rest]
        full_env = {**os.environ, "HYDRA_FULL_ERROR": "1", "WANDB_MODE": "offline", "COLUMNS": "120", **(env or {})}
        try:
            result = run_python(command, cwd=ROOT, env=full_env, timeout=scaled(timeout), fresh=fresh)
        except subprocess.TimeoutExpired as hung:  # what it printed, stall reports first: where it waited
            out, err = (_text(stream) for stream in (hung.stdout, hung.stderr))
            raise AssertionError(
                f"{script} {' '.join(overrides)} timed out after {hung.timeout:.0f} s:{_stall_reports(err)}\n{out[-4000:]}\n{err[-8000:]}"
            ) from None
        if check and result.returncode != 0:
            raise AssertionError(
                f"{script} {' '.join(overrides)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
                + _stall_reports(result.stderr)
            )
        return result

    def run_dirs(self, name: str) -> list[Path]:
        return sorted((self.log_dir / name / "runs").iterdir())

    def metrics(self, run_dir: Path) -> dict:
        return json.loads((run_dir / "metrics.json").read_text())


def _text(stream: str | bytes | None) -> str:
    return stream.decode(errors="replace") if isinstance(stream, bytes) else stream or ""


def _stall_reports(stderr: str) -> str:
    """Every rank's stall report (callbacks.stall_report), which the tail above may have cut: where a hung rank waited."""
    start = stderr.find("[crossmod] rank ")
    return "" if start < 0 else f"\n--- stall reports ---\n{stderr[start : start + 30000]}"


@pytest.fixture
def train_run(data_dir: Path, tmp_path: Path) -> TrainRun:
    return TrainRun(data_dir, tmp_path / "runs")


# A small synthetic dataset for fast pipeline tests (full-size data is only used by the slow tests).
SMALL_DATA = ("data.source.num_groups=40", "data.samples_per_shard=64")


def stop_once_reached(threshold: float, monitor: str = "val/mean/auroc") -> str:
    """The override that ends a learning test's run at its first validation reaching `threshold`.

    A learning test asks whether the recipe reaches the threshold within its epochs (its best validation ≥ threshold);
    Lightning's EarlyStopping(stopping_threshold=…) answers the same question and skips the epochs after the answer is
    known (the schedule itself is unchanged: the epochs run are the full recipe's first ones). The margins are measured
    on the full recipe, unstopped, by scripts/learning_margins.py.
    """
    stopper = f"{{_target_: lightning.pytorch.callbacks.EarlyStopping, monitor: {monitor}, mode: max, stopping_threshold: {threshold}, patience: 1000}}"
    return f"+callbacks.reached={stopper}"

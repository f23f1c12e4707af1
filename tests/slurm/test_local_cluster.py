"""slurm/train.sbatch and slurm/cv_array.sbatch on a real two-node SLURM cluster (slurm/local_cluster.sh).

The cluster is Debian's slurmctld + two slurmd daemons on this machine; jobs train the default experiment
on CPU with gloo (2 nodes x 1 task). Needs root (the script installs packages and starts daemons).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossmod.training.slurm import AllocationMismatch, check_allocation
from tests.conftest import ROOT, SMALL_DATA, scaled
from tests.zygote import run_python

pytestmark = pytest.mark.slurm

CLUSTER = ROOT / "slurm" / "local_cluster.sh"
STATE_DIR = Path(os.environ.get("CROSSMOD_SLURM_DIR", "/tmp/crossmod-slurm"))
SLURM_CONF = STATE_DIR / "slurm.conf"
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
CPU_JOB = ["--gpus-per-node=0", "--cpus-per-task=1"]
CPU_TRAINER = ["trainer=ddp_cpu", "trainer.num_nodes=2", "trainer.devices=1", "print_table=false", *SMALL_DATA]


def _env() -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(SLURM_CONF), "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "1"}


@pytest.fixture(scope="session")
def slurm_cluster():
    """Starts the local cluster (unless one is up already) and stops it at the end of the session."""
    if os.geteuid() != 0 and not shutil.which("slurmctld"):
        pytest.skip("local SLURM cluster needs root (to apt-get install slurmctld/slurmd/munge and start daemons)")
    if os.geteuid() != 0:
        pytest.skip("local SLURM cluster needs root (daemons, /etc/hosts)")
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        pytest.skip("slurmctld is not installed and there is no apt-get to install it")
    was_running = subprocess.run([str(CLUSTER), "status"], capture_output=True).returncode == 0
    start = subprocess.run([str(CLUSTER), "start"], capture_output=True, text=True, timeout=scaled(900))
    assert start.returncode == 0, f"local_cluster.sh start failed:\n{start.stdout}\n{start.stderr}"
    yield SLURM_CONF
    if not was_running:
        stop = subprocess.run([str(CLUSTER), "stop"], capture_output=True, text=True, timeout=scaled(120))
        assert stop.returncode == 0, stop.stderr
        assert not STATE_DIR.exists()


class Slurm:
    def __init__(self, tmp: Path, data_dir: Path) -> None:
        self.log_dir, self.data_dir, self.out_dir = tmp / "runs", data_dir, tmp / "out"
        self.out_dir.mkdir(parents=True, exist_ok=True)

    def submit(self, script: str, sbatch_args: list[str], overrides: list[str]) -> str:
        command = [
            "sbatch", "--parsable", f"--output={self.out_dir}/%A_%a.out" if "array" in script else f"--output={self.out_dir}/%j.out", *sbatch_args, f"slurm/{script}",
            f"paths.data_dir={self.data_dir}", f"paths.log_dir={self.log_dir}", *overrides,
        ]  # fmt: skip
        result = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, check=True)
        return result.stdout.strip().split(";")[0]

    def job(self, job: str) -> dict[str, str]:
        out = subprocess.run(["scontrol", "show", "job", "-o", job], env=_env(), capture_output=True, text=True).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(self, job: str, timeout: float = 600) -> dict[str, str]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            info = self.job(job)
            if info.get("JobState") in FINAL_STATES:
                return info
            time.sleep(2)
        subprocess.run(["scancel", job], env=_env())
        raise AssertionError(f"job {job} not finished after {timeout}s: {self.job(job)}\n{self.output(job)[-4000:]}")

    def output(self, job: str) -> str:
        path = self.out_dir / f"{job if '_' in job else job}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def run_dir(self, job: str, name: str = "synthetic_concat") -> Path:
        return self.log_dir / name / "runs" / f"slurm-{job}"

    def preempt_after_first_epoch(self, job: str, run_dir: Path, timeout: float) -> None:
        """SIGUSR1, as SLURM sends it before a time limit, once epoch 0 is saved: the job is preempted during epoch 1."""
        deadline = time.time() + timeout
        while not (run_dir / "checkpoints" / "last.ckpt").exists():
            assert time.time() < deadline, f"no checkpoint after {timeout:.0f} s\n{self.output(job)[-4000:]}"
            assert self.job(job).get("JobState") in ("PENDING", "RUNNING", "CONFIGURING"), self.output(job)[-4000:]
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal=USR1", job], env=_env(), check=True)

    def assert_completed(self, job: str, info: dict[str, str]) -> None:
        assert info.get("JobState") == "COMPLETED", f"job {job}: {info.get('JobState')}\n{self.output(job)[-6000:]}"


@pytest.fixture(scope="module")
def tiny_qwen(data_dir: Path) -> str:
    from crossmod.runtime.resolvers import tiny_vlm

    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))


@pytest.fixture
def slurm(slurm_cluster, data_dir: Path, tmp_path: Path) -> Slurm:
    return Slurm(tmp_path, data_dir)


def _metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


def _flat(tree: dict, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _prediction_ids(path: Path) -> list[str]:
    with path.open() as f:
        return [row["id"] for row in csv.DictReader(f)]


def test_check_allocation_names_both_numbers():
    env = {"SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NAME": "x"}
    check_allocation({"num_nodes": 2, "devices": 2}, env)
    check_allocation({"num_nodes": 1, "devices": 3}, {})  # not under SLURM: nothing to check
    with pytest.raises(
        AllocationMismatch, match=r"trainer.num_nodes=2 x trainer.devices=1 = 2 processes, but SLURM started SLURM_NTASKS=4"
    ):
        check_allocation({"num_nodes": 2, "devices": 1}, env)
    with pytest.raises(AllocationMismatch, match=r"trainer.num_nodes=1, but the job has 2 nodes"):
        check_allocation({"num_nodes": 1, "devices": 4}, env)


def test_train_sbatch_two_nodes(slurm: Slurm):
    """Both ranks join one job over two nodes; training and exact evaluation finish in one run directory."""
    job = slurm.submit("train.sbatch", ["--nodes=2", "--ntasks-per-node=1", *CPU_JOB], [*CPU_TRAINER, "trainer.max_epochs=2"])
    info = slurm.wait(job)
    slurm.assert_completed(job, info)
    runs = list((slurm.log_dir / "synthetic_concat" / "runs").iterdir())
    assert runs == [slurm.run_dir(job)], runs
    run_dir = runs[0]
    log = (run_dir / "train.log").read_text()
    assert "MEMBER: 1/2" in log and "MEMBER: 2/2" in log, log[-3000:]
    hosts = set(re.findall(r"node\d", info.get("NodeList", ""))) or set(re.findall(r"node\[1-2\]", info.get("NodeList", "")))
    assert hosts, info
    metrics = _metrics(run_dir)
    assert metrics["epochs"] == 2 and metrics["global_step"] > 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    heads = 5
    for stage in ("val", "test"):
        ids = _prediction_ids(run_dir / "predictions" / f"{stage}.csv")
        # exact evaluation: every sample scored once per head over both ranks
        assert len(ids) == manifest["counts"]["split"][stage] * heads
        assert len(set(ids)) == manifest["counts"]["split"][stage]
    # finished: the scored weights stay, the resume-only last.ckpt went (src/crossmod/artifacts/finished_run.py)
    assert not (run_dir / "checkpoints" / "last.ckpt").exists() and Path(metrics["best_checkpoint"]).is_file()
    assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"


def test_allocation_mismatch_fails_with_both_numbers(slurm: Slurm):
    job = slurm.submit(
        "train.sbatch", ["--nodes=2", "--ntasks-per-node=1", *CPU_JOB], [*CPU_TRAINER, "trainer.devices=2", "trainer.max_epochs=1"]
    )
    info = slurm.wait(job, timeout=scaled(300))
    assert info.get("JobState") == "FAILED", info
    out = slurm.output(job)
    assert "trainer.num_nodes=2 x trainer.devices=2 = 4 processes, but SLURM started SLURM_NTASKS=2" in out, out[-4000:]


PREEMPT = [
    *CPU_TRAINER,
    "trainer.max_epochs=3",
    "+trainer.deterministic=true",
    "+data.epoch_samples=1280",
    "data.epoch=resampled",
    "data.num_workers=1",
    "seed=7",
    "keep_resume_checkpoints=true",  # the test reads the requeue checkpoint after the run
]


def test_preempted_job_resumes_and_matches_uninterrupted_run(slurm: Slurm):
    """SIGUSR1 mid-training: hpc checkpoint, requeue (same job id), resume at the saved step, same final metrics."""
    sbatch = ["--nodes=2", "--ntasks-per-node=1", *CPU_JOB]
    reference = slurm.submit("train.sbatch", sbatch, PREEMPT)
    job = slurm.submit("train.sbatch", sbatch, PREEMPT)
    run_dir = slurm.run_dir(job)
    slurm.preempt_after_first_epoch(job, run_dir, timeout=300)

    info = slurm.wait(job, timeout=scaled(600))
    slurm.assert_completed(job, info)
    assert info.get("Restarts") == "1", info
    out = slurm.output(job)
    hpc = run_dir / "checkpoints" / "requeue" / "hpc_ckpt_1.ckpt"
    assert hpc.exists(), out[-4000:]
    assert "restart 1:" in out
    assert f"Restoring states from the checkpoint path at {hpc}" in (run_dir / "train.log").read_text() + out

    import torch

    saved = torch.load(hpc, map_location="cpu", weights_only=True)
    epoch, step = saved["epoch"], saved["global_step"]
    per_epoch = 1280 // (32 * 2)
    assert 0 < step < 3 * per_epoch and step % per_epoch != 0, (epoch, step)  # mid-epoch
    log = (run_dir / "train.log").read_text()
    assert f"Resuming the training stream at epoch {epoch}, batch {step - epoch * per_epoch}" in log, log[-3000:]

    ref_info = slurm.wait(reference, timeout=scaled(600))
    slurm.assert_completed(reference, ref_info)
    resumed, uninterrupted = _metrics(run_dir), _metrics(slurm.run_dir(reference))
    assert resumed["global_step"] == uninterrupted["global_step"] == 3 * per_epoch
    # Same batches, weights, optimizer/scheduler and RNG states; float32 reductions leave ~1e-8 differences.
    for key in ("best", "final"):
        assert _flat(resumed[key]) == pytest.approx(_flat(uninterrupted[key]), abs=1e-6)


def test_cv_array_three_folds_and_report(slurm: Slurm):
    job = slurm.submit(
        "cv_array.sbatch",
        ["--array=0-2", "--nodes=1", "--ntasks-per-node=1", *CPU_JOB],
        ["trainer=cpu", "trainer.max_epochs=1", "num_folds=3", "print_table=false", *SMALL_DATA],
    )
    for task in range(3):
        info = slurm.wait(f"{job}_{task}")
        slurm.assert_completed(f"{job}_{task}", info)
    cv_dir = slurm.log_dir / "synthetic_concat" / "cv" / f"slurm-{job}"
    runs = sorted(p.name for p in cv_dir.iterdir() if p.is_dir())
    assert runs == [f"slurm-{job}_{k}" for k in range(3)], runs
    for k in range(3):
        assert json.loads((cv_dir / f"slurm-{job}_{k}" / "fold_result.json").read_text())["fold"] == k
    report = run_python(
        [sys.executable, "-m", "crossmod", "cv-report", f"runs={cv_dir}"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=scaled(300),
    )  # fmt: skip
    assert report.returncode == 0, report.stderr[-4000:]
    summaries = list(cv_dir.rglob("cv_summary.json"))
    assert summaries, report.stdout[-3000:]
    text = report.stdout + "".join(p.read_text() for p in cv_dir.rglob("*.md"))
    assert "missing" not in text.lower() or "missing folds: none" in text.lower(), text[-3000:]


def test_hydra_submitit_launcher_runs_each_fold_as_a_slurm_job(slurm: Slurm):
    """`python train.py -m hydra/launcher=slurm fold=0,1`: one SLURM job per fold, the sweep waiting for both."""
    command = [
        sys.executable, "train.py", "-m", "hydra/launcher=slurm", "fold=0,1", "num_folds=3",
        "trainer=cpu", "trainer.max_epochs=1", "print_table=false", *SMALL_DATA,
        f"paths.data_dir={slurm.data_dir}", f"paths.log_dir={slurm.log_dir}",
        "hydra.launcher.cpus_per_task=1", "hydra.launcher.timeout_min=15",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=scaled(900))
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-6000:])
    sweeps = slurm.log_dir / "synthetic_concat" / "multiruns"
    finished = sorted(sweeps.glob("*/*_fold*/metrics.json"))
    assert [p.parent.name for p in finished] == ["0_fold0", "1_fold1"], finished
    assert len({p.parent.parent for p in finished}) == 1  # one sweep directory, one run directory per fold
    for path, fold in zip(finished, (0, 1)):
        assert json.loads(path.read_text())["fold"] == fold
    # each fold ran as its own SLURM job (an array task): submitit's folder per `<array job>_<task>` holds its result
    jobs = sorted(p for p in sweeps.glob("*/.submitit/*") if p.is_dir() and re.fullmatch(r"\d+_\d+", p.name))
    assert [job.name.split("_")[1] for job in jobs] == ["0", "1"], jobs
    assert all(list(job.glob("*_result.pkl")) for job in jobs), jobs


def test_zero3_job_on_two_nodes_resumes_exactly_after_preemption(slurm: Slurm, tiny_qwen: str):
    """`sbatch … slurm/train.sbatch strategy=deepspeed_zero3`: a tiny Qwen2-VL LoRA run sharded over two nodes (CPU,
    gloo), preempted mid-epoch, requeued and resumed from its sharded hpc checkpoint, ends where an uninterrupted
    job of the same command ends."""
    batch, samples = 4, 64
    per_epoch = samples // (batch * 2)
    overrides = [
        *CPU_TRAINER, "strategy=deepspeed_zero3", "model=vlm", f"model.name_or_path={tiny_qwen}",
        "model.preprocessor.image_size=56", f"data.batch_size={batch}", "data.num_workers=0",
        f"+data.epoch_samples={samples}", "data.epoch=resampled", "trainer.max_epochs=2", "seed=7", "keep_resume_checkpoints=true",
    ]  # fmt: skip
    sbatch = ["--nodes=2", "--ntasks-per-node=1", *CPU_JOB]
    reference = slurm.submit("train.sbatch", sbatch, overrides)
    job = slurm.submit("train.sbatch", sbatch, overrides)
    name = "synthetic_vlm"
    run_dir = slurm.run_dir(job, name)
    slurm.preempt_after_first_epoch(job, run_dir, timeout=scaled(600))

    info = slurm.wait(job, timeout=scaled(900))
    slurm.assert_completed(job, info)
    assert info.get("Restarts") == "1", info
    hpc = run_dir / "checkpoints" / "requeue" / "hpc_ckpt_1.ckpt"
    assert (hpc / "checkpoint").is_dir(), slurm.output(job)[-4000:]  # DeepSpeed's sharded layout
    log = (run_dir / "train.log").read_text()
    assert "crossmod.runtime.strategies.DeepSpeedStrategy" in (run_dir / "config.yaml").read_text()  # the group, not DDP appended
    resumed_at = re.search(r"Resuming the training stream at epoch (\d+), batch (\d+)", log)
    assert resumed_at and int(resumed_at.group(2)) > 0, log[-3000:]  # mid-epoch

    ref_info = slurm.wait(reference, timeout=scaled(900))
    slurm.assert_completed(reference, ref_info)
    resumed, uninterrupted = _metrics(run_dir), _metrics(slurm.run_dir(reference, name))
    assert resumed["global_step"] == uninterrupted["global_step"] == 2 * per_epoch
    for key in ("best", "final"):
        assert _flat(resumed[key]) == pytest.approx(_flat(uninterrupted[key]), abs=1e-5)


def test_evaluate_job_on_two_nodes_scores_what_one_process_does(slurm: Slurm, tmp_path: Path):
    """`sbatch … slurm/train.sbatch evaluate.py ckpt=<run>`: scoring runs where training runs, one rank per node, each
    meme on one rank; the report equals a single-process evaluate.py's."""
    from tests.conftest import TrainRun

    runs = TrainRun(slurm.data_dir, tmp_path / "trained")
    runs(*SMALL_DATA, "debug=limit", "trainer.limit_test_batches=1.0", "print_table=false", env={"CROSSMOD_RUN_ID": "run"})
    run = tmp_path / "trained" / "synthetic_concat" / "runs" / "run"
    common = [f"ckpt={run}", f"paths.data_dir={slurm.data_dir}", *SMALL_DATA]
    local = run_python(
        [sys.executable, "evaluate.py", *common, f"out={tmp_path / 'one'}"],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    assert local.returncode == 0, local.stderr[-3000:]
    command = [
        "sbatch", "--parsable", f"--output={slurm.out_dir}/%j.out", "--nodes=2", "--ntasks-per-node=1", *CPU_JOB,
        "slurm/train.sbatch", "evaluate.py", *common, f"out={tmp_path / 'two'}",
    ]  # fmt: skip
    job = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True, check=True).stdout.strip()
    info = slurm.wait(job, timeout=scaled(600))
    slurm.assert_completed(job, info)
    out = slurm.output(job)
    assert "evaluate.py on 2 node(s)" in out and "MEMBER: 2/2" in out, out[-3000:]
    one = list(csv.DictReader(open(tmp_path / "one" / "predictions" / "run.csv")))
    two = list(csv.DictReader(open(tmp_path / "two" / "predictions" / "run.csv")))
    assert [r["id"] for r in one] == [r["id"] for r in two] and len(one) > 0
    for a, b in zip(one, two):
        for key in a:
            assert float(a[key]) == pytest.approx(float(b[key]), abs=1e-6) if key.endswith("_probability") else a[key] == b[key]

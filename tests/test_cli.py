"""`crossmod <job> [overrides]`: one command for every job, the configs to choose from (`ls`) and one's own copy of
one (`cp`); the help answers without loading torch, and an installed wheel trains, exports and predicts from an empty
folder outside any checkout."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossmod import cli
from scripts.wheelhouse import build_own_wheel
from tests.conftest import ROOT, SMALL_DATA, offline_pip_env, scaled

CROSSMOD = [sys.executable, "-m", "crossmod"]


def _crossmod(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    done = subprocess.run([*CROSSMOD, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=scaled(timeout))
    assert done.returncode == 0, f"crossmod {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def test_help_lists_every_job_and_loads_no_library():
    probe = "import sys; from crossmod.cli import main; main(['--help']); main(['ls']); print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'hydra', 'omegaconf', 'lightning', 'transformers')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=scaled(60), check=True)
    assert done.stdout.rstrip().endswith("[]"), done.stdout[-500:]  # `crossmod --help` and `ls` import the standard library only
    for name in cli.JOBS:
        assert f"  {name} " in done.stdout, f"crossmod --help does not list {name}"
    assert "experiments: " in done.stdout and " qwen_lora_cv " in done.stdout


def test_every_job_is_a_module_with_a_main():
    for name, job in cli.JOBS.items():
        spec = importlib.util.find_spec(job.module)
        assert spec and spec.origin and "def main(" in Path(spec.origin).read_text(), f"crossmod {name}: {job.module} has no main"


@pytest.mark.parametrize("job", ["train", "cv", "evaluate", "predict", "cv-report", "consolidate", "prepare"])
def test_a_job_answers_its_own_help(job):
    text = _crossmod(job, "--help")
    assert f"crossmod {job}" in text or "== Configuration groups ==" in text, text[:500]


def test_an_unknown_job_names_the_jobs():
    done = subprocess.run([*CROSSMOD, "trian"], capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode != 0 and "no job 'trian'" in done.stderr and "  train " in done.stderr


def test_report_by_kind_is_the_report_job_of_that_kind(monkeypatch):
    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(cli, "run_job", lambda name, args: ran.append((name, args)))
    for kind in ("cv", "seed", "zeroshot"):
        cli.main(["report", kind, "runs=folds"])
    assert ran == [(f"{kind}-report", ["runs=folds"]) for kind in ("cv", "seed", "zeroshot")]
    for wrong in ([], ["fold"]):
        with pytest.raises(SystemExit, match=r"crossmod report cv\|seed\|zeroshot"):
            cli.main(["report", *wrong])
    assert _crossmod("report", "seed", "--help").startswith("crossmod seed-report: ")


def test_ls_lists_every_shipped_experiment_with_its_one_line():
    header, *rows = _crossmod("ls", "experiments").splitlines()
    assert header == "experiments (experiment=<name>):"
    listed = [row.split()[0] for row in rows]
    assert listed == sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml"))
    described = dict(row.strip().split(None, 1) for row in rows if len(row.split()) > 1)
    assert set(described) == set(listed), "an experiment without a description"  # e.g. its first prose comment line
    assert described["synthetic_concat"].startswith("Concat fusion on the embedded synthetic memes")
    assert not any(line.startswith(("python ", "crossmod ", "@package")) for line in described.values())


@pytest.mark.parametrize("group", ["..", "../..", "/etc", ".", "experiment/../.."])
def test_ls_names_only_config_groups(group):
    with pytest.raises(SystemExit, match=r"crossmod ls: no config group"):
        cli.options(group)


def _probe(*argv: str) -> subprocess.CompletedProcess:
    """`crossmod <argv>` in a process that then prints which heavy libraries it imported."""
    code = (
        "import sys; from crossmod.cli import main\n"
        "try:\n    status = main(sys.argv[1:])\nexcept SystemExit as stop:\n    status = stop.code\n"
        "print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'lightning', 'transformers'}), status)"
    )
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=scaled(60))


def test_a_jobs_help_starts_with_its_own_keys_and_loads_no_torch():
    done = _probe("train", "--help")
    lines = done.stdout.splitlines()
    assert lines[-1] == "LOADED [] 0", done.stdout[-2000:] + done.stderr[-2000:]
    assert lines[0].startswith("crossmod train: ") and lines[3].startswith("keys ")
    keys = [line.split()[0] for line in lines[4:] if line.startswith("  ")]
    assert keys[:4] == ["name=${run_name:}", "label=${run_label:${name}}", "seed=1234", "fold=null"], keys[:6]
    assert "cv.selection=inner" in keys and "experiment=null" in keys and "model=concat" in keys
    assert len(lines) < 80  # Hydra's own listing of every composed value is `--cfg job`, one flag away


@pytest.mark.parametrize(
    "args, said",
    [
        (["train", "experiment=qwen_lora_c"], "experiment=qwen_lora_c: no such experiment config (did you mean qwen_lora_cv?)"),
        (["train", "-m", "model=text,imag"], "model=imag: no such model config (did you mean image?)"),
        (["train", "trainer.max_epoch=1"], "trainer.max_epoch: the composed config has no key 'max_epoch' under trainer (did you mean trainer.max_epochs?)"),
        (["cv", "experiment=mhc_text", "data.source.languags=[de]"], "(did you mean data.source.languages?)"),
        (["evaluate", "ckpt=x", "dat=mhc"], "dat: the composed config has no key 'dat' (did you mean data?)"),
    ],
)
def test_a_typo_is_one_line_with_a_did_you_mean_before_torch_loads(args, said):
    done = _probe(*args)
    assert done.stdout.splitlines()[-1] == "LOADED [] 1", done.stdout[-2000:] + done.stderr[-2000:]
    error = done.stderr.strip().splitlines()
    assert len(error) == 1 and said in error[0] and "Fix: " in error[0], error
    assert f"+{args[-1]}" not in error[0]  # never the advice that adds the typo as a new key


def test_a_key_with_no_near_name_is_told_how_to_add_it_on_purpose():
    done = _probe("train", "trainer.foo_bar=1")
    assert "+trainer.foo_bar=<value> adds a key the config lacks, if that is meant" in done.stderr, done.stderr


def test_what_the_config_has_passes_the_checks(tmp_path):
    """Sweeps, additions, deletions, an experiment's own keys and one's own --config-dir all go through."""
    from crossmod.launch.command_line import check

    mine = tmp_path / "experiment" / "mine.yaml"
    mine.parent.mkdir()
    mine.write_text("# @package _global_\nname: mine\nextra:\n  depth: 3\n")
    configs, module = cli.configs_dir(), cli.JOBS["train"].module
    for args in (
        ["-m", "model=text,image", "seed=1,2", "trainer.max_epochs=1"],
        ["-m", "model=text,image", "model.image.name=resnet18"],  # a key of the second option only
        ["model/scoring=retrieval", "~data.heads.US", "data.heads.DE.kind=binary", "hydra.run.dir=/tmp/x"],
        ["experiment=mhc_text", "data.source.languages=[de]", "seed=3"],
        ["--config-dir", str(tmp_path), "experiment=mine", "extra.depth=4"],
        ["experiment=qwen_lora_c", "--cfg", "job"],  # a Hydra flag the checks do not know: Hydra's to answer
        ["data=mhc", "data.raw_dir=/nowhere"],
    ):
        check("train", module, args, configs)
    from crossmod.runtime.user_errors import UserError

    with pytest.raises(UserError, match="extra.dept"):
        check("train", module, ["--config-dir", str(tmp_path), "experiment=mine", "extra.dept=4"], configs)


def test_cp_puts_a_copy_where_config_dir_finds_it_named_after_its_file(tmp_path):
    """`crossmod cp experiment/synthetic_concat mine.yaml` lands in experiment/mine.yaml (where `--config-dir` reads an
    experiment), says the command that uses it, and the copy's name is `mine`; the command composes as said."""
    said = subprocess.run(
        [*CROSSMOD, "cp", "experiment/synthetic_concat", "mine.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60)
    )
    assert said.returncode == 0, said.stderr
    copy = tmp_path / "experiment" / "mine.yaml"
    assert copy.is_file() and not (tmp_path / "mine.yaml").exists() and "name: mine" in copy.read_text()
    use = f"crossmod train --config-dir {tmp_path} experiment=mine"
    assert said.stdout.splitlines() == [str(Path("experiment") / "mine.yaml"), f"use it with: {use}"]
    composed = _crossmod(*use.split()[1:], "--cfg", "job")
    assert "name: mine" in composed


def test_cp_starts_an_experiment_of_ones_own_that_the_jobs_compose(tmp_path):
    mine = tmp_path / "configs" / "experiment" / "mine.yaml"
    _crossmod("cp", "experiment/synthetic_concat", str(mine))
    assert "name: mine" in mine.read_text()  # the run's name follows the file's
    mine.write_text(mine.read_text() + "\nseed: 77\n")
    composed = _crossmod("train", "--config-dir", str(tmp_path / "configs"), "experiment=mine", "--cfg", "job")
    assert "name: mine" in composed and "seed: 77" in composed
    # never over an existing file, and only configs crossmod ships (a path out of the package is not a config)
    for args in (
        ["experiment/synthetic_concat", str(mine)],
        ["../../setup", str(tmp_path / "x.yaml")],
        ["experiment/../../cli", str(tmp_path / "y.yaml")],
    ):
        done = subprocess.run([*CROSSMOD, "cp", *args], capture_output=True, text=True, timeout=scaled(60))
        assert done.returncode != 0 and "crossmod cp:" in done.stderr, args
    assert "seed: 77" in mine.read_text() and not (tmp_path / "x.yaml").exists() and not (tmp_path / "y.yaml").exists()
    planted = tmp_path / "configs" / "experiment" / "link.yaml"
    planted.symlink_to(tmp_path / "elsewhere.yaml")  # dangling: exists() is False, yet a copy would follow it
    done = subprocess.run(
        [*CROSSMOD, "cp", "experiment/synthetic_concat", str(planted)], capture_output=True, text=True, timeout=scaled(60)
    )
    assert done.returncode != 0 and "crossmod cp:" in done.stderr and not (tmp_path / "elsewhere.yaml").exists()


def test_a_job_that_starts_its_own_processes_starts_the_job(data_dir, tmp_path):
    """Lightning's DDP ranks rerun `python -m <main module> <argv>`: through `crossmod train` that is the train job with
    the same overrides (two processes on CPU, gloo), not the command-line dispatcher without the job's name."""
    command = [*CROSSMOD, "train", f"paths.data_dir={data_dir}", f"paths.log_dir={tmp_path}", *SMALL_DATA, "debug=limit", "trainer=ddp_cpu"]
    env = {**os.environ, "CROSSMOD_RUN_ID": "ddp", "WANDB_MODE": "offline"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(900))
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    metrics = json.loads((tmp_path / "synthetic_concat" / "runs" / "ddp" / "metrics.json").read_text())
    assert metrics["environment"]["world_size"] == 2, metrics.get("environment")


def _test_scores(path: Path, head: str, column: str) -> dict[str, float]:
    return {r["id"]: float(r[column]) for r in csv.DictReader(open(path)) if r.get("head", head) == head}


def test_an_installed_wheel_trains_exports_and_predicts_from_an_empty_folder(tmp_path):
    """What a user of `pip install crossmod` gets: the command, the configs inside the package, and data, caches and runs
    in the working directory; the installed package is left as installed."""
    site, work = tmp_path / "site", tmp_path / "work"
    wheel = build_own_wheel(tmp_path / "wheel")
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(site), str(wheel)]
    subprocess.run(install, env=offline_pip_env(), check=True, capture_output=True, timeout=scaled(300))
    installed = sorted(p.relative_to(site) for p in site.rglob("*"))
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "WANDB_MODE": "offline", "CROSSMOD_RUN_ID": "w"}
    env.pop("CROSSMOD_ROOT", None)
    command = site / "bin" / "crossmod"
    where = subprocess.run(
        [sys.executable, "-c", "import crossmod; print(crossmod.__file__)"], cwd=work, env=env, capture_output=True, text=True, check=True
    )
    assert where.stdout.startswith(str(site)), where.stdout  # the wheel's crossmod, not the checkout's

    def run(*args: str) -> None:
        done = subprocess.run([str(command), *args], cwd=work, env=env, capture_output=True, text=True, timeout=scaled(900))
        assert done.returncode == 0, f"crossmod {' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"

    run("train", *SMALL_DATA, "debug=limit")
    run_dir = work / "checkpoints" / "synthetic_concat" / "runs" / "w"
    assert (run_dir / "metrics.json").is_file() and (work / "data").is_dir()
    run("export", f"run={run_dir}", "culture=US", "out=export")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    shards = next((work / "data").rglob(f"{manifest['dataset']}-{manifest['fingerprint']}"))
    run("predict", "adapters=export/US", f"inputs={shards}", "out=us.csv")
    predicted = _test_scores(work / "us.csv", "US", "US_probability")
    tested = _test_scores(run_dir / "predictions" / "test.csv", "US", "probability")
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())
    assert sorted(p.relative_to(site) for p in site.rglob("*") if "__pycache__" not in p.parts) == [
        p for p in installed if "__pycache__" not in p.parts
    ]  # nothing written into the installed package


def test_status_records_the_command_as_the_user_typed_it(monkeypatch, tmp_path):
    """status.json's resume line starts as the job was started: the installed command, or a checkout's root script."""
    from crossmod.training.run_status import command_line

    monkeypatch.chdir(tmp_path)
    for argv0, expected in (("/venv/bin/crossmod", "crossmod train"), (str(ROOT / "crossmod" / "__main__.py"), "crossmod train"),
                            (str(tmp_path / "train.py"), "python train.py")):  # fmt: skip
        monkeypatch.setattr(sys, "argv", [argv0])
        monkeypatch.setenv("CROSSMOD_INVOKED_AS", cli.invoked_as("train"))
        monkeypatch.setattr(sys, "argv", ["/site-packages/crossmod/recipes/train.py", "fold=0"])  # as run_job sets it
        assert command_line() == f"{expected} fold=0"

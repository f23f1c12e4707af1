"""Every command the docs show works as written (tests/doc_commands.py reads them).

- Hydra programs (train.py, cross_validate.py, zeroshot.py, evaluate.py, export.py, predict.py, the prompting
  modules) compose with the documented overrides, leave no mandatory value (`???`) unset, and a command that
  runs a real VLM says where it runs (`trainer=gpu`, or a recipe that sets it).
- Batch scripts run as SLURM starts them (stand-ins for srun/wandb) and the training command they start composes.
- Other programs exist and accept every documented flag (`--help`); `make` targets and `pip` extras exist.
The commands that train or score at tiny scale are run by the tests of their features; here they are composed.
"""

from __future__ import annotations

import configparser
import functools
import re
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (the resolvers the entry points register)
from crossmod.runtime.user_errors import missing_keys
from tests.conftest import ROOT, scaled
from tests.doc_commands import Command, documented_commands, hydra_overrides
from tests.slurm.batch_scripts import job_command, run_batch_script
from tests.zygote import run_python

COMMANDS = documented_commands()
HYDRA_PROGRAMS = {
    "train.py": "train",
    "cross_validate.py": "train",
    "zeroshot.py": "train",
    "evaluate.py": "evaluate",
    "export.py": "export",
    "predict.py": "predict",
    "prepare.py": "prepare",
}
# `crossmod <job>`: the same jobs through the installed command (src/crossmod/cli.py)
HYDRA_PROGRAMS |= {f"crossmod {job}": HYDRA_PROGRAMS[program] for job, program in {
    "train": "train.py", "cv": "cross_validate.py", "zeroshot": "zeroshot.py", "evaluate": "evaluate.py",
    "export": "export.py", "predict": "predict.py",
}.items()}  # fmt: skip
HYDRA_PROGRAMS |= {"crossmod fewshot": "train", "crossmod memebridge": "train"}  # the prompting protocols, on train.yaml
# the tools, each a Hydra job with its own config (src/crossmod/configs/<job>.yaml)
HYDRA_PROGRAMS |= {f"crossmod {job}": job.replace("-", "_") for job in (
    "prepare", "cv-report", "seed-report", "zeroshot-report", "consolidate", "retrieval-db", "wandb-offline", "serve",
)} | {"crossmod synthetic": "synthetic_rule"}  # fmt: skip
CROSSMOD_TOOLS = {"crossmod", "crossmod --help", "crossmod ls", "crossmod cp"}
# programs that run a model (a real VLM there needs a GPU); export and the reports only read files
RUNS_A_MODEL = {
    "train.py",
    "cross_validate.py",
    "zeroshot.py",
    "evaluate.py",
    "predict.py",
}
RUNS_A_MODEL |= {f"crossmod {job}" for job in ("train", "cv", "zeroshot", "fewshot", "memebridge", "evaluate", "predict")}
ARGPARSE_PROGRAMS = re.compile(r"^(scripts/\w+\.py|bench/\w+\.py|-m crossmod\.(data|training|reports)\.\w+)$")
EXTERNAL = {"aws", "apt-get", "sudo"}  # third-party tools; `sudo slurm/local_cluster.sh` is checked below
BATCH_OPTIONS = re.compile(r"--(nodes|gpus-per-node|ntasks-per-node|array)=(\d+)")


def by_kind(kind: str) -> list[Command]:
    return [c for c in COMMANDS if kind_of(c) == kind]


def kind_of(command: Command) -> str:
    program = command.program
    if program in HYDRA_PROGRAMS:
        return "hydra"
    if program in CROSSMOD_TOOLS:
        return "crossmod"
    if program == "sbatch":
        return "sbatch"
    if program in ("make", "pip", "wandb", "bash") or program in EXTERNAL:
        return program if program not in EXTERNAL else "external"
    if ARGPARSE_PROGRAMS.match(program):
        return "argparse"
    return "other"


def ids(commands: list[Command]) -> list[str]:
    return [c.source for c in commands]


def compose_program(config_name: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name, overrides=overrides)


def check_composed(command: Command, config_name: str, overrides: list[str]) -> None:
    try:
        cfg = compose_program(config_name, overrides)
    except Exception as error:  # the message Hydra gives the user, with the command that caused it
        pytest.fail(f"{command}\n  does not compose: {type(error).__name__}: {error}")
    missing = sorted(missing_keys(cfg))  # found without resolving (interpolations read files at run time)
    assert not missing, f"{command}\n  leaves mandatory values unset: {missing}"
    model = OmegaConf.to_container(cfg.model, resolve=False) if "model" in cfg else {}
    vlm_base = model.get("name_or_path")  # unresolved: a ${tiny_vlm:…} base is built on the fly, fine on CPU
    if command.program in RUNS_A_MODEL and isinstance(vlm_base, str) and "${" not in vlm_base and "/" in vlm_base:
        accelerator = OmegaConf.select(cfg, "trainer.accelerator")
        said = "trainer=cpu" in overrides  # a tiny model's folder (e.g. one a synthetic run exported) says so
        assert accelerator == "gpu" or said, f"{command}\n  runs {vlm_base} with trainer.accelerator={accelerator}: say trainer=gpu"


def test_the_docs_show_commands_of_every_kind():
    kinds = {kind_of(c) for c in COMMANDS}
    assert {"hydra", "sbatch", "argparse", "make", "pip", "wandb", "bash"} <= kinds
    unread = [str(c) for c in COMMANDS if kind_of(c) == "other"]
    assert not unread, "commands this test cannot check:\n" + "\n".join(unread)
    assert len(by_kind("hydra")) >= 60


@pytest.mark.parametrize("command", by_kind("hydra"), ids=ids(by_kind("hydra")))
def test_hydra_command_composes(command: Command):
    start = 3 if command.argv[1] == "-m" else 2
    overrides, flags = hydra_overrides(command.argv, start)
    assert set(flags) <= {"--help"}, f"{command}: unexpected flags {flags}"  # a job's help composes its config as a run does
    check_composed(command, HYDRA_PROGRAMS[command.program], overrides)


@pytest.mark.parametrize("command", by_kind("sbatch"), ids=ids(by_kind("sbatch")))
def test_batch_command_starts_a_composable_job(command: Command, tmp_path):
    options = {key: int(value) for key, value in BATCH_OPTIONS.findall(" ".join(command.argv))}
    script = next(a for a in command.argv if a.startswith("slurm/"))
    args = command.argv[command.argv.index(script) + 1 :]
    started = run_batch_script(
        tmp_path,
        script.removeprefix("slurm/"),
        args,
        nodes=options.get("nodes", 1),
        tasks_per_node=options.get("ntasks-per-node", 1),
        gpus_per_node=options.get("gpus-per-node", 1),
        array_task=0 if "array" in options else None,
        record_python=script.endswith("sweep_agent.sbatch"),
    )
    if script.endswith("sweep_agent.sbatch"):
        assert started["python"][:3] == ["-m", "wandb", "agent"] and started["python"][-1] == args[0], started
        return
    program, overrides = job_command(started["srun"])
    check_composed(command, HYDRA_PROGRAMS[program], overrides)


@functools.cache
def help_text(program: str) -> str:
    argv = [sys.executable, *program.split()]
    if program.startswith("crossmod "):
        argv = [sys.executable, "-m", *program.split()]
    done = run_python([*argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, f"{program} --help failed:\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.parametrize("command", by_kind("argparse"), ids=ids(by_kind("argparse")))
def test_program_accepts_the_documented_flags(command: Command):
    programs = [command.program]
    if command.program == "bench/placeholder.py":  # `bench/<name>.py`: every script make bench runs
        scripts = re.search(r"for script in ([\w ]+); do", (ROOT / "Makefile").read_text()).group(1).split()
        programs = [f"bench/{script}.py" for script in scripts]
    for program in programs:
        text = help_text(program)
        for flag in (a.split("=")[0] for a in command.argv[2:] if a.startswith("--")):
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", text), f"{command}\n  {program} has no {flag}"


@pytest.mark.parametrize("command", by_kind("crossmod"), ids=ids(by_kind("crossmod")))
def test_crossmod_command_runs_as_written(command: Command, tmp_path):
    """`crossmod --help`, `crossmod ls …`, `crossmod cp <config> <file>` run (in an empty folder); a bare `crossmod cp`
    in prose names the subcommand."""
    args = command.argv[1:]
    if args == ["cp"]:
        return
    done = run_python([sys.executable, "-m", "crossmod", *args], cwd=tmp_path, capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
    if args[:1] == ["cp"]:
        assert (tmp_path / args[2]).is_file()


def test_make_targets_and_pip_extras_exist():
    makefile = (ROOT / "Makefile").read_text()
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    extras = set(setup["options.extras_require"])
    for command in by_kind("make"):
        target = command.argv[1]
        assert re.search(rf"^{target}:", makefile, re.M), f"{command}: no make target {target}"
        for variable in (a.split("=")[0] for a in command.argv[2:] if re.match(r"[A-Z_]+=", a)):
            assert re.search(rf"^{target}:.*\n(\t.*\n)*\t.*\$\({variable}\)", makefile, re.M), f"{command}: {target} ignores {variable}"
    for command in by_kind("pip"):
        for extra in re.findall(r"\[([\w,]+)\]", " ".join(command.argv)):
            assert set(extra.split(",")) <= extras, f"{command}: setup.cfg has no extra {extra}"


@pytest.mark.parametrize("command", by_kind("bash"), ids=ids(by_kind("bash")))
def test_shell_scripts_exist_and_take_the_documented_flags(command: Command):
    """`bash <script> [--flag …]`: the script is in the repository and handles each documented flag (the scripts
    themselves are run by their tests: tests/test_gpu_proof.py)."""
    script = ROOT / command.argv[1]
    assert script.is_file(), f"{command}: no {command.argv[1]}"
    for flag in (a for a in command.argv[2:] if a.startswith("--")):
        assert f'"{flag}"' in script.read_text(), f"{command}: {command.argv[1]} does not handle {flag}"


def test_wandb_sweep_files_exist():
    for command in by_kind("wandb"):
        if command.argv[1] == "sweep":
            assert (ROOT / command.argv[2]).is_file(), f"{command}: no {command.argv[2]}"


def test_the_local_cluster_script_has_the_documented_subcommands():
    script = (ROOT / "slurm" / "local_cluster.sh").read_text()
    for command in [c for c in COMMANDS if c.argv[:2] == ["sudo", "slurm/local_cluster.sh"]]:
        assert re.search(rf"^\s*{command.argv[2]}\)", script, re.M), f"{command}: local_cluster.sh has no {command.argv[2]}"


def test_the_docs_never_spell_a_jobs_key_as_a_flag():
    """crossmod's jobs take Hydra overrides (`skip_existing=true`): a doc that writes one as an argparse flag
    (`--skip-existing`) shows a command that exits 2."""
    keys = set()
    for config in (ROOT / "src" / "crossmod" / "configs").rglob("*.yaml"):
        keys |= set(re.findall(r"^([a-z][a-z0-9_]*):", config.read_text(), re.M))
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    wrong = [
        f"{page.relative_to(ROOT)}: `{flag}` (the key is {flag[2:].replace('-', '_')}=…)"
        for page in pages
        for flag in re.findall(r"`(--[a-z][a-z0-9-]*)", page.read_text())
        if "-" in flag[2:] and flag[2:].replace("-", "_") in keys
    ]
    assert wrong == []


def test_the_readme_extras_table_lists_every_extra():
    """Every extra setup.cfg declares is in the README's table (an install that lacks one is named by it), and none
    the table lists is missing from setup.cfg."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    listed = re.findall(r"^\| `\[([a-z]+)\]` \|", (ROOT / "README.md").read_text(), re.M)
    assert sorted(listed) == sorted(setup["options.extras_require"]) and len(listed) == len(set(listed))

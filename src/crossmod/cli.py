"""`crossmod <job> [overrides]`: one command for every job, installed by pip.

Only the standard library is imported until a job is chosen, so `crossmod --help`, `crossmod ls` and `crossmod cp`
answer without loading torch. A job gets the rest of the command line as its own (`crossmod train experiment=… fold=0`
is `python train.py experiment=… fold=0` in a checkout), with `crossmod <job>` as its program name.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple


class Job(NamedTuple):
    module: str
    summary: str


JOBS: dict[str, Job] = {
    "train": Job("crossmod.recipes.train", "train an experiment (Hydra overrides: experiment=… fold=… trainer=…)"),
    "cv": Job("crossmod.recipes.cross_validate", "every fold of an experiment, one process each, then the per-culture report"),
    "evaluate": Job("crossmod.recipes.evaluate", "score runs or exported cultures on a dataset (ckpt=… data=…)"),
    "export": Job("crossmod.recipes.export", "a run's cultures as PEFT adapter folders (run=… [culture=DE] [kind=retrieval])"),
    "predict": Job("crossmod.recipes.predict", "score new memes with an exported culture folder (adapters=… inputs=…)"),
    "serve": Job("crossmod.recipes.serve", "exported cultures behind an HTTP API (adapters=[…] [host=127.0.0.1 port=8000])"),
    "prepare": Job("crossmod.recipes.prepare", "convert a dataset to WebDataset shards (data=<dataset> data.raw_dir=… [folds=3])"),
    "zeroshot": Job("crossmod.recipes.zeroshot", "answer memes zero-shot with a VLM and the study's prompts"),
    "fewshot": Job("crossmod.recipes.fewshot", "few-shot VLM prompting with retrieved exemplars (ToxicTags)"),
    "memebridge": Job("crossmod.recipes.memebridge", "MemeBridge's prompting protocol"),
    "cv-report": Job("crossmod.recipes.cv_report", "re-report cross-validation folds (runs=<folder of fold runs>)"),
    "seed-report": Job("crossmod.recipes.seed_report", "mean ± std over seeds (runs=<multirun folder>)"),
    "zeroshot-report": Job("crossmod.recipes.zeroshot_report", "zero-shot runs of several VLMs side by side (runs=[…])"),
    "consolidate": Job("crossmod.recipes.consolidate", "a sharded DeepSpeed checkpoint as one file (checkpoint=… output=…)"),
    "retrieval-db": Job("crossmod.recipes.retrieval_db", "add labelled memes to a retrieval culture adapter (adapter=… shards=…)"),
    "wandb-offline": Job("crossmod.recipes.wandb_offline", "read an offline W&B run, no sync (run=…)"),
    "synthetic": Job("crossmod.recipes.synthetic", "the synthetic memes' measured rule ([markdown=true])"),
}

# `crossmod report <kind>`: the report jobs under one name (`crossmod report cv runs=…` is `crossmod cv-report runs=…`)
REPORTS = {name.removesuffix("-report"): name for name in JOBS if name.endswith("-report")}

# `crossmod ls` groups, by the name a user asks for and the config folder that holds them
GROUPS = {
    "experiments": "experiment",
    "datasets": "data",
    "models": "model",
    "strategies": "strategy",
    "trainers": "trainer",
    "recipes": "recipe",
    "loggers": "logger",
    "sweeps": "hparams_search",
}


def configs_dir() -> Path:
    """The Hydra tree shipped inside the package (the same folder crossmod.runtime.resolvers.package_configs names)."""
    return Path(__file__).resolve().parent / "configs"


def usage() -> str:
    width = max(map(len, JOBS))
    jobs = "\n".join(f"  {name:<{width}}  {job.summary}" for name, job in JOBS.items())
    return (
        "usage: crossmod <job> [overrides …]     e.g. crossmod train experiment=qwen_lora_cv fold=0\n"
        "       crossmod <job> --help             the job's own keys\n"
        "       crossmod report " + "|".join(REPORTS) + " [overrides …]   the report jobs below, by kind\n"
        "       crossmod ls [group]               the configs to choose from (" + ", ".join(GROUPS) + ")\n"
        "       crossmod cp <group>/<name> <file> a shipped config as the start of one's own\n\n"
        f"jobs:\n{jobs}\n\n"
        "A folder of one's own configs joins the shipped ones: crossmod train --config-dir <folder> experiment=<name>\n"
        "(<folder>/experiment/<name>.yaml). Data, caches and runs go under the working directory (a checkout's root when\n"
        "crossmod is installed from one), or $CROSSMOD_ROOT."
    )


def options(group: str) -> list[str]:
    """A config group's option names (`experiment/qwen_lora_cv.yaml` → `qwen_lora_cv`), nested groups as `a/b`."""
    folder = configs_dir() / GROUPS.get(group, group)
    inside = folder.resolve().is_relative_to(configs_dir()) and folder.resolve() != configs_dir()
    if not inside or not folder.is_dir():  # `..`, an absolute path or the tree's root is no config group
        raise SystemExit(f"crossmod ls: no config group {group!r}; groups: {', '.join(GROUPS)}")
    return sorted(str(path.relative_to(folder).with_suffix("")) for path in folder.rglob("*.yaml"))


def description(path: Path, width: int = 96) -> str:
    """A config's one line: its first prose comment (not `@package`, not an example command), else its first key's
    inline comment."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines:
        if not line.startswith("#"):
            break
        text = line.lstrip("#")
        if text.strip() and not text.startswith("   ") and "@package" not in text:
            return _cut(text.strip(), width)
    inline = next((line.split(" # ", 1)[1].strip() for line in lines if " # " in line and not line.startswith("#")), "")
    return _cut(inline, width)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def list_configs(groups: list[str]) -> str:
    """Each group's configs, one line each with its description (`crossmod ls experiments`)."""
    blocks = []
    for group in groups or GROUPS:
        folder = configs_dir() / GROUPS.get(group, group)
        names = options(group)
        width = max(map(len, names), default=0)
        rows = [f"  {name:<{width}}  {description(folder / f'{name}.yaml')}".rstrip() for name in names]
        blocks.append("\n".join([f"{group} ({GROUPS.get(group, group)}=<name>):", *rows]))
    return "\n\n".join(blocks)


def copy_config(name: str, destination: str) -> tuple[Path, str]:
    """Copy a shipped config (`experiment/qwen_lora_cv`) to a file of one's own, never over one; returns where it went
    and the command that uses it. A group's config lands in a folder named after the group (`mine.yaml` →
    `experiment/mine.yaml`), where Hydra's `--config-dir` finds it, and its `name:` follows its file."""
    group, _, option = name.removesuffix(".yaml").rpartition("/")
    folder = GROUPS.get(group, group)
    source = (configs_dir() / folder / f"{option}.yaml") if group else configs_dir() / f"{option}.yaml"
    if not source.resolve().is_relative_to(configs_dir()) or not source.is_file():
        raise SystemExit(f"crossmod cp: no config {name!r} (crossmod ls lists them, e.g. experiment/qwen_lora_cv)")
    target = Path(destination)
    if target.is_dir():
        target = target / source.name
    if group and target.parent.name != folder:  # --config-dir <dir> reads <dir>/<group>/<name>.yaml
        target = target.parent / folder / target.name
    if target.suffix != ".yaml":
        target = target.with_name(target.name + ".yaml")
    if target.exists() or target.is_symlink():  # a dangling link would send the copy wherever it points
        raise SystemExit(f"crossmod cp: {target} exists; choose another name or remove it first")
    target.parent.mkdir(parents=True, exist_ok=True)
    text = source.read_text(encoding="utf-8")
    if group == "experiment" or folder == "experiment":  # the run's name (run folder, W&B group, report rows) is the file's
        text = re.sub(rf"^name: {re.escape(option)}\b", f"name: {target.stem}", text, count=1, flags=re.M)
    with open(target, "x", encoding="utf-8") as handle:  # exclusive: never over a file (or link) made meanwhile
        handle.write(text)
    use = f"crossmod train --config-dir {target.parent.parent.absolute()} {folder}={target.stem}" if group else ""
    return target, use


def children_import_as_this_process() -> None:
    """The processes a job starts (cross-validation folds, Lightning's DDP ranks: `python -m …`) import what this one
    does: Python would put their working directory first on sys.path, where a planted `crossmod/` or `hydra_plugins/`
    package would run in their place. They get PYTHONSAFEPATH instead, and this process's own first entry (the folder
    of `train.py` in a checkout, so a checkout's own modules still import in every rank)."""
    if "PYTHONSAFEPATH" in os.environ:
        return
    os.environ["PYTHONSAFEPATH"] = "1"
    first = sys.path[0] if sys.path and sys.path[0] else None
    if first:
        os.environ["PYTHONPATH"] = os.pathsep.join([first, *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])


def invoked_as(name: str) -> str:
    """How the user started this job, as a command they can type again: `crossmod <job>` for the installed command
    (or `python -m crossmod`), `python <script>` for a checkout's root script (`python train.py`)."""
    import shlex

    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is None or script.name in ("crossmod", "__main__.py") or script.stem == "cli":
        return f"crossmod {name}"
    return shlex.join(["python", os.path.relpath(script)])


def run_job(name: str, args: list[str]) -> object:
    """Import the chosen job only now and run its main with the remaining arguments as its command line.

    A Hydra job runs as if started with `python -m <its module>`: the processes it starts for itself (Lightning's DDP
    ranks, which rerun `python -m <__main__'s module> <argv>`; spawned workers, which import `__main__` by its module
    name) then start the job itself, not the command line's dispatcher, which would miss the job's name."""
    children_import_as_this_process()
    # OpenMP's idle threads sleep instead of spinning on a core between parallel regions (unless the user chose a
    # policy), so a training beside another on the same cores does not burn the other's share while it waits
    # (bench/shared_cores.py measures both policies). It must be set before torch loads OpenMP, so here, before the job
    # is imported; it moves no number (the thread count, and so every float sum's order, is crossmod.runtime.threads').
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ["CROSSMOD_INVOKED_AS"] = invoked_as(name)  # what status.json's resume command starts with
    module = importlib.import_module(JOBS[name].module)
    sys.modules["__main__"].__spec__ = module.__spec__
    sys.argv = [str(module.__file__), *args]
    return module.main()


def _near(word: str, choices: object) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1)  # type: ignore[call-overload]
    return f" (did you mean {close[0]}?)" if close else ""


def _before_the_job(name: str, args: list[str]) -> int | None:
    """What the command line alone answers, before the job (and torch) is imported: `--help` from the job's config file,
    an unknown config option or key as one line (crossmod.launch.command_line). Its exit status, or None: run the job."""
    from crossmod.launch.command_line import check, help_text
    from crossmod.runtime.user_errors import UserError

    job = JOBS[name]
    if "--help" in args or "-h" in args:
        text = help_text(name, job.summary, job.module, configs_dir())
        if text is not None:
            print(text)
            return 0
        return None  # an argparse job answers its own --help
    try:
        check(name, job.module, args, configs_dir())
    except UserError as error:
        print(f"[{job.module.rsplit('.', 1)[-1]}] error: {error}", file=sys.stderr, flush=True)
        return 1
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command, rest = args[0], args[1:]
    if command == "ls":
        print(list_configs(rest))
        return 0
    if command == "cp":
        if len(rest) != 2:
            raise SystemExit("usage: crossmod cp <group>/<name> <file or folder>")
        target, use = copy_config(*rest)
        print(target)
        if use:
            print(f"use it with: {use}")
        return 0
    if command == "report":
        if not rest or rest[0] not in REPORTS:
            raise SystemExit(f"usage: crossmod report {'|'.join(REPORTS)} [overrides …]  (crossmod report cv runs=<folder of fold runs>)")
        command, rest = REPORTS[rest[0]], rest[1:]
    if command not in JOBS:
        raise SystemExit(f"crossmod: no job {command!r}{_near(command, JOBS)}\n\n{usage()}")
    if (answered := _before_the_job(command, rest)) is not None:
        return answered
    result = run_job(command, rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())

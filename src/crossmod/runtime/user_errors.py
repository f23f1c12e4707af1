"""Errors a user causes and can fix are one message: `[<program>] error: <what> Fix: <how>` on stderr, exit status 1.

A `UserError` names the config key (or path) at fault and the fix: a mandatory value left `???`, a key with an
invalid value, a raw or shard folder that is not there, a dataset without the split or fold a stage needs, a
recipe meant for another program. Every entry point's main is wrapped by `entry_point(check)`: `check(cfg)`
(src/crossmod/launch/preflight.py) looks at what the job will read before anything is built, and a `UserError` raised
there or later is printed without a traceback (`HYDRA_FULL_ERROR=1` raises it instead, traceback and all).
Other exceptions pass through untouched: they are bugs or library failures, and their traceback is the report.

Jobs with a run directory (train.yaml's `hydra: default`) run the check from the Hydra callback `CheckFirst`
in `on_run_start`, before Hydra creates the run directory, its `.hydra/` files and the job log, so a refused
run leaves nothing behind. A job refused after Hydra created its directory (each job of a `-m` sweep is
checked when it starts) has the directories the run or sweep created removed by the callback when the job ends,
when they hold nothing but Hydra's own files; a directory that was there before, or holds anything else, is never
touched. Nothing is kept between the two but the check on the main (`main.check`) and the callback's own record.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, ListConfig, OmegaConf

EXIT_STATUS = 1
HYDRA_FILES = frozenset({"config.yaml", "hydra.yaml", "overrides.yaml"})  # what Hydra writes into <run>/.hydra/
F = TypeVar("F", bound=Callable[..., Any])


class UserError(Exception):
    """A mistake in how a job was started, with the key (or path) at fault and the fix.

    Modules whose errors are of this kind subclass it together with the built-in class they raised before
    (e.g. `class SplitError(UserError, ValueError)`), so callers catching the built-in one still do."""

    def __init__(self, problem: str, fix: str | None = None, key: str | None = None) -> None:
        self.problem, self.fix, self.key = problem, fix, key
        super().__init__(problem if fix is None else f"{problem.rstrip('.')}. Fix: {fix}")


# ------------------------------------------------------------------------------------------ mandatory values
def missing_keys(cfg: DictConfig, keys: Iterable[str] | None = None) -> list[str]:
    """Full keys of the mandatory values (`???`) under `keys` (top-level keys; None: all but `hydra`).

    Nothing is resolved: an interpolation (which may read files, like `${manifest_heads:…}`) is a value
    that is set, and a value interpolating a missing one is reported as that one."""
    found: list[str] = []

    def walk(node: DictConfig | ListConfig, prefix: str) -> None:
        for key in range(len(node)) if isinstance(node, ListConfig) else list(node.keys()):
            full = f"{prefix}[{key}]" if isinstance(node, ListConfig) else f"{prefix}{'.' if prefix else ''}{key}"
            if OmegaConf.is_missing(node, key):
                found.append(full)
            elif not OmegaConf.is_interpolation(node, key):
                child = node[key]  # not an interpolation: nothing to resolve
                if isinstance(child, (DictConfig, ListConfig)):
                    walk(child, full)

    present = list(cfg.keys())  # `key in cfg` is False for a missing value
    top = [k for k in present if k != "hydra"] if keys is None else [k for k in keys if k in present]
    for key in top:
        if OmegaConf.is_missing(cfg, key):
            found.append(str(key))
        elif not OmegaConf.is_interpolation(cfg, key) and isinstance(child := cfg[key], (DictConfig, ListConfig)):
            walk(child, str(key))
    return found


def value_hint(key: str) -> str:
    """What to pass for a mandatory key, as `key=<…>`."""
    top = {
        "name": "name=<run name>, or pick a recipe: experiment=<name> (configs/experiment/)",
        "ckpt": "ckpt=<run dir | .ckpt file | exported culture folder | folder of runs>",
        "adapters": "adapters=<an exported culture folder: crossmod export run=<run dir> writes <run dir>/export/<culture>>",
        "inputs": "inputs=<a folder of images | a memes .jsonl file | a shard folder>",
        "run": "run=<a run directory: <paths.log_dir>/<name>/runs/<id>>",
    }
    if key in top:
        return top[key]
    if key.endswith("raw_dir"):
        return f"{key}=<the dataset's folder in its published layout> (docs/datasets.md)"
    if key.endswith("shard_dir"):
        return f"{key}=<a folder of prepared shards (crossmod prepare prints it), or its URL>"
    return f"{key}=<value>"


def require(cfg: DictConfig, keys: Iterable[str] | None = None) -> None:
    """Refuse a job whose config leaves a value it reads at `???`, naming every such key and what to pass."""
    missing = missing_keys(cfg, keys)
    if missing:
        names = ", ".join(missing)
        verb = "is" if len(missing) == 1 else "are"
        raise UserError(
            f"{names} {verb} not set (a mandatory value, ??? in the config)",
            "pass " + " ".join(value_hint(key) for key in missing),
            missing[0],
        )


# ------------------------------------------------------------------------------------------ the wrapper
CALLBACK = "crossmod.runtime.user_errors.CheckFirst"


def program() -> str:
    return Path(sys.argv[0]).stem or "crossmod"


def refuse(error: UserError, reraise: bool = True) -> None:
    """Print the one message and exit. With HYDRA_FULL_ERROR=1 the error is raised for its traceback instead
    (`reraise`), or, where raising would not stop the job (a Hydra callback's exception is only a warning), its
    traceback printed before the exit."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        if reraise:
            raise error
        traceback.print_exception(error)
    print(f"[{program()}] error: {error}", file=sys.stderr, flush=True)
    sys.exit(EXIT_STATUS)


def error_chain(error: BaseException | None) -> list[BaseException]:
    """The error and its causes, outermost first (Hydra wraps what a constructor raised)."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def wrapped_refusal(error: BaseException) -> UserError | None:
    """The refusal inside an error: Hydra wraps what a constructor raised (`InstantiationException`), and a file's
    untrusted `_target_` (src/crossmod/models/trusted_targets.py, below this layer) is a refusal of the user's input too."""
    from crossmod.models.trusted_targets import UntrustedConfigError

    for cause in error_chain(error):
        if isinstance(cause, UserError):
            return cause
        if isinstance(cause, UntrustedConfigError):
            return UserError(str(cause))
    return None


BUILD_ERRORS = (ValueError, TypeError, OSError)  # what a constructor raises for a setting it cannot take


def _keys_building(cfg: Any, target: str) -> list[str]:
    """The config keys whose `_target_` is `target` (Hydra names it by its module's own path: `torch.optim.adamw.AdamW`
    for `torch.optim.AdamW`, so the class name and top package decide)."""
    found: list[str] = []

    def same(value: Any) -> bool:
        return isinstance(value, str) and (value == target or (value.split(".")[0], value.rsplit(".", 1)[-1]) == (target.split(".")[0], target.rsplit(".", 1)[-1]))

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            if same(node.get("_target_")):
                found.append(prefix)
            for key, value in node.items():
                if key != "hydra":
                    walk(value, f"{prefix}.{key}" if prefix else str(key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{prefix}[{index}]")

    if isinstance(cfg, DictConfig):
        walk(OmegaConf.to_container(cfg, resolve=False), "")
    return found


def build_refusal(error: BaseException, cfg: Any = None) -> UserError | None:
    """A component Hydra could not build from the user's settings, as one line naming its key: Hydra's
    `InstantiationException` around a constructor's ValueError, TypeError or OSError (`trainer.precision=fp7`,
    `model.optimizer.betas=[2, 3]`). Other causes are bugs, and stay Hydra's to report."""
    from hydra.errors import InstantiationException

    outer = next((e for e in error_chain(error) if isinstance(e, InstantiationException)), None)
    cause = outer.__cause__ if outer is not None else None
    if not isinstance(cause, BUILD_ERRORS):
        return None
    named = re.search(r"target '([\w.]+)'", str(outer))
    target = named[1] if named else "a component"
    keys = _keys_building(cfg, target) if named else []
    where = keys[0] if len(keys) == 1 else target
    reason = (str(cause).strip().splitlines() or [""])[0][:300]
    return UserError(
        f"{where} ({target}) cannot be built from its settings: {type(cause).__name__}: {reason}",
        f"change {where}'s settings (--cfg job prints them; HYDRA_FULL_ERROR=1 shows the traceback)",
        where,
    )


def entry_point(check: Callable[[DictConfig], None] | None = None) -> Callable[[F], F]:
    """Decorate an entry point's main (under `@hydra.main`, or a plain `main(argv)`): `check(cfg)` runs first, and a
    `UserError` from it or from the job is the one message. Under Hydra the `CheckFirst` callback has run the check
    already, before the run directory existed, and it reports a refusal raised here (removing what the refused job
    created); without it, the refusal is printed here. The check is kept on the main (`main.check`) for the callback."""

    def wrap(main: F) -> F:
        @functools.wraps(main)
        def job(*args: Any, **kwargs: Any) -> Any:
            callback = _callback()
            reported = callback is not None
            try:
                if check is not None and not (callback is not None and callback.ran(check)):
                    check(args[0])  # a sweep's jobs, and mains run without the callback, are checked here
                return main(*args, **kwargs)
            except UserError as error:
                if reported:
                    raise
                refuse(error)
            except Exception as error:  # noqa: BLE001 - a refusal wrapped by Hydra's instantiate is still a refusal
                refusal = wrapped_refusal(error) or build_refusal(error, args[0] if args else None)
                if refusal is None:
                    raise
                if reported:
                    raise refusal from error
                refuse(refusal)

        job.check = check  # type: ignore[attr-defined]  # what CheckFirst runs before Hydra creates the run directory
        return job  # type: ignore[return-value]

    return wrap


def _callback() -> CheckFirst | None:
    """The `CheckFirst` this job runs under (configs/hydra/default.yaml), as Hydra built it from the job's config, or
    None outside Hydra or without it. It reports the job's refusal when the job ends."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    callbacks = OmegaConf.select(HydraConfig.get(), "callbacks", default=None) or {}
    for node in callbacks.values():
        if OmegaConf.select(node, "_target_", default=None) == CALLBACK:
            return CheckFirst(**{k: v for k, v in node.items() if not str(k).startswith("_")})
    return None


# ------------------------------------------------------------------------------------------ Hydra callback
def _first_missing(directory: Any) -> Path | None:
    """The topmost directory that creating `directory` would create; None when it exists."""
    path = Path(str(directory)).absolute()
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _only_hydra_files(directory: Path, job_name: str | None) -> bool:
    """Whether `directory` holds nothing but what Hydra writes: `.hydra/{config,hydra,overrides}.yaml`, the job's log."""
    for folder, dirs, files in os.walk(directory):
        here = Path(folder)
        if any((here / d).is_symlink() for d in dirs) or dirs not in ([], [".hydra"] if here == directory else []):
            return False
        for name in files:
            hydra_file = here.name == ".hydra" and name in HYDRA_FILES
            if not (hydra_file or (here == directory and name == f"{job_name}.log")):
                return False
    return True


def remove_created(created: Path | None, job_name: str | None) -> None:
    """Remove the refused job's own directory when it holds Hydra's files only, then the directories above it
    that this run or sweep created (`created`, the topmost) and that are left empty (a sweep's `multirun.yaml` aside)."""
    from hydra.core.hydra_config import HydraConfig

    if created is None or not HydraConfig.initialized():
        return
    output = Path(HydraConfig.get().runtime.output_dir).absolute()
    if not (output == created or created in output.parents) or not output.is_dir() or output.is_symlink():
        return
    if not _only_hydra_files(output, job_name):
        return
    shutil.rmtree(output)
    folder = output.parent
    while folder == created or created in folder.parents:
        if (folder / "multirun.yaml").is_file() and [p.name for p in folder.iterdir()] == ["multirun.yaml"]:
            (folder / "multirun.yaml").unlink()
        if any(folder.iterdir()):
            return
        folder.rmdir()
        folder = folder.parent


RUN_SUBFOLDERS = (".hydra", "checkpoints", "predictions", "csv")  # what a run folder holds that crossmod writes into


def planted_links(run_dir: Path) -> None:
    """Refuse a run folder that holds a symlink where crossmod writes (its own files, `.hydra/`, `checkpoints/` …).

    A run folder crossmod made holds no link; one planted there would have Hydra's job log, config.yaml or a
    checkpoint written through it, onto whatever file it points to, when the run is resumed."""
    if not run_dir.is_dir():
        return
    for folder in [run_dir, *(run_dir / name for name in RUN_SUBFOLDERS)]:
        if folder != run_dir and folder.is_symlink():
            raise UserError(f"{folder} is a symlink (to {folder.resolve()})", "remove it: crossmod writes a run's files inside the run only")
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.is_symlink():
                raise UserError(
                    f"{entry} is a symlink (to {entry.resolve()}); a resumed run would write through it",
                    "remove the link: crossmod writes a run's files inside the run only",
                )


class CheckFirst(Callback):
    """Hydra callback (configs/hydra/default.yaml): runs the entry point's check in `on_run_start`, before Hydra
    creates the run directory; notes which directories a run or sweep creates, and when a job ends refused (a
    `UserError` from the job), removes them when they hold only Hydra's files and prints the one message.

    The check is the one the running job's main carries (`entry_point`): the main of `<recipes>.<job name>`, Hydra's
    job name being its recipe module's (`crossmod train` and train.py run `crossmod.recipes.train`). What a run
    creates is this callback's own: Hydra hands every hook of a run or sweep to the same instance."""

    def __init__(self, recipes: str = "crossmod.recipes") -> None:
        self.recipes = recipes
        self.created: Path | None = None  # the topmost directory the run or sweep creates (it did not exist before)

    def check_of(self, job_name: str) -> Callable[[DictConfig], None] | None:
        """The check of the job's main, which is imported by now (it is what Hydra is running)."""
        module = sys.modules.get(f"{self.recipes}.{job_name}")
        return getattr(getattr(module, "main", None), "check", None)

    def ran(self, check: Callable[[DictConfig], None]) -> bool:
        """Whether this run's `on_run_start` ran `check` already (a single run, not a sweep's job, of this main)."""
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra = HydraConfig.get()
        return hydra.mode == RunMode.RUN and self.check_of(hydra.job.name) is check

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        check = self.check_of(config.hydra.job.name)
        if check is not None:
            try:
                check(config)
            except UserError as error:
                refuse(error, reraise=False)  # before Hydra creates the run directory
        self.created = self._would_create(config, "hydra.run.dir")
        if self.created is None and OmegaConf.select(config, "hydra.output_subdir") is not None:
            # a run folder that exists (a resumed run) gets Hydra's files and the run's: none through a planted link.
            # Jobs without run folders (evaluate, prepare: output_subdir null, run dir the working directory) skip it.
            try:
                run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir")))
            except Exception:  # a directory setting that does not resolve: Hydra reports it itself
                return
            if run_dir.absolute() == Path.cwd():
                return
            try:
                planted_links(run_dir)
            except UserError as error:
                refuse(error, reraise=False)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.created = self._would_create(config, "hydra.sweep.dir")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        """A job refused (its `UserError`) leaves only what was there before, and its message: one line, exit status 1
        (`HYDRA_FULL_ERROR=1`: Hydra raises it, traceback and all)."""
        error = getattr(job_return, "_return_value", None)
        if not isinstance(error, UserError):
            return
        remove_created(self.created, config.hydra.job.name)
        self.created = None
        if os.environ.get("HYDRA_FULL_ERROR") != "1":
            refuse(error)

    @staticmethod
    def _would_create(config: DictConfig, key: str) -> Path | None:
        try:
            return _first_missing(OmegaConf.select(config, key))
        except Exception:  # a directory setting that does not resolve: Hydra reports it itself
            return None

"""Run every fold of an experiment, one process per fold, then report: `crossmod cv experiment=<name>`.

Each fold is `train.py fold=k` in its own process (a 7B model never shares memory with its siblings)
with the same overrides, under `<this run dir>/fold{k}`; afterwards the folds are tied together by
`crossmod.reports.cv` and the chosen cross-validation metric is returned, which makes this the
program for sweeps that score a trial by its cross-validation mean (Optuna: `-m hparams_search=…`,
W&B: `configs/sweeps/*_cv.yaml`).

`cv.per_culture=true` trains one model per binary head instead (`<name>-FT-<culture>`, every other head
removed; `cv.multi_head=true` also the model with every head, for the table's multi-head row), and
`cv.zeroshot=<experiment>` answers the same memes zero-shot first (same data and base model overrides); the report
then holds the culture-transfer table (the Multi3Hate study's Table 11).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import crossmod.runtime.resolvers  # noqa: F401  (registers ${run_id:} …)
from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import UserError, entry_point

# Each fold and the zero-shot run: a job of the installed crossmod, in a process of its own.
JOB = (sys.executable, "-m", "crossmod")
# Overrides that belong to this launcher (or to Hydra's sweep), not to the fold runs.
NOT_FOR_FOLDS = (
    "fold=",
    "num_folds=",
    "hparams_search=",
    "cv_metric=",
    "hydra.",
    "cv.per_culture=",
    "cv.multi_head=",
    "cv.zeroshot=",
    "zeroshot.",
)
# Overrides a zero-shot run shares with the fold runs: the same memes, base model, prompt and places.
FOR_ZEROSHOT = ("data.", "model.name_or_path=", "model.preprocessor.", "model.prompt.", "paths.", "seed=", "zeroshot.")
# A trial's W&B run belongs to this process; each fold opens its own run in the trial's group.
WANDB_TRIAL_ENV = ("WANDB_RUN_ID", "WANDB_SWEEP_ID", "WANDB_SWEEP_PARAM_PATH", "WANDB_RESUME")


def fold_command(overrides: list[str], fold: int, num_folds: int, run_dir: Path) -> list[str]:
    kept = [o for o in overrides if not o.lstrip("+~").startswith(NOT_FOR_FOLDS)]
    return [
        *JOB,
        "train",
        *kept,
        f"fold={fold}",
        f"num_folds={num_folds}",
        f"hydra.run.dir={run_dir / f'fold{fold}'}",
    ]


def models(cfg: DictConfig, run_dir: Path) -> list[tuple[str, list[str], Path]]:
    """(what the report names its folds, extra overrides, runs dir) of each model cross-validated: the configured one (its
    label: the name and its variants), or one per culture (its name; the fold runs' label may add variants, `found`)."""
    if not cfg.cv.per_culture:
        return [(cfg.label, [], run_dir)]
    binary = [h for h, spec in cfg.data.heads.items() if spec.kind == "binary"]
    if len(binary) < 2:
        raise UserError(f"cv.per_culture=true needs several binary heads (cultures); data.heads has {binary}", "drop cv.per_culture, or use a dataset with a head per culture", "cv.per_culture")
    planned = [
        (f"{cfg.name}-FT-{c}", [f"~data.heads.{o}" for o in cfg.data.heads if o != c] + [f"name={cfg.name}-FT-{c}"], run_dir / f"FT-{c}")
        for c in binary
    ]
    if cfg.cv.get("multi_head"):  # the one model with every culture's head, on the same folds: Table 11's multi-head row
        planned.append((cfg.label, [], run_dir / "multi-head"))
    return planned


def found(results: dict[str, Any], name: str) -> dict[str, Any]:
    """The report of the model planned as `name`: its own entry, or the one label that is `name` plus variants (a fold
    run's label adds what its overrides change, e.g. `-minilm-lpft`)."""
    if name in results:
        return results[name]
    matches = [label for label in results if label.startswith(f"{name}-")]
    if len(matches) != 1:
        raise RuntimeError(f"the report holds {sorted(results)}: no single one for the planned model {name}")
    return results[matches[0]]


def zeroshot_command(overrides: list[str], experiment: str, run_dir: Path) -> list[str]:
    # `+zeroshot.…` (a key train.yaml lacks) is a plain override for the zero-shot experiment (prompting.yaml), which has it
    kept = [o.removeprefix("+") if o.startswith("+zeroshot.") else o for o in overrides if o.lstrip("+~").startswith(FOR_ZEROSHOT)]
    return [*JOB, "zeroshot", f"experiment={experiment}", *kept, f"hydra.run.dir={run_dir}"]


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="train")
@entry_point(preflight.cross_validate)
def main(cfg: DictConfig) -> float:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    overrides = list(HydraConfig.get().overrides.task)
    env = {k: v for k, v in os.environ.items() if k not in WANDB_TRIAL_ENV}
    env["CROSSMOD_CV_GROUP"] = env.get("CROSSMOD_CV_GROUP") or f"{run_dir.parent.name}-{run_dir.name}"
    if cfg.cv.zeroshot:
        command = zeroshot_command(overrides, cfg.cv.zeroshot, run_dir / "zeroshot_run")
        print(f"[cross_validate] zero-shot: {' '.join(command[2:])}", flush=True)
        subprocess.run(command, env=env, check=True)
    planned = models(cfg, run_dir)
    if limited := limited_test(cfg):  # said before fold 0 trains, not discovered after the last one
        print(f"[cross_validate] {limited}", flush=True)
    for name, extra, runs_dir in planned:
        for fold in range(cfg.num_folds):
            command = fold_command([*overrides, *extra], fold, cfg.num_folds, runs_dir)
            print(f"[cross_validate] {name} fold {fold}/{cfg.num_folds}: {' '.join(command[2:])}", flush=True)
            subprocess.run(command, env=env, check=True)
    return finish(cfg, run_dir, [name for name, _, _ in planned])


def finish(cfg: DictConfig, run_dir: Path, names: list[str]) -> float | None:
    """Report the folds under `run_dir`, print each planned model's summary, and return the sweep's value.

    The lines are `crossmod report cv`'s on the same folder, problems included (a fold scored on part of its memes is
    named, not raised): the report is written and says what it covers."""
    from crossmod.reports.cv import TRANSFER, report, summary_lines

    results = report(run_dir, run_dir / "cv_report")
    transfer = results.pop(TRANSFER, None)
    values = []
    for name in names:
        result = found(results, name)
        if "metrics" not in result:  # every fold ran (check=True), yet none could be read: a bug, not a user's mistake
            raise RuntimeError(f"cross-validation of {name} in {run_dir} left no usable folds: {result.get('problems')}")
        lines = summary_lines(name, result)
        print("\n".join([f"[cross_validate] {lines[0]} (report: {run_dir / 'cv_report' / name})", *lines[1:]]), flush=True)
        values.append(result["metrics"].get(cfg.cv_metric))
        _log_trial(cfg, result, transfer)
    if transfer is not None:
        print(f"[cross_validate] culture transfer (Table 11): {run_dir / 'cv_report' / 'culture_transfer.md'}", flush=True)
    return sweep_value(cfg, values)


def limited_test(cfg: DictConfig) -> str | None:
    """A note when each fold will score only part of its held-out memes (debug=limit, trainer.limit_test_batches)."""
    limit = (cfg.get("trainer") or {}).get("limit_test_batches")
    if limit is None or limit == 1.0:
        return None
    return (
        f"trainer.limit_test_batches={limit} (as with debug=limit): each fold scores part of its held-out memes; the "
        "report names this as a problem and its numbers are not a cross-validation result"
    )


def sweep_value(cfg: DictConfig, values: list[float | None]) -> float | None:
    """What a sweeper gets: the selection sets' mean (`cv_metric`); never a held-out fold's score."""
    if cfg.cv_metric.startswith("cv/"):
        raise UserError(
            f"cv_metric={cfg.cv_metric} would score sweep trials on the held-out folds the report publishes",
            "use cv_selection/<head>/<metric>_mean (the folds' selection sets, cv.selection=inner)",
            "cv_metric",
        )
    if any(v is None for v in values):
        if HydraConfig.get().mode == RunMode.MULTIRUN or "WANDB_SWEEP_ID" in os.environ:
            raise UserError(
                f"{cfg.cv_metric} was not measured: under cv.selection={cfg.cv.selection} the folds have no selection set "
                "to score a sweep trial by",
                "sweep with cv.selection=inner",
                "cv.selection",
            )
        return None
    return sum(values) / len(values)


def _log_trial(cfg: DictConfig, result: dict, transfer: dict | None = None) -> None:
    """Under a W&B sweep agent (or logger=wandb), the trial's own run gets the cross-validation summary."""
    if "WANDB_SWEEP_ID" not in os.environ and "wandb" not in (cfg.get("logger") or {}):
        return
    import wandb

    from crossmod.runtime.resolvers import wandb_offline

    run = wandb.init(
        project=cfg.logger.wandb.project if "wandb" in (cfg.get("logger") or {}) else None,
        group=os.environ.get("CROSSMOD_CV_GROUP"),
        job_type="cv",
        dir=HydraConfig.get().runtime.output_dir,
        mode="offline" if wandb_offline() else "online",
    )
    run.summary.update(
        {**result["metrics"], **{f"cv/{h}/pooled_oof_auroc": v for h, v in result["pooled_oof_auroc"].items() if v is not None}}
    )
    if transfer is not None:
        table = transfer["table"]
        columns = list(next(iter(table.values())))
        rows = [[model, *(f"{table[model][c]['acc_mean']:.4f} ± {table[model][c]['acc_std']:.4f}" for c in columns)] for model in table]
        run.log({"cv/culture_transfer_acc": wandb.Table(columns=["model", *columns], data=rows)})
    run.finish()


if __name__ == "__main__":
    main()

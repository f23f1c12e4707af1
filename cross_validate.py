"""Run every fold of an experiment, one process per fold, then report: `python cross_validate.py experiment=<name>`.

Each fold is `train.py fold=k` in its own process (a 7B model never shares memory with its siblings)
with the same overrides, under `<this run dir>/fold{k}`; afterwards the folds are tied together by
`training.cv_report` and the chosen cross-validation metric is returned, which makes this the
program for sweeps that score a trial by its cross-validation mean (Optuna: `-m hparams_search=…`,
W&B: `configs/sweeps/*_cv.yaml`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import training.resolvers  # noqa: F401  (registers ${run_id:} …)

ROOT = Path(__file__).resolve().parent
# Overrides that belong to this launcher (or to Hydra's sweep), not to the fold runs.
NOT_FOR_FOLDS = ("fold=", "num_folds=", "hparams_search=", "cv_metric=", "hydra.")
# A trial's W&B run belongs to this process; each fold opens its own run in the trial's group.
WANDB_TRIAL_ENV = ("WANDB_RUN_ID", "WANDB_SWEEP_ID", "WANDB_SWEEP_PARAM_PATH", "WANDB_RESUME")


def fold_command(overrides: list[str], fold: int, num_folds: int, run_dir: Path) -> list[str]:
    kept = [o for o in overrides if not o.lstrip("+~").startswith(NOT_FOR_FOLDS)]
    return [
        sys.executable,
        str(ROOT / "train.py"),
        *kept,
        f"fold={fold}",
        f"num_folds={num_folds}",
        f"hydra.run.dir={run_dir / f'fold{fold}'}",
    ]


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float:
    from training.cv_report import report

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    overrides = list(HydraConfig.get().overrides.task)
    env = {k: v for k, v in os.environ.items() if k not in WANDB_TRIAL_ENV}
    env["CROSSMOD_CV_GROUP"] = env.get("CROSSMOD_CV_GROUP") or f"{run_dir.parent.name}-{run_dir.name}"
    for fold in range(cfg.num_folds):
        command = fold_command(overrides, fold, cfg.num_folds, run_dir)
        print(f"[cross_validate] fold {fold}/{cfg.num_folds}: {' '.join(command[1:])}", flush=True)
        subprocess.run(command, cwd=ROOT, env=env, check=True)
    result = report(run_dir, run_dir / "cv_report")[cfg.name]
    if result.get("problems"):
        raise RuntimeError(f"cross-validation of {cfg.name} in {run_dir} is incomplete: {result['problems']}")
    value = result["metrics"][cfg.cv_metric]
    print(f"[cross_validate] {cfg.name}: {cfg.cv_metric} = {value:.4f}  (report: {run_dir / 'cv_report' / cfg.name})", flush=True)
    _log_trial(cfg, result)
    return value


def _log_trial(cfg: DictConfig, result: dict) -> None:
    """Under a W&B sweep agent (or logger=wandb), the trial's own run gets the cross-validation summary."""
    if "WANDB_SWEEP_ID" not in os.environ and "wandb" not in (cfg.get("logger") or {}):
        return
    import wandb

    from training.resolvers import wandb_offline

    run = wandb.init(
        project=cfg.logger.wandb.project if "wandb" in (cfg.get("logger") or {}) else None,
        group=os.environ.get("CROSSMOD_CV_GROUP"),
        job_type="cv",
        dir=HydraConfig.get().runtime.output_dir,
        mode="offline" if wandb_offline() else "online",
    )
    run.summary.update({**result["metrics"], **{f"cv/{h}/pooled_oof_auroc": v for h, v in result["pooled_oof_auroc"].items()}})
    run.finish()


if __name__ == "__main__":
    main()

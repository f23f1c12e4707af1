"""Train a crossmod experiment: `crossmod train experiment=<name> [overrides]` (Hydra)."""

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (registers ${run_id:}, ${wandb_offline:} …)
from crossmod.data.selection_rules import NO_SELECTION
from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import UserError, entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="train")
@entry_point(preflight.train)  # a prompting recipe, a ??? value, a missing data folder or fold: one message, no run dir
def main(cfg: DictConfig) -> float | None:
    from crossmod.training.pipeline import run

    OmegaConf.resolve(cfg)
    metrics = run(cfg)
    if not metrics["best"].get("val") and metrics["selection"]["rule"] in NO_SELECTION:
        return None  # cv.selection=last has no validation set to offer a sweeper (the held-out fold is not one)
    return optimized_value(metrics, cfg.optimized_metric, swept=HydraConfig.get().mode == RunMode.MULTIRUN)


def optimized_value(metrics: dict, key: str, swept: bool = True) -> float | None:
    """`val/mean/auroc` (or `val/loss`) of the selected weights, for sweepers that read the return value.

    Unmeasured (e.g. `trainer.limit_val_batches=0`): a sweep cannot rank the job, so it stops with the key; a single
    run has already written its results and returns nothing."""
    stage, *rest = key.split("/")
    head, metric = rest if len(rest) == 2 else ("all", rest[-1])
    value = metrics["best"].get(stage, {}).get(head, {}).get(metric)
    if value is None and swept:
        stages = sorted(metrics["best"])
        raise UserError(
            f"optimized_metric={key} was not measured in this run (stages: {stages})", "validate the runs a sweep ranks", "optimized_metric"
        )
    return value


if __name__ == "__main__":
    main()

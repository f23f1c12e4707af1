"""Train a crossmod experiment: `python train.py experiment=<name> [overrides]` (Hydra)."""

import hydra
from omegaconf import DictConfig, OmegaConf

import training.resolvers  # noqa: F401  (registers ${run_id:}, ${wandb_offline:} …)


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from training.pipeline import run

    OmegaConf.resolve(cfg)
    metrics = run(cfg)
    return metrics["best"]["val"].get("mean", {}).get("auroc")


if __name__ == "__main__":
    main()

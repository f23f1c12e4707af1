"""A sharded DeepSpeed checkpoint as one file: `crossmod consolidate checkpoint=<dir> output=<file.safetensors>`."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="consolidate")
@entry_point(preflight.reads(checkpoint="a DeepSpeed checkpoint directory, e.g. <run>/checkpoints/last.ckpt"))
def main(cfg: DictConfig) -> None:
    from crossmod.artifacts.consolidate import consolidate

    summary = consolidate(str(cfg.checkpoint), str(cfg.output))
    print(f"{summary['tensors']} tensors, {summary['parameters']:,} parameters → {summary['output']}")


if __name__ == "__main__":
    main()

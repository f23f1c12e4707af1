"""ToxicTags few-shot VLM prompting with retrieved exemplars: `crossmod fewshot experiment=toxictags_fewshot …` (src/crossmod/prompting/fewshot.py)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (registers ${run_id:}, ${tiny_vlm:} …)
from crossmod.launch.preflight import prompting
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="prompting")
@entry_point(prompting("crossmod fewshot", "fewshot", "toxictags_fewshot"))
def main(cfg: DictConfig) -> None:
    from crossmod.prompting.fewshot import run

    OmegaConf.resolve(cfg)
    return run(cfg)


if __name__ == "__main__":
    main()

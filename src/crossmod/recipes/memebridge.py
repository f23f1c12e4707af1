"""MemeBridge's prompting protocol: `crossmod memebridge experiment=memebridge_prompting condition=def|us_rp|cn_rp` (src/crossmod/prompting/memebridge.py)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (registers ${run_id:}, ${tiny_vlm:} …)
from crossmod.launch.preflight import prompting
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="prompting")
@entry_point(prompting("crossmod memebridge", "memebridge", "memebridge_prompting"))
def main(cfg: DictConfig) -> float:
    from crossmod.prompting.memebridge import run

    OmegaConf.resolve(cfg)
    return run(cfg)


if __name__ == "__main__":
    main()

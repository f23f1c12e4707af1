"""Answer memes zero-shot with a VLM and the study's prompts: `crossmod zeroshot experiment=qwen_zeroshot [overrides]` (Hydra).

Results land in `<run dir>/zeroshot/` (`answers.csv`, `summary.json`, `summary.md`); the logic is
`crossmod.prompting.zeroshot`.
"""

import hydra
from omegaconf import DictConfig, OmegaConf

import crossmod.runtime.resolvers  # noqa: F401  (registers ${run_id:}, ${tiny_vlm:} …)
from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="prompting")
@entry_point(preflight.prompting("crossmod zeroshot", "zeroshot", "qwen_zeroshot"))
def main(cfg: DictConfig) -> float:
    from crossmod.prompting.zeroshot import run

    OmegaConf.resolve(cfg)
    return run(cfg)


if __name__ == "__main__":
    main()

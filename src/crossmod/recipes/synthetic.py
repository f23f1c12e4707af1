"""The synthetic memes' measured rule: `crossmod synthetic [markdown=true]` (src/crossmod/data/synthetic.py)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="synthetic_rule")
@entry_point()
def main(cfg: DictConfig) -> None:
    import json

    from crossmod.data.synthetic import SyntheticMemeSource, summary_markdown
    from crossmod.runtime.user_errors import UserError

    try:
        source = SyntheticMemeSource(num_groups=cfg.num_groups, seed=cfg.seed, label_noise=cfg.label_noise, image_text=cfg.image_text)
    except ValueError as error:  # image_text not one of template | caption
        raise UserError(str(error), "pass image_text=template or image_text=caption", "image_text") from error
    summary = source.summary()
    print(summary_markdown(summary) if cfg.markdown else json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()

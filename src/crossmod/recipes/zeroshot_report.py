"""Zero-shot runs side by side: `crossmod zeroshot-report "runs=[<run>,<run>]" [out=<table.md>]`."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="zeroshot_report")
@entry_point(preflight.reads(runs="zero-shot run folders, as a list: [<run>,<run>]"))
def main(cfg: DictConfig) -> None:
    from pathlib import Path

    from omegaconf import OmegaConf

    from crossmod.reports.zeroshot import comparison

    runs = [Path(str(run)) for run in (cfg.runs if OmegaConf.is_list(cfg.runs) else [cfg.runs])]
    table = comparison(runs)
    if cfg.out:
        Path(cfg.out).write_text(table)
    print(table, end="")


if __name__ == "__main__":
    main()

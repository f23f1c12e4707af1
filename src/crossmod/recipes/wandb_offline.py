"""What an offline W&B run logged, without syncing: `crossmod wandb-offline run=<offline-run dir | .wandb> [part=summary]`."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="wandb_offline")
@entry_point(preflight.reads(run="an offline-run-* folder under <run dir>/wandb/, or its .wandb file"))
def main(cfg: DictConfig) -> None:
    import json
    from pathlib import Path

    from crossmod.runtime.user_errors import UserError
    from crossmod.training.wandb_offline import read_offline_run

    parts = ("summary", "config", "run", "history", "all")
    if cfg.part not in parts:
        raise UserError(f"part={cfg.part} is not one of {list(parts)}", "pass part=summary (or config, run, history, all)", "part")
    try:
        run = read_offline_run(Path(cfg.run))
    except (FileNotFoundError, ValueError) as error:
        raise UserError(str(error), "pass run=<an offline-run-* folder or its .wandb file>", "run") from error
    logged = {"summary": run.summary, "config": run.config, "run": run.run, "history": run.history}
    print(json.dumps(logged if cfg.part == "all" else logged[cfg.part], indent=1, default=str))


if __name__ == "__main__":
    main()

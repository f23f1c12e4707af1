"""Export a run's cultures as shippable folders: `python export.py run=<run dir> [culture=DE] [kind=retrieval] [merge=true] [ship_base_mb=64]`."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

import crossmod.training.resolvers  # noqa: F401
from crossmod.training import preflight
from crossmod.training.resolvers import package_configs
from crossmod.training.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="export")
@entry_point(preflight.export)
def main(cfg: DictConfig) -> None:
    from crossmod.training.artifacts import export_culture, run_model
    from crossmod.training.bases import base_overrides
    from crossmod.training.console import configure_console

    configure_console()
    run_dir = Path(cfg.run)
    model, info = run_model(run_dir, cfg.checkpoint, bases=base_overrides(cfg.get("model")), command=f"python export.py run={run_dir}")
    cultures = [cfg.culture] if cfg.culture else list(model.heads)
    out = Path(cfg.out) if cfg.out else run_dir / "export"
    for culture in cultures:
        folder = export_culture(model, info, run_dir, culture, out / culture, merge=cfg.merge, ship_base_mb=cfg.ship_base_mb, kind=cfg.kind)
        print(f"[export] {culture}: {folder}")


if __name__ == "__main__":
    main()

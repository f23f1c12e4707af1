"""Export a run's cultures as shippable folders: `crossmod export run=<run dir> [culture=DE] [kind=retrieval] [merge=true] [ship_base_mb=64]`,
or as one Transformers sequence-classification folder: `crossmod export run=<run dir> format=hf_seq_cls`."""

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

import crossmod.runtime.resolvers  # noqa: F401
from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="export")
@entry_point(preflight.export)
def main(cfg: DictConfig) -> None:
    from crossmod.artifacts.bases import base_overrides
    from crossmod.artifacts.culture_folders import export_culture
    from crossmod.artifacts.loading import load
    from crossmod.runtime.console import configure_console

    configure_console()
    run_dir = Path(cfg.run)
    model, info = load(
        run_dir, cfg.checkpoint, bases=base_overrides(cfg.get("model")), command=f"crossmod export run={run_dir}", retrieval_bank=False
    )
    out = Path(cfg.out) if cfg.out else run_dir / "export"
    if cfg.format == "hf_seq_cls":  # one Transformers classifier folder for every culture (src/crossmod/artifacts/seq_cls_export.py)
        from crossmod.artifacts.seq_cls_export import export_seq_cls

        folder = export_seq_cls(model, info, run_dir, out / "hf_seq_cls")
        print(f"[export] {', '.join(model.heads)}: {folder} ({json.loads((folder / 'config.json').read_text())['architectures'][0]})")
        return
    cultures = [cfg.culture] if cfg.culture else list(model.heads)
    for culture in cultures:
        folder = export_culture(model, info, run_dir, culture, out / culture, merge=cfg.merge, ship_base_mb=cfg.ship_base_mb, kind=cfg.kind)
        print(f"[export] {culture}: {folder}")


if __name__ == "__main__":
    main()

"""Convert a dataset to shards without training, e.g. once on a cluster's login node:

    crossmod prepare data=multi3hate data.raw_dir=/data/Multi3Hate/data data.shard_root=/scratch/shards folds=3

Sources with per-annotator votes (Multi3Hate's `raw_annotations.csv`) also get their annotation
analysis beside the shards: `dataset_report.{json,md}` and a histogram PNG (docs/datasets.md).

The data config is the one `crossmod train data=<name>` composes (configs/prepare.yaml extends the training config),
and the shards land where its datamodule looks for them (`<data.shard_root>/<name>-<fingerprint>`), so a training run
with the same data settings reuses them.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig

import crossmod.runtime.resolvers  # noqa: F401  (paths use ${project_root:})
from crossmod.data.folds import find_folds
from crossmod.data.paths import override_value
from crossmod.data.shards import MANIFEST, conversion_summary
from crossmod.evaluation.dataset_report import write_annotation_report
from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import UserError, entry_point

CONFIG_DIR = package_configs()


def data_configs() -> list[str]:
    """Data configs that convert a raw layout (they have a `source` and a `raw_dir`)."""
    return sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml") if "raw_dir:" in p.read_text())


def compose_data(name: str, overrides: list[str]) -> DictConfig:
    """The `data=<name>` node of the training config, with `data.`-relative overrides applied (for library callers;
    the job itself is composed by Hydra from configs/prepare.yaml)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[f"data={name}", *(o if o.startswith("data.") else f"data.{o}" for o in overrides)])
    return cfg.data


def prepare(data: DictConfig, out: str | None = None, force: bool = False, folds: int | None = None) -> tuple[Path, dict[str, Any]]:
    """Convert (unless done) through the datamodule's own conversion, the path `train.py` takes; write the
    annotation report beside the shards; return the shard dir and manifest."""
    datamodule = instantiate(data, shard_root=str(out or data.shard_root), fold=None)
    directory = datamodule.dataset_dir
    existed = not force and (directory / MANIFEST).is_file()
    if existed:
        print(f"{directory} is already converted (force=true converts it again); verifying checksums …", flush=True)
    manifest = datamodule.conversion.convert(force=force, folds=folds)  # prints the conversion summary when it converts
    if existed:
        print(conversion_summary(manifest))
    if folds:
        entry = find_folds(manifest, folds, int(data.fold_seed), datamodule.folds.fold_splits)
        print(f"folds: {folds} (seed {data.fold_seed}) over {entry['splits']}: samples per fold {entry['samples_per_fold']}")
    if not (directory / "dataset_report.md").is_file() or force:
        for path in write_annotation_report(datamodule.source, directory):
            print(f"annotation report: {path}", flush=True)
    return directory, manifest


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="prepare")
@entry_point(preflight.prepare)  # a UserError is one message on stderr, exit status 1 (src/crossmod/runtime/user_errors.py)
def main(cfg: DictConfig) -> None:
    name = HydraConfig.get().runtime.choices["data"]
    try:
        directory, manifest = prepare(cfg.data, None, cfg.force, cfg.folds)
    except (ValueError, FileNotFoundError) as error:  # a bad input (file and line named), a raw folder without its layout …
        if isinstance(error, UserError):
            raise
        raise UserError(str(error)) from error
    if (directory / "dataset_report.md").is_file():
        print(f"annotation report (also in the manifest's source_summary): {directory / 'dataset_report.md'}")
    elif manifest.get("source_summary"):
        print("source summary: " + json.dumps(manifest["source_summary"], ensure_ascii=False))
    print(f"\nShards: {directory}")
    settings = [("shard_root", directory.parent)] + ([("raw_dir", cfg.data.raw_dir)] if "raw_dir" in cfg.data else [])
    given = " ".join(shlex.quote(f"data.{key}={override_value(str(value))}") for key, value in settings)
    print(f"Train from them: crossmod train data={name} {given} …")
    print(f"          or:    crossmod train data=shards {shlex.quote(f'data.shard_dir={override_value(str(directory))}')} …")


if __name__ == "__main__":
    main()

"""Convert a raw dataset to shards without training, e.g. once on a cluster's login node:

    python prepare.py multi3hate --raw-dir /data/Multi3Hate/data --out /scratch/shards --folds 3

Sources with per-annotator votes (Multi3Hate's `raw_annotations.csv`) also get their annotation
analysis beside the shards: `dataset_report.{json,md}` and a histogram PNG (docs/datasets.md).

The source is built from the same Hydra data config that `train.py data=<name>` uses, and the
shards land where that config's datamodule looks for them (`<out>/<name>-<fingerprint>`), so a
training run with `data.shard_root=<out>` (and the same raw_dir and options) reuses them.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import DictConfig

import crossmod.lib.resolvers  # noqa: F401  (paths use ${project_root:})
from crossmod.data.folds import find_folds
from crossmod.data.shards import MANIFEST, conversion_summary
from crossmod.evaluation.dataset_report import write_annotation_report
from crossmod.lib.resolvers import package_configs
from crossmod.lib.user_errors import UserError, entry_point

CONFIG_DIR = package_configs()


def data_configs() -> list[str]:
    """Data configs that convert a raw layout (they have a `source` and a `raw_dir`)."""
    return sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml") if "raw_dir:" in p.read_text())


def compose_data(name: str, overrides: list[str]) -> DictConfig:
    """The `data=<name>` node of the training config, with `data.`-relative overrides applied."""

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
        print(f"{directory} is already converted (use --force to convert again); verifying checksums …", flush=True)
    manifest = datamodule.convert(force=force, folds=folds)  # prints the conversion summary when it converts
    if existed:
        print(conversion_summary(manifest))
    if folds:
        entry = find_folds(manifest, folds, int(data.fold_seed), datamodule.fold_splits)
        print(f"folds: {folds} (seed {data.fold_seed}) over {entry['splits']}: samples per fold {entry['samples_per_fold']}")
    if not (directory / "dataset_report.md").is_file() or force:
        for path in write_annotation_report(datamodule.source, directory):
            print(f"annotation report: {path}", flush=True)
    return directory, manifest


def _quoted(value: str) -> str:
    """A path as a Hydra override value: quoted when it holds characters the override grammar reserves."""
    if re.fullmatch(r"[\w/.\-~+:@]+", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@entry_point()  # a UserError is one message on stderr, exit status 1 (src/crossmod/lib/user_errors.py)
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", choices=data_configs(), help="data config name (configs/data/<name>.yaml)")
    parser.add_argument("--raw-dir", required=True, help="the dataset's folder in its published layout")
    parser.add_argument("--out", help="shard root (default: the config's shard_root, ${paths.data_dir}/shards)")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise", help="stop at the first bad input, or skip and count it")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="data config override, e.g. source.include_tags=true"
    )
    parser.add_argument("--folds", type=int, help="also store a grouped stratified k-fold assignment (e.g. 3 for Multi3Hate)")
    parser.add_argument("--force", action="store_true", help="convert again even if the shards exist")
    args = parser.parse_args(argv)

    if not Path(args.raw_dir).expanduser().is_dir():
        raise UserError(
            f"--raw-dir {args.raw_dir} is not a folder", "pass --raw-dir <the dataset's folder in its published layout> (docs/datasets.md)"
        )
    data = compose_data(
        args.dataset, [f"raw_dir={_quoted(str(Path(args.raw_dir).expanduser().resolve()))}", f"on_error={args.on_error}", *args.set]
    )
    try:
        directory, manifest = prepare(data, args.out, args.force, args.folds)
    except (ValueError, FileNotFoundError) as error:  # a bad input (file and line named), a raw folder without its layout …
        raise UserError(str(error)) from error
    if (directory / "dataset_report.md").is_file():
        print(f"annotation report (also in the manifest's source_summary): {directory / 'dataset_report.md'}")
    elif manifest.get("source_summary"):
        print("source summary: " + json.dumps(manifest["source_summary"], ensure_ascii=False))
    root = directory.parent
    print(f"\nShards: {directory}")
    raw_dir, shard_root, shard_dir = (
        shlex.quote(f"data.{k}={_quoted(str(v))}") for k, v in [("raw_dir", data.raw_dir), ("shard_root", root), ("shard_dir", directory)]
    )
    print(f"Train from them: python train.py data={args.dataset} {raw_dir} {shard_root} …")
    print(f"          or:    python train.py data=shards {shard_dir} …")
    return 0


if __name__ == "__main__":
    sys.exit(main())

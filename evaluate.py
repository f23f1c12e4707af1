"""Evaluate trained runs or exported cultures on a dataset and write a report folder:
`python evaluate.py ckpt=<run dir | .ckpt | exported folder | folder of runs> data=<dataset> [split=test]`."""

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

import training.resolvers  # noqa: F401


@hydra.main(version_base="1.3", config_path="configs", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    from hydra.utils import instantiate

    from datamodules.shards import read_manifest
    from training.evaluating import evaluate, load_models, split_records

    OmegaConf.resolve(cfg)
    ckpt = Path(cfg.ckpt)
    models = load_models(ckpt)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.manifest = read_manifest(datamodule.dataset_dir)
    records = split_records(datamodule, cfg.split)
    dataset = datamodule.manifest["dataset"]
    out = Path(cfg.out) if cfg.out else (ckpt.parent if ckpt.is_file() else ckpt) / f"report-{dataset}-{cfg.split}"
    report = evaluate(models, records, dict(datamodule.heads), out, cfg.batch_size, cfg.threshold, dataset)
    print((out / "summary.md").read_text())
    from datamodules.prepare import write_annotation_report

    for path in write_annotation_report(datamodule.source, out):  # Multi3Hate with raw votes: dataset_report.*
        print(f"[evaluate] annotation report: {path}")
    print(f"[evaluate] {len(report['runs'])} run(s) × {report['items']} items → {out}")


if __name__ == "__main__":
    main()

"""Evaluate trained runs or exported cultures on a dataset and write a report folder:
`crossmod evaluate ckpt=<run dir | .ckpt | exported folder | folder of runs> data=<dataset> [split=auto]`.

`split=auto` scores each fold run on its own held-out fold and every other run on the test split."""

from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

import crossmod.runtime.resolvers  # noqa: F401
from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="evaluate")
@entry_point(preflight.evaluate)
def main(cfg: DictConfig) -> None:
    from hydra.utils import instantiate

    from crossmod.artifacts.bases import base_overrides
    from crossmod.artifacts.loading import each_model
    from crossmod.data.shards import read_manifest
    from crossmod.inference.scoring import score, scoring_trainer
    from crossmod.models.sharding import is_zero3
    from crossmod.results.evaluate import Loaded, evaluate, report_folder
    from crossmod.results.scored_splits import run_facts, scored_splits
    from crossmod.runtime.console import configure_console

    configure_console()  # before the first from_pretrained: no "Loading weights" bar over crossmod's own lines
    OmegaConf.resolve(cfg)
    ckpt = Path(cfg.ckpt)
    facts = run_facts(ckpt)
    trainer = scoring_trainer(cfg.trainer)  # the trainer= group: device, precision, processes (data-parallel scoring)
    sharded = is_zero3(trainer.strategy)  # ZeRO-3: each model built in partitions
    models = each_model(ckpt, sharded, base_overrides(cfg.get("model")), f"crossmod evaluate ckpt={ckpt}")
    first, load_first = models[0]
    models[0] = (first, Loaded(load_first()))  # weights are checked (and refused) before any data is prepared
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    scored = scored_splits(facts, cfg.split, datamodule.dataset_dir, datamodule.folds.test_splits)
    dataset = read_manifest(datamodule.dataset_dir)["dataset"]
    out = report_folder(cfg.out, ckpt, dataset, cfg.split, Path(cfg.paths.root_dir))  # never inside an export
    models = [(name, mapped_to(dict(datamodule.heads), cfg.head, dataset, load)) for name, load in models]

    def scorer(model, records, batch_size, threshold, calibrators=None):
        return score(trainer, model, records, batch_size, threshold, cfg.num_workers, calibrators)

    report = evaluate(models, scored, dict(datamodule.heads), out, cfg.batch_size, cfg.threshold, dataset, scorer, trainer.is_global_zero)
    if not trainer.is_global_zero:
        return
    print((out / "summary.md").read_text())
    from crossmod.evaluation.dataset_report import write_annotation_report
    from crossmod.evaluation.summary import shown

    for path in write_annotation_report(datamodule.source, out):  # Multi3Hate with raw votes: dataset_report.*
        print(f"[evaluate] annotation report: {path}")
    for name, entry in report["runs"].items():
        print(f"[evaluate] {shown(name)}: {entry['split']['scored']} ({entry['split']['items']} memes)")  # a folder's name, as words
    print(f"[evaluate] {len(report['runs'])} run(s), {report['items']} distinct items → {out}")


def mapped_to(data_heads: dict, requested: str | None, dataset: str, load):
    """A dataset with one hate head (MHC's `hateful`) is scored by the trained head `head=` names, else the model's head of
    that name, else its only binary head (the rule transfer scoring follows); several candidates are refused by name."""
    from crossmod.results.eval_data import ScoredAs, trained_head

    binary = [head for head in data_heads.values() if head.is_binary]

    def build():
        model = load()
        if len(data_heads) != 1 or len(binary) != 1 or (requested is None and binary[0].name in model.heads):
            return model
        head, rule = trained_head(model.heads, binary[0], requested, dataset, key="head")
        return ScoredAs(model, head, binary[0], rule)

    return build


if __name__ == "__main__":
    main()

"""A run is named after what it runs: an `experiment=` keeps its own name, `name=` wins over everything, and without
either the name is `<data>_<model>` from Hydra's choices (the defaults: `synthetic_concat`), so its run directory,
W&B group, fold results and report rows say which dataset and model they hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import crossmod.runtime.resolvers  # noqa: F401  (registers ${run_name:} …)
from crossmod.recipes.cross_validate import models
from tests.conftest import ROOT, SMALL_DATA


def composed(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("train", overrides=["paths.log_dir=/logs", *overrides], return_hydra_config=True)


@pytest.mark.parametrize(
    "overrides, name",
    [
        ((), "synthetic_concat"),  # the default groups: the default experiment's name
        (("experiment=synthetic_concat",), "synthetic_concat"),
        (("model=text",), "synthetic_text"),
        (("data=multi3hate", "model=text"), "multi3hate_text"),
        (("data=mhc",), "mhc_concat"),
        (("experiment=synthetic_concat", "model=text"), "synthetic_concat"),  # a chosen experiment keeps its name
        (("experiment=hm_text_bert", "model=image"), "hm_text_bert"),
        (("data=multi3hate", "model=text", "name=mine"), "mine"),  # an explicit name always wins
        (("experiment=hm_text_bert", "name=mine"), "mine"),
    ],
)
def test_the_name_and_run_directory_follow_what_runs(overrides, name):
    cfg = composed(*overrides)
    assert cfg.name == name
    assert cfg.hydra.run.dir.startswith(f"/logs/{name}/runs/")  # configs/hydra/default.yaml


@pytest.mark.parametrize(
    "overrides, label",
    [
        (("model/scoring=retrieval",), "synthetic_concat-retrieval"),  # scored by retrieval, not by the head
        (("model/objective=rgcl", "model/scoring=retrieval"), "synthetic_concat-retrieval-rgcl"),
        (("data.ablate=image",), "synthetic_concat-no_image"),
        (("data=multi3hate", "model=text", "data.ablate=text"), "multi3hate_text-no_text"),
        (("~data.heads.CN", "~data.heads.IN"), "synthetic_concat-heads_US_DE_MX"),  # heads dropped by an override
        (("experiment=hm_rgcl",), "hm_rgcl"),  # the name says RGCL already
        (("experiment=hm_rgcl", "model/scoring=retrieval"), "hm_rgcl-retrieval"),
        (("name=x-FT-US", "~data.heads.DE", "~data.heads.MX", "~data.heads.IN", "~data.heads.CN"), "x-FT-US"),
        (("name=mine", "data.ablate=text"), "mine-no_text"),  # an explicit name still says what changed
    ],
)
def test_the_label_and_run_directory_name_what_changes_a_runs_numbers(overrides, label):
    cfg = composed(*overrides)
    assert cfg.label == label
    assert cfg.hydra.run.dir.startswith(f"/logs/{label}/runs/")
    assert cfg.callbacks.fold_results.experiment == label  # fold results, so cv_report and Table 11 headings


def test_per_culture_cross_validation_names_its_models_after_what_runs():
    cfg = composed("model=text", "cv.per_culture=true")
    names = [name for name, _, _ in models(cfg, Path("/cv"))]
    assert names == [f"synthetic_text-FT-{c}" for c in ("US", "DE", "MX", "IN", "CN")]


def test_a_config_composed_without_hydra_asks_for_a_name():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["model=text"])
        named = compose("train", overrides=["model=text", "name=given"])
    with pytest.raises(Exception, match="set name=<name>"):
        _ = cfg.name
    assert named.name == "given"


def test_a_run_and_a_multirun_are_named_after_their_data_and_model(train_run):
    train_run("model=text", *SMALL_DATA, "debug=limit", "trainer.max_epochs=1", "print_table=false", env={"CROSSMOD_RUN_ID": "one"})
    run = train_run.log_dir / "synthetic_text" / "runs" / "one"
    assert [p.name for p in train_run.log_dir.iterdir()] == ["synthetic_text"]
    assert train_run.metrics(run)["experiment"] == "synthetic_text"

    # A multirun over models: one sweep directory (the sweep's own name), each job named after its model.
    train_run(
        "-m", "model=text,image", *SMALL_DATA, "debug=limit", "trainer.max_epochs=1", "print_table=false", env={"CROSSMOD_RUN_ID": "m"}
    )
    sweep = train_run.log_dir / "synthetic_concat" / "multiruns" / "m"
    assert (sweep / "multirun.yaml").is_file()
    jobs = {json.loads(p.read_text())["experiment"] for p in sweep.glob("*/metrics.json")}
    assert jobs == {"synthetic_text", "synthetic_image"}
    assert not (train_run.log_dir / "synthetic_image").exists()


def test_cross_validation_finds_its_folds_by_their_label_not_their_name():
    """An experiment whose label adds to its name (encoder and recipe: mhc_text-minilm-lpft) is reported under the label
    its fold results carry, one model or one per culture (whose fold runs' label adds the same variants)."""
    from crossmod.recipes.cross_validate import found

    cfg = composed("experiment=mhc_text", "data.raw_dir=/mhc")
    assert [label for label, _, _ in models(cfg, Path("/cv"))] == ["mhc_text-minilm-lpft"] == [cfg.callbacks.fold_results.experiment]
    cfg = composed("experiment=multi3hate_text", "data.raw_dir=/m3h", "cv.per_culture=true")
    planned = [name for name, _, _ in models(cfg, Path("/cv"))]
    fold = composed(
        "experiment=multi3hate_text",
        "data.raw_dir=/m3h",
        "name=multi3hate_text-FT-US",
        *(f"~data.heads.{c}" for c in ("DE", "MX", "IN", "CN")),
    )
    assert fold.label == "multi3hate_text-FT-US-minilm-lpft"
    results = {f"multi3hate_text-FT-{c}-minilm-lpft": {"culture": c} for c in ("US", "DE", "MX", "IN", "CN")}
    assert [found(results, name)["culture"] for name in planned] == ["US", "DE", "MX", "IN", "CN"]
    assert found({"synthetic_concat-FT-US": {"x": 1}}, "synthetic_concat-FT-US") == {"x": 1}

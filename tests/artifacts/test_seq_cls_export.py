"""`crossmod export format=hf_seq_cls`: one folder Transformers loads with its own sequence-classification class (no
remote code), a label per culture, multi-label, whose probabilities (with the card's score bias) are crossmod's on the
same inputs; a family Transformers has no such class for is refused by name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from crossmod.artifacts.adapter_folder import ExportError
from crossmod.artifacts.loading import load
from crossmod.artifacts.seq_cls_export import CARD, seq_cls_class
from crossmod.data.batches import SamplesToBatch
from crossmod.data.predict_inputs import read_inputs
from crossmod.models.vlm.classifier import NOT_MODEL_INPUTS
from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import ROOT, TrainRun
from tests.data.sources import layouts
from tests.zygote import run_python

CULTURES = ["US", "DE", "MX", "IN", "CN"]


@pytest.fixture(scope="module")
def gemma_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny Gemma 3 LoRA run of the Multi3Hate protocol (one epoch), exported as format=hf_seq_cls."""
    raw = layouts.multi3hate(tmp_path_factory.mktemp("m3h"))
    tiny = tiny_vlm(str(data_dir / "assets" / "tiny-gemma3-synthetic"), "gemma3")
    train = TrainRun(data_dir, tmp_path_factory.mktemp("gemma-runs"))
    train(
        "experiment=qwen_lora_cv", f"data.raw_dir={raw}", f"model.name_or_path={tiny}", "model.preprocessor.image_size=56",
        "data.batch_size=4", "data.num_workers=0", "trainer.max_epochs=1", env={"CROSSMOD_RUN_ID": "gemma"},
    )  # fmt: skip
    run = train.log_dir / "qwen_lora_cv" / "runs" / "gemma"
    out = tmp_path_factory.mktemp("seq-cls")
    done = run_python([sys.executable, str(ROOT / "export.py"), f"run={run}", "format=hf_seq_cls", f"out={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Gemma3ForSequenceClassification" in done.stdout
    return run, out / "hf_seq_cls"


def test_transformers_loads_it_with_its_own_class_and_gives_crossmods_probabilities(gemma_run, data_dir):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    run, folder = gemma_run
    config = AutoConfig.from_pretrained(folder)
    assert config.architectures == ["Gemma3ForSequenceClassification"] and config.num_labels == 5
    assert config.id2label == dict(enumerate(CULTURES)) and config.problem_type == "multi_label_classification"
    assert not list(folder.glob("*.py")) and not list(folder.glob("*.bin"))  # weights as safetensors, no code to trust
    classifier = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=False).eval()
    assert type(classifier).__name__ == "Gemma3ForSequenceClassification"
    card = json.loads((folder / CARD).read_text())
    assert card["labels"] == CULTURES and set(card["score_bias"]) == set(CULTURES) and set(card["policy"]) == set(CULTURES)
    model, _ = load(run)
    manifest = json.loads((run / "manifest.json").read_text())
    records = list(read_inputs(data_dir / "shards" / f"{manifest['dataset']}-{manifest['fingerprint']}"))[:8]
    batch = SamplesToBatch(model.preprocessor)(records)
    inputs = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor) and k not in NOT_MODEL_INPUTS}
    with torch.inference_mode():
        ours = {name: logit.sigmoid() for name, logit in model(batch).items()}
        logits = classifier(**inputs).logits
    for k, culture in enumerate(CULTURES):
        torch.testing.assert_close(torch.sigmoid(logits[:, k] + card["score_bias"][culture]), ours[culture], atol=1e-5, rtol=0)
    assert any(abs(b) > 0 for b in card["score_bias"].values())  # the bias matters: without it the probabilities differ


def test_a_family_without_a_transformers_classification_class_is_refused_by_name(data_dir):
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic")))
    with pytest.raises(ExportError, match="no Qwen2VLForSequenceClassification that reads images.*culture folders"):
        seq_cls_class(base)


def test_the_docs_table_names_the_families_transformers_has_a_classifier_for():
    """docs/inference.md's table: of crossmod's VLM families, the ones whose pinned Transformers has a
    `<Family>ForSequenceClassification` that reads images (what format=hf_seq_cls exports)."""
    import inspect

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    from crossmod.models.vlm.families import FAMILIES

    having = set()
    for family in FAMILIES:
        for kind in family.model_types:
            prefix = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES[kind].removesuffix("ForConditionalGeneration")
            found = getattr(transformers, f"{prefix}ForSequenceClassification", None)
            if found is not None and "pixel_values" in inspect.signature(found.forward).parameters:
                having.add(family.name)
    table = (ROOT / "docs" / "inference.md").read_text().split("## A Transformers classifier folder", 1)[1]
    assert having == {"gemma3"} and "| Gemma 3 | `Gemma3ForSequenceClassification` |" in table

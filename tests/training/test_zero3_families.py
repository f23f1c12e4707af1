"""DeepSpeed ZeRO-3 on CPU (gloo, two ranks) through `train.py` with VLM families besides Qwen2-VL
(InternVL: InternViT tower, projector, Qwen2 language model; Gemma 3: SigLIP tower, pooled projector;
Idefics3: SigLIP tower, pixel-shuffle connector, Llama language model; Qwen3-VL and Qwen2.5-VL): sharded build, LoRA initialised on gathered weights, and a gathered, non-empty
adapter that PEFT loads back onto the base to give the run's own validation scores. LLaVA-OneVision is
known to fail under ZeRO-3 with the installed Transformers (docs/models.md, "Vision-language models"); a test
says so, and fails once it works."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForImageTextToText

from crossmod.artifacts.loading import load
from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import TrainRun
from tests.training.test_zero3 import ZERO3, _first_val_samples, _val_probabilities

pytestmark = pytest.mark.slow

ONE_EPOCH = ("trainer.max_epochs=1", "test=false")


@pytest.fixture(scope="module", params=["internvl", "gemma3", "idefics3", "qwen3_vl", "qwen2_5_vl"])
def zero3_family(request, tmp_path_factory, data_dir) -> tuple[Path, str]:
    kind = request.param
    folder = tiny_vlm(str(data_dir / "assets" / f"tiny-{kind}-synthetic"), kind)
    train_run = TrainRun(data_dir, tmp_path_factory.mktemp(f"zero3_{kind}") / "runs")
    train_run(
        *ZERO3,
        f"model.name_or_path={folder}",
        *ONE_EPOCH,
        "+callbacks.probe._target_=tests.training.zero3_probe.ShardingProbe",
        env={"CROSSMOD_RUN_ID": kind},
    )
    return train_run.log_dir / "synthetic_vlm" / "runs" / kind, folder


def test_the_family_is_built_sharded_with_lora_b_zero(zero3_family):
    run, _ = zero3_family
    for rank in (0, 1):
        probe = json.loads((run / f"probe_rank{rank}.json").read_text())
        assert probe["partitioned"] == probe["parameters"] > 0
        assert probe["local_numel"] <= probe["full_numel"] // 2 + 64
        assert probe["transformers_zero3"] is True
        assert probe["lora_b_tensors"] > 0 and probe["lora_b_abs_sum_at_start"] == 0.0


def test_the_gathered_adapter_loads_with_peft_to_the_runs_scores(zero3_family):
    run, folder = zero3_family
    metrics = json.loads((run / "metrics.json").read_text())
    adapter = Path(metrics["adapter"])
    from safetensors.torch import load_file

    weights = load_file(str(adapter / "adapter_model.safetensors"))
    assert weights and all(v.numel() > 0 for v in weights.values())
    assert all(re.search(r"\.(language_model|text_model)\..*\.(q_proj|v_proj)\.", key) for key in weights)  # qv: LM only
    assert any(v.abs().sum() > 0 for k, v in weights.items() if "lora_B" in k)  # trained away from zero

    model, _ = load(run, "best")  # one process: heads and preprocessor of the run
    base = AutoModelForImageTextToText.from_pretrained(folder)
    model.backbone.model = PeftModel.from_pretrained(base, str(adapter)).eval()
    samples = _first_val_samples(run, count=6)
    batch = model.preprocessor.collate([model.preprocessor(s) for s in samples])
    with torch.no_grad():
        logits = model(batch)
    scored = _val_probabilities(run)
    for head in model.heads:
        expected = [scored[(s["id"], head)] for s in samples]
        assert torch.sigmoid(logits[head]).tolist() == pytest.approx(expected, abs=1e-5)
    assert sum(1 for _ in csv.DictReader(open(run / "predictions" / "val.csv"))) > 0


def test_llava_onevision_under_zero3_trains_through_the_vision_cache_and_fails_without(data_dir, tmp_path):
    """Its vision tower returns no hidden states when it runs inside a ZeRO-3 training forward (Transformers' output
    capturing), so the feature layer cannot be selected; encoded on its own under no_grad, as the vision cache
    encodes, it does. When the second run passes, the limitation is gone: update docs/models.md."""
    folder = tiny_vlm(str(data_dir / "assets" / "tiny-llava_onevision-synthetic"), "llava_onevision")
    runs = TrainRun(data_dir, tmp_path / "runs")
    cached = runs(*ZERO3, f"model.name_or_path={folder}", f"model.fusion.vision_cache_dir={tmp_path / 'cache'}", *ONE_EPOCH)
    assert re.search(r"\[fit\] vision cache .*: \d+ images read, [1-9]\d* encoded", cached.stdout + cached.stderr)
    tower = runs(*ZERO3, f"model.name_or_path={folder}", "model.fusion.vision_cache=false", *ONE_EPOCH, check=False)
    assert tower.returncode != 0 and "image_outputs.hidden_states[vision_feature_layer]" in tower.stderr

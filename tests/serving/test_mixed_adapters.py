"""One base, every culture, one forward pass: LoRA culture exports of two runs over one tiny Qwen2-VL run as one PEFT
model with two named adapters, each batch a mixed-adapter batch; every culture's probabilities equal that culture's export
scored alone through Lightning's predict loop (what crossmod predict runs)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from crossmod.artifacts.loading import load
from crossmod.data.batches import SamplesToBatch
from crossmod.data.predict_inputs import read_inputs
from crossmod.inference.scoring import probabilities, single_device_trainer
from crossmod.runtime.resolvers import tiny_vlm
from crossmod.serving.cultures import ServedCultures
from tests.conftest import ROOT, TrainRun
from tests.data.sources import layouts
from tests.zygote import run_python


@pytest.fixture(scope="module")
def lora_exports(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny LoRA runs (seeds 1 and 2) over one base, every culture exported; the second run's MX adapter is made
    far from the first's (its LoRA B scaled ×50), so a row through the wrong adapter would show."""
    raw = layouts.multi3hate(tmp_path_factory.mktemp("m3h"))
    tiny = tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))
    train = TrainRun(data_dir, tmp_path_factory.mktemp("lora-runs"))
    out = tmp_path_factory.mktemp("lora-exports")
    for seed in (1, 2):
        train(
            "experiment=qwen_lora_cv", f"data.raw_dir={raw}", f"model.name_or_path={tiny}", "model.preprocessor.image_size=56",
            "data.batch_size=4", "data.num_workers=0", "trainer.max_epochs=1", f"seed={seed}", env={"CROSSMOD_RUN_ID": f"lora{seed}"},
        )
        run = train.log_dir / "qwen_lora_cv" / "runs" / f"lora{seed}"
        done = run_python([sys.executable, str(ROOT / "export.py"), f"run={run}", f"out={out / str(seed)}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    far = out / "far" / "MX"
    shutil.copytree(out / "2" / "MX", far)
    weights = load_file(str(far / "adapter_model.safetensors"))
    save_file({k: v * 50 if "lora_B" in k else v for k, v in weights.items()}, str(far / "adapter_model.safetensors"))
    shard = next(p for p in (data_dir / "shards").iterdir() if p.name.startswith("multi3hate") and p.is_dir())
    return {"US": out / "1" / "US", "DE": out / "1" / "DE", "IN": out / "2" / "IN", "MX": far, "shards": shard}


def test_two_runs_adapters_share_one_base_and_each_culture_equals_its_export_alone(lora_exports):
    records = list(read_inputs(lora_exports["shards"]))[:10]
    cultures = ["US", "DE", "IN", "MX"]
    served = ServedCultures.load([str(lora_exports[c]) for c in cultures])
    (body,) = served.bodies  # one base model in memory
    assert [[c.name for c in group] for group in body.adapters.values()] == [["US", "DE"], ["IN"], ["MX"]]
    assert set(body.model.backbone.model.peft_config) == set(body.adapters)  # three adapters, one PEFT model
    scores, _ = served.probabilities(records)
    trainer = single_device_trainer()
    alone = {}
    for culture in cultures:
        model, _ = load(lora_exports[culture], expect="culture")
        alone[culture] = [row[culture][0] for row in probabilities(trainer, model, records, 4)]
        torch.testing.assert_close(torch.tensor([s[0] for s in scores[culture]]), torch.tensor(alone[culture]), atol=1e-5, rtol=0)
    # the rows really went through their own adapter: MX's head on the first run's adapter scores otherwise
    mx = next(c for c in served.cultures if c.name == "MX")
    batch = SamplesToBatch(body.model.preprocessor)(records)
    with torch.inference_mode():
        wrong = mx.head.probabilities(mx.head_layers(body.model.embed(batch))["MX"]).tolist()
    assert max(abs(a - b) for a, b in zip(wrong, alone["MX"], strict=True)) > 1e-3
    rows = served.rows(records)
    assert [row["MX_probability"] for row in rows] == [s[0] for s in scores["MX"]] and all(0 <= row["disagreement"] for row in rows)

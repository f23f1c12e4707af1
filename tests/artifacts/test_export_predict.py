"""Ship what was trained: export per culture → load (PEFT on a fresh base) → predict equals the run's test scores."""

from __future__ import annotations

import csv
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from crossmod.artifacts import adapter_folder
from crossmod.artifacts.bases import BaseModelError
from crossmod.artifacts.consolidate import WeightsMismatch
from crossmod.artifacts.culture_folders import export_culture
from crossmod.artifacts.loading import NothingToLoad, load
from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import ROOT, SMALL_DATA, scaled
from tests.data.sources import layouts
from tests.zygote import run_python


def _cli(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = run_python([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=scaled(600))
    assert result.returncode == 0 or not check, result.stderr[-4000:]
    return result


def _scores(path: Path, head: str, column: str = "probability") -> dict[str, float]:
    rows = csv.DictReader(open(path))
    return {r["id"]: float(r[column]) for r in rows if r.get("head", head) == head}


def _shard_dir(run_dir: Path) -> Path:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    config = (run_dir / "config.yaml").read_text()
    shard_root = Path(next(line.split(": ", 1)[1] for line in config.splitlines() if line.strip().startswith("shard_root:")))
    return shard_root / f"{manifest['dataset']}-{manifest['fingerprint']}"


def test_lora_culture_export_loads_with_peft_and_predicts_the_runs_scores(train_run, data_dir, tmp_path):
    raw = layouts.multi3hate(tmp_path / "m3h")
    tiny = tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))
    train_run(
        "experiment=qwen_lora_cv",
        f"data.raw_dir={raw}",
        f"model.name_or_path={tiny}",
        "model.preprocessor.image_size=56",
        "data.batch_size=4",
        "data.num_workers=0",
        "trainer.max_epochs=1",
        env={"CROSSMOD_RUN_ID": "lora"},
    )
    run = train_run.log_dir / "qwen_lora_cv" / "runs" / "lora"
    _cli("export.py", f"run={run}", "culture=DE", f"out={tmp_path / 'export'}", "merge=true")
    folder = tmp_path / "export" / "DE"
    card = json.loads((folder / "culture_card.json").read_text())
    assert card["culture"] == "DE" and card["format"] == "peft-lora" and card["base_model"] == "./base/tiny-qwen2-vl-synthetic"
    model_config = json.loads((folder / "model_config.json").read_text())
    adapter_config = json.loads((folder / "adapter_config.json").read_text())
    names = {model_config["name_or_path"], model_config["preprocessor"]["processor"], adapter_config["base_model_name_or_path"]}
    assert names == {card["base_model"]} and tiny not in json.dumps([model_config, adapter_config])
    assert (folder / "base" / "tiny-qwen2-vl-synthetic" / "config.json").is_file()
    assert (
        card["label_map"] == {"0": "non-hate", "1": "hate"} and card["metrics_per_fold"]["0"]["auroc"] == card["metrics"]["test"]["auroc"]
    )
    assert (folder / "README.md").is_file() and (folder / "merged" / "model.safetensors").is_file()

    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    peft_model = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(tiny), str(folder))
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["selection"]["weights"] == "final" and metrics["best_checkpoint"] is None  # cv.selection=last: the final weights
    trained = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    lora_b = {k: v for k, v in trained.items() if "lora_B" in k}
    loaded = {k: v for k, v in peft_model.state_dict().items() if "lora_B" in k}
    assert len(loaded) == len(lora_b) > 0 and any(v.abs().sum() > 0 for v in loaded.values())
    for key, value in lora_b.items():
        torch.testing.assert_close(loaded[next(k for k in loaded if key.endswith(k.split("base_model.model.", 1)[1]))], value)

    _cli("predict.py", f"adapters={folder}", f"inputs={_shard_dir(run)}", f"out={tmp_path / 'de.csv'}", "culture=DE")
    predicted = _scores(tmp_path / "de.csv", "DE", "DE_probability")
    tested = _scores(run / "predictions" / "test.csv", "DE")
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())

    # The run's own adapter folder loads through the same loader, as the run it belongs to, with the run's weights
    model, info = load(run)
    from_adapter, adapter_info = load(run / "adapter")
    assert adapter_info["kind"] == "run" and adapter_info["checkpoint"] == str(run / "adapter")
    for (key, value), (_, other) in zip(model.state_dict().items(), from_adapter.state_dict().items(), strict=True):
        torch.testing.assert_close(value, other, msg=key)

    # One adapter format: the run's adapter/ and the export hold the same files, the head weights under the same keys
    assert adapter_folder.detect(run / "adapter") == "run" and adapter_folder.detect(folder) == "culture"
    shared = {"adapter_config.json", "adapter_model.safetensors", "head.safetensors", "heads.json"}
    assert shared <= {p.name for p in (run / "adapter").iterdir()} and shared <= {p.name for p in folder.iterdir()}
    run_head, culture_head = (load_file(str(f / "head.safetensors")) for f in (run / "adapter", folder))
    assert set(run_head) == set(culture_head) == {"weight", "bias"}
    assert json.loads((folder / "heads.json").read_text()) == card["heads"]
    # a run written before the formats were one (every head in heads.safetensors, keys under "linear.") still loads
    old = tmp_path / "old_run"
    shutil.copytree(run, old)
    save_file({f"linear.{k}": v for k, v in run_head.items()}, str(old / "adapter" / "heads.safetensors"))
    (old / "adapter" / "head.safetensors").unlink()
    from_old, _ = load(old / "adapter")
    for (key, value), (_, other) in zip(from_adapter.state_dict().items(), from_old.state_dict().items(), strict=True):
        torch.testing.assert_close(value, other, msg=key)
    # an adapter folder without what rebuilds its base is named for what it is, and sent where it can be used
    shutil.copytree(run / "adapter", tmp_path / "loose")
    with pytest.raises(NothingToLoad, match="a run's adapter/ outside its run folder"):
        load(tmp_path / "loose")
    (tmp_path / "loose" / "heads.json").unlink()
    with pytest.raises(NothingToLoad, match="a PEFT adapter without crossmod's heads.*memebridge.adapter=<folder>"):
        load(tmp_path / "loose")

    # A base too large to ship is named only: loading asks for model.name_or_path, and takes it.
    named = export_culture(model, info, run, "DE", tmp_path / "named" / "DE", ship_base_mb=0)
    assert json.loads((named / "model_config.json").read_text())["local_bases"] and not (named / "base").exists()
    with pytest.raises(
        BaseModelError, match=r"name_or_path names 'tiny-qwen2-vl-synthetic@sha256:[0-9a-f]{12}'.* model.name_or_path=<local copy>"
    ):
        load(named)
    given, _ = load(named, bases={"name_or_path": tiny})
    shipped, _ = load(folder)
    assert given.hparams.name_or_path == given.hparams.fusion["name_or_path"] == tiny
    for (key, value), (_, other) in zip(given.state_dict().items(), shipped.state_dict().items(), strict=True):
        torch.testing.assert_close(value, other, msg=key)

    # An adapter that is not for the card's base is refused by name: PEFT alone would load it with a warning at most
    # (missing LoRA tensors left at their initial values, unknown ones ignored), scoring the bare base as this export.
    renamed = Path(shutil.copytree(folder, tmp_path / "renamed"))
    adapter_config = json.loads((renamed / "adapter_config.json").read_text())
    (renamed / "adapter_config.json").write_text(json.dumps({**adapter_config, "base_model_name_or_path": "Qwen/Qwen2-VL-7B-Instruct"}))
    with pytest.raises(BaseModelError, match=r"adapter_config.json: base_model_name_or_path is 'Qwen/Qwen2-VL-7B-Instruct'.*not trained on this base"):
        load(renamed)
    weights = load_file(str(folder / "adapter_model.safetensors"))
    first = sorted(weights)[0]
    for change, said in [("dropped", rf"lacks {first}"), ("added", r"holds weights the model lacks: base_model.model.planted.lora_A.weight")]:
        foreign = Path(shutil.copytree(folder, tmp_path / change))
        state = {k: v for k, v in weights.items() if change != "dropped" or k != first}
        if change == "added":
            state["base_model.model.planted.lora_A.weight"] = weights[first].clone()
        save_file(state, str(foreign / "adapter_model.safetensors"))
        with pytest.raises(WeightsMismatch, match=rf"adapter_model.safetensors: does not fit the base './base/tiny-qwen2-vl-synthetic' its card names: it {said}"):
            load(foreign)
    reshaped = Path(shutil.copytree(folder, tmp_path / "reshaped"))
    save_file({**weights, first: torch.zeros(weights[first].shape[0] + 1, *weights[first].shape[1:])}, str(reshaped / "adapter_model.safetensors"))
    with pytest.raises(WeightsMismatch, match=r"adapter_model.safetensors: does not fit the base './base/tiny-qwen2-vl-synthetic' its card names: .*size mismatch"):
        load(reshaped)


def test_classifier_family_export_predicts_the_runs_scores(train_run, tmp_path):
    train_run(*SMALL_DATA, "debug=limit", "policy=cautious", env={"CROSSMOD_RUN_ID": "concat"})
    run = train_run.log_dir / "synthetic_concat" / "runs" / "concat"
    _cli("export.py", f"run={run}", f"out={tmp_path / 'export'}")
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["CN", "DE", "IN", "MX", "US"]
    folder = tmp_path / "export" / "MX"
    assert json.loads((folder / "culture_card.json").read_text())["format"] == "classifier"
    _cli("predict.py", f"adapters={folder}", f"inputs={_shard_dir(run)}", f"out={tmp_path / 'mx.jsonl'}", "threshold=0.3")
    rows = [json.loads(line) for line in open(tmp_path / "mx.jsonl")]
    predicted = {r["id"]: r["MX_probability"] for r in rows}
    assert all(r["MX_decision"] == int(r["MX_probability"] >= 0.3) for r in rows)
    # the temperature the run fitted on val travels in the card, and predict writes the calibrated probability beside
    card = json.loads((folder / "culture_card.json").read_text())
    recorded = json.loads((run / "metrics.json").read_text())["calibration"]["heads"]["MX"]
    assert card["calibration"]["temperature"] == recorded["temperature"] and card["calibration"]["test"]["after"] == recorded["after"]
    for r in rows:
        logit = math.log(r["MX_probability"]) - math.log1p(-r["MX_probability"])
        assert r["MX_probability_calibrated"] == pytest.approx(1 / (1 + math.exp(-logit / recorded["temperature"])), abs=1e-9)
    # the policy's thresholds, chosen on val per culture, travel in the card; predict acts on the raw probability
    policy = json.loads((run / "metrics.json").read_text())["policy"]
    assert policy["name"] == "cautious" and card["policy"]["actions"] == policy["heads"]["MX"]
    cuts = {action: record.get("threshold") for action, record in card["policy"]["actions"].items()}
    for r in rows:
        expected = next((a for a in ("act", "review") if cuts.get(a) is not None and r["MX_probability"] >= cuts[a]), "allow")
        assert r["MX_action"] == expected and r["policy"] == "cautious"
    for action, record in policy["heads"]["MX"].items():  # a threshold and its counts, or the reason there is none
        assert ("threshold" in record and record["hits"] <= record["trials"]) or "why" in record, (action, record)
    tested = _scores(run / "predictions" / "test.csv", "MX")
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())
    # several cultures' exports at once: each culture's own columns, and the memes' disagreement across them
    both = tmp_path / "both.jsonl"
    _cli("predict.py", f"adapters=[{folder},{tmp_path / 'export' / 'US'}]", f"inputs={_shard_dir(run)}", f"out={both}", "threshold=0.3")
    together = [json.loads(line) for line in open(both)]
    assert [r["id"] for r in together] == [r["id"] for r in rows]
    assert all(a["MX_probability"] == pytest.approx(b["MX_probability"], abs=1e-6) for a, b in zip(rows, together))
    for r in together:
        assert r["disagreement"] == pytest.approx(float(np.std([r["MX_probability"], r["US_probability"]])), abs=1e-9)
    refused = _cli("predict.py", f"adapters=[{folder},{folder}]", f"inputs={_shard_dir(run)}", f"out={both}", check=False)
    assert refused.returncode != 0 and "two exports of culture MX" in refused.stderr
    # two processes (trainer=ddp_cpu, gloo): every meme once, in the input order, the single-process scores
    _cli(
        "predict.py", f"adapters={folder}", f"inputs={_shard_dir(run)}", f"out={tmp_path / 'mx2.jsonl'}", "threshold=0.3", "trainer=ddp_cpu"
    )
    two = [json.loads(line) for line in open(tmp_path / "mx2.jsonl")]
    assert [r["id"] for r in two] == [r["id"] for r in rows]
    assert all(
        a["MX_probability"] == pytest.approx(b["MX_probability"], abs=1e-6) and a["MX_decision"] == b["MX_decision"]
        for a, b in zip(rows, two)
    )


def test_pickle_weights_are_refused(tmp_path):
    (tmp_path / "culture_card.json").write_text("{}")
    (tmp_path / "adapter_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(ValueError, match="pickle files \\['adapter_model.bin'\\]: crossmod loads safetensors only"):
        load(tmp_path)


def test_predict_reads_a_jsonl_of_memes_and_names_bad_lines(tmp_path):
    from crossmod.inference.new_memes import read_inputs

    (tmp_path / "m.png").write_bytes(layouts.image_bytes(3, "PNG"))
    (tmp_path / "memes.jsonl").write_text('{"id": 1, "text": "hi", "image": "m.png"}\n\n{"id": 2, "text": "no image"}\n')
    records = read_inputs(tmp_path / "memes.jsonl")
    assert [r["id"] for r in records] == ["1", "2"] and records[0]["image"].startswith(b"\x89PNG") and records[1]["image"] is None
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\n{"text": "no id"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: cannot read this meme"):
        read_inputs(tmp_path / "bad.jsonl")


def test_the_calibration_map_a_run_chose_is_the_one_predict_applies(train_run, tmp_path):
    """calibration=isotonic: the map fitted on val is recorded in metrics.json, carried by the card, and applied by
    predict to every meme (the other maps are reported beside it, never applied)."""
    import numpy as np

    train_run(*SMALL_DATA, "debug=limit", "calibration=isotonic", env={"CROSSMOD_RUN_ID": "isotonic"})
    run = train_run.log_dir / "synthetic_concat" / "runs" / "isotonic"
    recorded = json.loads((run / "metrics.json").read_text())["calibration"]
    assert recorded["method"] == "isotonic" and recorded["rule"].startswith("isotonic regression fitted per head on the validation")
    mx = recorded["heads"]["MX"]
    assert mx["calibrator"]["method"] == "isotonic" and set(mx["compared"]) == {"temperature", "platt", "isotonic"}
    assert mx["after"] == mx["compared"]["isotonic"] and mx["temperature"] > 0
    _cli("export.py", f"run={run}", "culture=MX", f"out={tmp_path / 'export'}")
    card = json.loads((tmp_path / "export" / "MX" / "culture_card.json").read_text())
    assert card["calibration"]["calibrator"] == mx["calibrator"] and card["calibration"]["method"] == "isotonic"
    _cli("predict.py", f"adapters={tmp_path / 'export' / 'MX'}", f"inputs={_shard_dir(run)}", f"out={tmp_path / 'mx.jsonl'}")
    rows = [json.loads(line) for line in open(tmp_path / "mx.jsonl")]
    expected = np.interp([r["MX_probability"] for r in rows], mx["calibrator"]["knots_in"], mx["calibrator"]["knots_out"])
    assert [r["MX_probability_calibrated"] for r in rows] == pytest.approx(expected.tolist(), abs=1e-12)

"""Files users share and download are data: a tampered culture folder, checkpoint or run config runs no code.

Each attack is built by hand from a real tiny run and export (conftest.py), and each payload would
leave a marker file if it ran. The payloads are first shown to be live (the same recipe, handed to
the loader that trusts it, does create its marker); the crossmod command must then refuse the file,
name it and the refused target, and leave no marker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from crossmod.artifacts.loading import load
from crossmod.models.module import MemeClassifier
from crossmod.models.trusted_targets import UntrustedConfigError
from tests.conftest import ROOT, scaled
from tests.data.sources import layouts
from tests.zygote import run_python


def remote_code_model(directory: Path, marker: Path) -> Path:
    """A model folder whose config.json asks for its own Python (`auto_map`): whoever loads it with
    `trust_remote_code=True` imports `configuration_payload.py`, which writes `marker`."""
    directory.mkdir(parents=True)
    config = {"model_type": "payload", "auto_map": {"AutoConfig": "configuration_payload.PayloadConfig"}}
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "configuration_payload.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('payload ran')\n\n"
        "from transformers import PretrainedConfig\n\n\nclass PayloadConfig(PretrainedConfig):\n    model_type = 'payload'\n"
    )
    return directory


def remote_code_config(directory: Path, marker: Path) -> dict:
    """The issue's recipe: AutoConfig.from_pretrained with trust_remote_code on a folder holding a payload."""
    folder = remote_code_model(directory, marker)
    return {"_target_": "transformers.AutoConfig.from_pretrained", "pretrained_model_name_or_path": str(folder), "trust_remote_code": True}


def exec_payload(marker: Path) -> dict:
    """A Hydra node that runs Python when instantiated (Hydra's own blocklist stops this one too)."""
    return {"_target_": "builtins.exec", "_args_": [f"import pathlib; pathlib.Path({str(marker)!r}).write_text('payload ran')"]}


def _run(script: str, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1", "HYDRA_FULL_ERROR": "1"}
    return run_python([sys.executable, str(ROOT / script), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(300))


def _tamper_json(path: Path, change) -> None:
    content = json.loads(path.read_text())
    change(content)
    path.write_text(json.dumps(content, indent=1))


# 1. An exported culture folder: model_config.json asks for AutoConfig with remote code.


def test_predict_refuses_a_culture_folder_whose_config_runs_remote_code(culture_copy, tmp_path):
    live_marker = tmp_path / "live-marker"
    live = remote_code_model(tmp_path / "live-payload", live_marker)
    code = f"from transformers import AutoConfig; AutoConfig.from_pretrained({str(live)!r}, trust_remote_code=True)"
    run_python([sys.executable, "-c", code], env={**os.environ, "HF_HOME": str(tmp_path / "hf")}, capture_output=True, timeout=scaled(120))
    assert live_marker.read_text() == "payload ran", "the payload is not live: this test could not fail"

    marker = tmp_path / "marker"
    attack = remote_code_config(tmp_path / "payload", marker)
    _tamper_json(culture_copy / "model_config.json", lambda cfg: cfg.update(preprocessor=attack))
    (tmp_path / "memes").mkdir()
    (tmp_path / "memes" / "meme.png").write_bytes(layouts.image_bytes(3, "PNG"))
    result = _run("predict.py", f"adapters={culture_copy}", f"inputs={tmp_path / 'memes'}", f"out={tmp_path / 'p.jsonl'}", home=tmp_path)

    assert result.returncode != 0
    assert not marker.exists(), "the culture folder's config ran its payload"
    assert f"{culture_copy / 'model_config.json'}: refused at preprocessor._target_" in result.stderr
    assert "'transformers.AutoConfig.from_pretrained'" in result.stderr
    assert not (tmp_path / "p.jsonl").exists()


@pytest.mark.parametrize(
    ("place", "node", "refused"),
    [
        (
            "text",
            lambda m: {"_target_": "crossmod.models.backbones.text.HFTextEncoder", "name_or_path": "x", "trust_remote_code": True},
            "text.trust_remote_code",
        ),
        (
            "fusion",
            lambda m: {"_target_": "crossmod.models.fusion.ConcatFusion", "_args_": [exec_payload(m)]},
            "fusion._args_[0]._target_: _target_ 'builtins.exec'",
        ),
        (
            "fusion",
            lambda m: {"_target_": "os.system", "_partial_": True, "_args_": [f"touch {m}"]},
            "fusion._target_: _target_ 'os.system'",
        ),
        ("optimizer", lambda m: {"_target_": "torch.optim.AdamW", "lr": "${oc.env:HOME}"}, "optimizer.lr: interpolation"),
        (
            "fusion",
            lambda m: {"_target_": "crossmod.models.vlm.classifier.VLMClassifier", "attn_implementation": "evil/kernels"},
            "attn_implementation 'evil/kernels'",
        ),
    ],
)
def test_culture_folder_configs_may_name_only_crossmod_parts(culture_copy, tmp_path, place, node, refused):
    marker = tmp_path / "marker"
    _tamper_json(culture_copy / "model_config.json", lambda cfg: cfg.update({place: node(marker)}))
    with pytest.raises(UntrustedConfigError, match="model_config.json: refused at") as error:
        load(culture_copy)
    assert refused in str(error.value) and not marker.exists()


def test_culture_card_heads_and_the_model_root_are_checked_too(culture_copy, tmp_path):
    marker = tmp_path / "marker"
    _tamper_json(culture_copy / "culture_card.json", lambda card: card["heads"]["US"].update(spec=exec_payload(marker)))
    with pytest.raises(UntrustedConfigError, match=r"culture_card.json: refused at US.spec._target_: _target_ 'builtins.exec'"):
        load(culture_copy)
    _tamper_json(culture_copy / "culture_card.json", lambda card: card["heads"]["US"].pop("spec"))
    _tamper_json(culture_copy / "model_config.json", lambda cfg: cfg.update(_target_="builtins.exec"))
    with pytest.raises(UntrustedConfigError, match=r"model_config.json: refused _target_ 'builtins.exec' at the top"):
        load(culture_copy)
    assert not marker.exists()


def test_an_untouched_export_still_loads(exported_culture):
    model, info = load(exported_culture)
    card = info["card"]
    assert card["culture"] == "US" and list(model.heads) == ["US"]


# 2. A Lightning checkpoint that loads under weights_only=True but carries a _target_ in hyper_parameters.


def _tampered_checkpoint(run_dir: Path, path: Path, **hyper_parameters) -> Path:
    best = json.loads((run_dir / "metrics.json").read_text())["best_checkpoint"]
    checkpoint = torch.load(best, map_location="cpu", weights_only=True)
    checkpoint["hyper_parameters"].update(hyper_parameters)
    torch.save(checkpoint, path)
    torch.load(path, map_location="cpu", weights_only=True)  # the attack passes the pickle refusal
    return path


def test_evaluate_refuses_a_checkpoint_whose_hyperparameters_run_remote_code(leaky_run, data_dir, tmp_path):
    live_marker = tmp_path / "live-marker"
    live = _tampered_checkpoint(leaky_run, tmp_path / "live.ckpt", preprocessor=remote_code_config(tmp_path / "live-payload", live_marker))
    # Lightning's own loader builds whatever the file names (and then fails on the odd preprocessor). `__wrapped__`, not
    # `__func__`: Lightning's restricted classmethod sets `__func__` in 2.6.6 (constraints.txt) but not in 2.5.5 (the floor).
    code = f"import lightning as L; from crossmod.models.module import MemeClassifier; L.LightningModule.load_from_checkpoint.__wrapped__(MemeClassifier, {str(live)!r})"
    run_python(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf")},
        capture_output=True,
        timeout=scaled(300),
    )
    assert live_marker.read_text() == "payload ran", "the payload is not live: this test could not fail"

    marker = tmp_path / "marker"
    evil = _tampered_checkpoint(leaky_run, tmp_path / "evil.ckpt", preprocessor=remote_code_config(tmp_path / "payload", marker))
    result = _run("evaluate.py", f"ckpt={evil}", f"paths.data_dir={data_dir}", f"out={tmp_path / 'report'}", home=tmp_path)

    assert result.returncode != 0
    assert not marker.exists(), "the checkpoint's hyperparameters ran their payload"
    assert (
        f"{evil} [hyper_parameters]: refused at preprocessor._target_: _target_ 'transformers.AutoConfig.from_pretrained'" in result.stderr
    )
    assert not (tmp_path / "report").exists()


def test_checkpoints_may_not_name_other_code_or_another_instantiator(leaky_run, tmp_path):
    marker = tmp_path / "marker"
    evil = _tampered_checkpoint(leaky_run, tmp_path / "exec.ckpt", text=exec_payload(marker))
    with pytest.raises(UntrustedConfigError, match=r"exec.ckpt \[hyper_parameters\]: refused at text._target_: _target_ 'builtins.exec'"):
        MemeClassifier.load_from_checkpoint(evil, map_location="cpu")
    instantiator = _tampered_checkpoint(leaky_run, tmp_path / "instantiator.ckpt", _instantiator="lightning.pytorch.cli.instantiate_module")
    with pytest.raises(UntrustedConfigError, match=r"instantiator.ckpt \[hyper_parameters\]: refused at _instantiator"):
        load(leaky_run, str(instantiator))
    assert not marker.exists()


def test_a_run_config_is_checked_before_weights_only_checkpoints_rebuild_from_it(leaky_run, tmp_path):
    """Consolidated safetensors (and DeepSpeed directories) rebuild the model from the run's config.yaml."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(leaky_run / "metrics.json", run)
    marker = tmp_path / "marker"
    config = yaml.safe_load((leaky_run / "config.yaml").read_text())
    config["model"]["image"] = exec_payload(marker)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "weights.safetensors").write_bytes(b"")
    with pytest.raises(UntrustedConfigError, match=r"run/config.yaml: refused at image._target_: _target_ 'builtins.exec'"):
        load(run / "weights.safetensors")  # a weights-only file inside a run: rebuilt from the run's config
    assert not marker.exists()


def test_every_shipped_model_config_names_only_trusted_targets():
    """What train.py builds from configs/ must load again from its own export and checkpoints."""
    from crossmod.models.trusted_targets import TRUSTED_TARGETS

    def targets(node):
        if isinstance(node, dict):
            yield from ([node["_target_"]] if "_target_" in node else [])
            for value in node.values():
                yield from targets(value)
        elif isinstance(node, list):
            for value in node:
                yield from targets(value)

    found = {}
    for path in sorted((ROOT / "configs" / "model").glob("*.yaml")):
        found.update(dict.fromkeys(targets(yaml.safe_load(path.read_text())), path.name))
    for path in sorted((ROOT / "configs" / "experiment").glob("*.yaml")):
        found.update(dict.fromkeys(targets((yaml.safe_load(path.read_text()) or {}).get("model")), path.name))
    assert len(found) >= 15 and {t: p for t, p in found.items() if t not in TRUSTED_TARGETS} == {}

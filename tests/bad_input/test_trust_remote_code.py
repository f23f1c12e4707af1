"""A model folder that ships Python runs none of it, and crossmod never asks whether it should.

Transformers, given `trust_remote_code` unset, asks "Do you wish to run the custom code? [y/N]" when a
folder's config has an `auto_map` for a type it does not know; a user (or a script piping `yes`) who
answers y runs the folder's code. So every `from_pretrained` in crossmod's own code passes
`trust_remote_code=False` (checked by reading the code), and a VLM folder whose processor config has
an `auto_map` is refused by crossmod's processor loader without a prompt, whatever stdin holds.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, scaled

SCANNED = ("src/crossmod", "scripts", "bench")
# Loaders that never import code from a folder (PEFT reads an adapter's config and safetensors weights).
NO_CODE_PATH = {"PeftModel"}


def from_pretrained_calls_without_false() -> list[str]:
    """`file:line` of every `X.from_pretrained(…)` in crossmod's code that does not pass trust_remote_code=False."""
    files = [p for d in SCANNED for p in (ROOT / d).rglob("*.py")] + sorted(ROOT.glob("*.py"))
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained"):
                continue
            if isinstance(node.func.value, ast.Name) and node.func.value.id in NO_CODE_PATH:
                continue
            explicit = [k for k in node.keywords if k.arg == "trust_remote_code"]
            if not (explicit and isinstance(explicit[0].value, ast.Constant) and explicit[0].value.value is False):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_from_pretrained_in_crossmod_says_trust_remote_code_false():
    assert from_pretrained_calls_without_false() == []


def _payload_folder(tmp_path: Path, marker: Path) -> Path:
    """A tiny Qwen2-VL folder turned hostile: its processor config and config.json name classes in the folder's own
    `processing_payload.py` (`auto_map`, an unknown model_type), which writes `marker` when imported."""
    from crossmod.models.tiny.vlm import build_tiny_vlm

    folder = Path(build_tiny_vlm(tmp_path / "vlm", ["a meme about cats", "hello world"]))
    processor_config = json.loads((folder / "processor_config.json").read_text())
    processor_config.update(processor_class="PayloadProcessor", auto_map={"AutoProcessor": "processing_payload.PayloadProcessor"})
    (folder / "processor_config.json").write_text(json.dumps(processor_config))
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="payload_vl", auto_map={"AutoConfig": "processing_payload.PayloadConfig"})
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "processing_payload.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('payload ran')\n"
        "from transformers import PretrainedConfig, ProcessorMixin\n\n\n"
        "class PayloadProcessor(ProcessorMixin):\n    pass\n\n\nclass PayloadConfig(PretrainedConfig):\n    model_type = 'payload_vl'\n"
    )
    return folder


LOAD = (
    "import sys\nfrom crossmod.models.vlm.families import family_named\nfrom crossmod.models.vlm.preprocess import load_processor\n"
    "try:\n    load_processor(sys.argv[1], family_named('qwen2_vl'))\nexcept ValueError as error:\n    print('REFUSED', error)\n"
)


@pytest.mark.parametrize("stdin", [None, b"y\n"], ids=["stdin-closed", "stdin-answers-yes"])
def test_a_vlm_folder_with_auto_map_is_refused_without_a_prompt(stdin, tmp_path):
    marker = tmp_path / "marker"
    folder = _payload_folder(tmp_path, marker)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder)],
        cwd=ROOT,
        env=env,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        timeout=scaled(120),
    )
    output = (result.stdout + result.stderr).decode()
    assert not marker.exists(), "the folder's code ran"
    assert "[y/N]" not in output, output[-2000:]
    assert "REFUSED" in output and str(folder) in output and "trust_remote_code" in output, output[-2000:]


def from_pretrained_without_the_folder_check() -> list[str]:
    """`file:function` of every function in crossmod's library code that calls `X.from_pretrained` (X not PEFT) without
    calling `refuse_shipped_code` itself: the scan that keeps a new loader from skipping the check."""
    files = sorted((ROOT / "src" / "crossmod").rglob("*.py"))
    found = []
    for path in files:
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            calls = [n for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute | ast.Name)]
            loads = [
                c
                for c in calls
                if isinstance(c.func, ast.Attribute)
                and c.func.attr == "from_pretrained"
                and not (isinstance(c.func.value, ast.Name) and c.func.value.id in NO_CODE_PATH)
            ]
            checked = any(getattr(c.func, "id", getattr(c.func, "attr", None)) == "refuse_shipped_code" for c in calls)
            if loads and not checked:
                found.append(f"{path.relative_to(ROOT)}:{function.name}")
    return found


def test_every_loader_checks_the_folder_for_shipped_code_first():
    assert from_pretrained_without_the_folder_check() == []


def _known_type_folder(tmp_path: Path, config_file: str, nested: bool) -> Path:
    """A tiny Qwen2-VL folder (a type Transformers knows, so trust_remote_code=False alone would load it silently)
    whose `config_file` names a class in the folder's own Python."""
    from crossmod.models.tiny.vlm import build_tiny_vlm

    folder = Path(build_tiny_vlm(tmp_path / "vlm", ["a meme about cats", "hello world"]))
    path = folder / config_file
    config = json.loads(path.read_text())
    auto_map = {"AutoTokenizer": ["tokenization_payload.PayloadTokenizer", None], "AutoConfig": "configuration_payload.PayloadConfig"}
    if nested:
        config.setdefault("text_config", {})["auto_map"] = auto_map
    else:
        config["auto_map"] = auto_map
    path.write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "config_file, nested, place",
    [("config.json", False, "auto_map"), ("config.json", True, "text_config.auto_map"), ("tokenizer_config.json", False, "auto_map")],
    ids=["config", "nested-config", "tokenizer-config"],
)
def test_a_known_type_folder_with_auto_map_is_refused_naming_file_and_place(config_file, nested, place, tmp_path):
    from crossmod.models.model_folders import ShippedCodeError
    from crossmod.models.vlm.classifier import VLMClassifier

    folder = _known_type_folder(tmp_path, config_file, nested)
    with pytest.raises(ShippedCodeError, match=rf"{folder / config_file}: `{place}` names Python classes .*trust_remote_code=False"):
        VLMClassifier(str(folder), heads={"US": {"kind": "binary"}}, mode="head")

"""Files users share (exports, consolidated checkpoints, retrieval databases) get the umask's permissions, not the
0600 safetensors gives: a teammate can read a copy on shared storage."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from types import SimpleNamespace

import torch

from crossmod.artifacts import culture_folders as artifacts
from crossmod.data.cache_files import save_weights

ROOT = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_saved_weights_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    os.umask(old)
    path = save_weights({"w": torch.zeros(2)}, tmp_path / "w.safetensors")
    assert _mode(path) == 0o666 & ~old


def test_an_export_folder_is_readable_per_the_umask(tmp_path, monkeypatch):
    from safetensors.torch import save_file  # what save_pretrained calls: 0600

    def write(model, info, run_dir, culture, out, merge, ship_base_mb, kind):
        save_file({"w": torch.zeros(2)}, str(out / "adapter_model.safetensors"))
        (out / "culture_card.json").write_text(json.dumps({"culture": culture}))

    monkeypatch.setattr(artifacts, "_write_culture", write)
    model = SimpleNamespace(heads={"DE": SimpleNamespace(is_binary=True)}, head_layers=object())
    out = artifacts.export_culture(model, {}, tmp_path, "DE", tmp_path / "export" / "DE")
    old = os.umask(0o022)
    os.umask(old)
    assert {p.name: _mode(p) for p in out.iterdir()} == {"adapter_model.safetensors": 0o666 & ~old, "culture_card.json": 0o666 & ~old}


def test_no_module_saves_safetensors_around_the_helper():
    callers = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "crossmod").rglob("*.py")
        if re.search(r"\bsave_file\(", path.read_text()) and path.name != "cache_files.py"
    ]
    assert not callers, f"{callers} call safetensors' save_file directly: use crossmod.data.cache_files.save_weights"

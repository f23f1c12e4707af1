"""An export is written beside its folder and renamed into place when whole: a failure leaves no half-written folder
(an earlier export stays), and a link planted in the old folder is never written through."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from crossmod.artifacts import culture_folders as artifacts
from crossmod.runtime.user_errors import UserError

MODEL = SimpleNamespace(heads={"DE": SimpleNamespace(is_binary=True)}, head_layers=object())


def _writes_then(fail: bool):
    def write(model, info, run_dir, culture, out, merge, ship_base_mb, kind):
        (out / "head.safetensors").write_bytes(b"weights")
        if fail:
            raise RuntimeError("the database could not be built")
        (out / "culture_card.json").write_text(json.dumps({"culture": culture}))

    return write


def test_a_failed_export_leaves_no_folder_and_keeps_the_earlier_one(tmp_path, monkeypatch):
    out = tmp_path / "export" / "DE"
    monkeypatch.setattr(artifacts, "_write_culture", _writes_then(fail=True))
    with pytest.raises(RuntimeError, match="database"):
        artifacts.export_culture(MODEL, {}, tmp_path, "DE", out)
    assert not out.exists() and list((tmp_path / "export").iterdir()) == []
    monkeypatch.setattr(artifacts, "_write_culture", _writes_then(fail=False))
    artifacts.export_culture(MODEL, {}, tmp_path, "DE", out)
    monkeypatch.setattr(artifacts, "_write_culture", _writes_then(fail=True))
    with pytest.raises(RuntimeError):
        artifacts.export_culture(MODEL, {}, tmp_path, "DE", out)
    assert json.loads((out / "culture_card.json").read_text()) == {"culture": "DE"}, "the complete earlier export stays"
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["DE"]


def test_an_export_never_writes_through_a_planted_link(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "run" / "export" / "DE"
    out.mkdir(parents=True)
    (out / "culture_card.json").symlink_to(victim)
    (out / "README.md").symlink_to(victim)
    monkeypatch.setattr(artifacts, "_write_culture", _writes_then(fail=False))
    artifacts.export_culture(MODEL, {}, tmp_path, "DE", out)
    assert victim.read_text() == "precious"
    assert not (out / "culture_card.json").is_symlink() and json.loads((out / "culture_card.json").read_text())["culture"] == "DE"


def test_an_unknown_culture_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(KeyError, match=r"culture 'XX' is not a head of this run \(heads: \['DE'\]\)\. Fix: pass culture=") as refused:
        artifacts.export_culture(MODEL, {}, tmp_path, "XX", tmp_path / "export" / "XX")
    assert isinstance(refused.value, UserError) and refused.value.key == "culture"  # one line on the console, no traceback
    assert not (tmp_path / "export").exists()

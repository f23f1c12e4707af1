"""`crossmod prepare` (`python prepare.py` in a checkout): the same conversion outside training, with progress and a summary."""

from __future__ import annotations

import os
import subprocess
import sys

from hydra.utils import instantiate

from crossmod.data.memes import MemeDataModule
from crossmod.data.shards import read_manifest
from crossmod.recipes.prepare import compose_data, data_configs
from tests.conftest import ROOT, scaled
from tests.data.sources import layouts


def test_lists_the_raw_dataset_configs():
    assert data_configs() == ["hateful_memes", "memebridge", "mhc", "multi3hate", "toxictags"]


def _prepare(*overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "crossmod", "prepare", *overrides]
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=scaled(300)
    )


def test_prepare_skips_counts_and_lands_where_the_datamodule_looks(tmp_path):
    raw = layouts.toxictags(tmp_path / "raw", items=16)
    (raw / "images" / "tt5.jpg").write_bytes(b"\xff\xd8\xff broken")
    out = tmp_path / "shards"
    overrides = [
        "data=toxictags",
        f"data.raw_dir={raw}",
        f"data.shard_root={out}",
        "data.on_error=skip",
        "data.source.include_tags=true",
        "folds=2",
    ]
    done = _prepare(*overrides)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = done.stdout
    assert "toxictags: 16 inputs read = 15 samples written + 1 skipped" in printed
    assert "toxictags.jsonl:6: id tt5: corrupt or truncated image" in printed
    assert "folds: 2" in printed and "label toxic:" in printed
    (directory,) = [p for p in out.iterdir() if p.is_dir()]
    manifest = read_manifest(directory)
    assert manifest["params"]["options"]["include_tags"] is True and manifest["folds"][0]["num_folds"] == 2

    data = compose_data("toxictags", [f"raw_dir={raw}", "on_error=skip", "source.include_tags=true", f"shard_root={out}"])
    dm = MemeDataModule(heads=dict(data.heads), source=instantiate(data.source), shard_root=str(out))
    assert dm.dataset_dir == directory  # a training run with the same settings reuses these shards

    again = _prepare(*overrides)
    assert again.returncode == 0 and "already converted" in again.stdout, again.stderr[-3000:]
    assert f"Train from them: crossmod train data=toxictags data.shard_root={out} data.raw_dir={raw}" in printed


def test_prepare_as_a_module_stops_on_bad_input_with_the_reason(tmp_path):
    raw = layouts.mhc(tmp_path / "raw")
    path = raw / "hatecheck_cases_final_german.csv"
    path.write_text(path.read_text().replace(",non-hateful,", ",maybe,", 1))
    command = [sys.executable, str(ROOT / "prepare.py"), "data=mhc", f"data.raw_dir={raw}", f"data.shard_root={tmp_path / 'shards'}"]
    result = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=scaled(300)
    )
    assert result.returncode == 1
    assert f"{path}, line 4: label_gold 'maybe' is not one of" in result.stderr
    assert "on_error=skip" in result.stderr

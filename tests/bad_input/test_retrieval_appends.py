"""Appends to a retrieval adapter lose nothing: two `crossmod retrieval-db` processes on one adapter take turns (the
adapter's lock), and a kill at any instant of an append leaves an adapter that loads, holding the old database or the
new one whole (the card, replaced last, names the files of its own generation)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crossmod.artifacts.loading import load
from crossmod.artifacts.retrieval_db import DB_NAME, IDS_NAME, add
from crossmod.data.predict_inputs import read_inputs
from tests.artifacts.test_export_predict import _shard_dir
from tests.conftest import ROOT, scaled
from tests.zygote import run_python

CULTURE = "US"


def _labelled(shards: Path, split: str) -> set[str]:
    return {r["id"] for r in read_inputs(str(shards), [split]) if (r.get("labels") or {}).get(CULTURE) in (0, 1)}


def _database_ids(folder: Path) -> list[str]:
    model, _ = load(folder)  # what every job reads: checksums, sizes and ids checked
    return list(model.retrieval_bank.ids)


def _generations(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if DB_NAME.match(p.name) or IDS_NAME.match(p.name))


@pytest.fixture
def adapter(retrieval_culture: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(retrieval_culture, tmp_path / CULTURE))


def test_two_appends_at_once_keep_every_row(adapter, leaky_run):
    shards = _shard_dir(leaky_run)
    before = _database_ids(adapter)
    command = [sys.executable, "-m", "crossmod", "retrieval-db", f"adapter={adapter}", f"shards={shards}", "allow_held_out=true"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    appends = [
        subprocess.Popen([*command, f"splits=[{split}]"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for split in ("test", "val")
    ]
    for append in appends:
        out, err = append.communicate(timeout=scaled(600))
        assert append.returncode == 0, err[-3000:]
    after = _database_ids(adapter)
    expected = set(before) | _labelled(shards, "test") | _labelled(shards, "val")
    assert len(after) == len(set(after)) == len(expected) and set(after) == expected  # 800, not 400
    card = json.loads((adapter / "culture_card.json").read_text())
    assert [s["memes"] for s in card["retrieval"]["sources"][1:]] and card["retrieval"]["size"] == len(expected)
    assert _generations(adapter) == sorted(card["retrieval"]["files"].values())  # the old generations are gone


@pytest.mark.parametrize("moment", ["before the card", "after the card"])
def test_a_kill_during_an_append_leaves_an_adapter_that_loads(adapter, leaky_run, moment):
    """The process dies (os._exit, as a SIGKILL would leave it) just before the card is replaced, or just after: the
    adapter then loads with the old database, or with the new one, never a mixture; the next append cleans up."""
    shards = _shard_dir(leaky_run)
    before = _database_ids(adapter)
    kill = (
        "retrieval_db.write_json_atomic = lambda *a, **k: os._exit(9)"
        if moment == "before the card"
        else "retrieval_db._stale_generations = lambda *a, **k: os._exit(9)"
    )
    script = (
        "import os\nfrom pathlib import Path\nfrom crossmod.artifacts import retrieval_db\n"
        f"{kill}\n"
        f"retrieval_db.add(Path({str(adapter)!r}), {str(shards)!r}, ['test'], False, allow_held_out=True)\n"
    )
    done = run_python([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=scaled(600))
    assert done.returncode == 9, done.stderr[-3000:]
    added = _labelled(shards, "test")
    loaded = _database_ids(adapter)
    assert set(loaded) == (set(before) if moment == "before the card" else set(before) | added)
    add(adapter, str(shards), ["val"], False, allow_held_out=True)  # the next append takes what the kill left
    card = json.loads((adapter / "culture_card.json").read_text())
    assert _generations(adapter) == sorted(card["retrieval"]["files"].values())


def test_a_link_planted_at_the_lock_is_refused_and_its_target_untouched(adapter, leaky_run, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (adapter / ".retrieval_db.lock").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic link"):
        add(adapter, str(_shard_dir(leaky_run)), ["test"], False, allow_held_out=True)
    assert victim.read_text() == "precious"

"""Writers never follow a link planted where they write: a report folder, a seed-report's runs folder, or a run
folder being resumed. Each of these overwrote a file outside the folder it was asked to write in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossmod.runtime.user_errors import UserError, planted_links
from tests.conftest import ROOT, scaled


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "precious.txt"
    victim.parent.mkdir(parents=True)
    victim.write_text("mine\n")
    return victim


def test_seed_report_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    victim = _victim(tmp_path)
    runs = tmp_path / "runs"
    for seed, auroc in ((1, 0.7), (2, 0.8)):
        run = runs / f"{seed}_splits"
        run.mkdir(parents=True)
        best = {"val": {"mean": {"auroc": auroc}}, "test": {"mean": {"auroc": auroc, "acc": 0.6}}}
        (run / "metrics.json").write_text(json.dumps({"experiment": "exp", "seed": seed, "best": best, "selection": {"rule": "inner"}}))
    (runs / "seed_summary.json").symlink_to(victim)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run([sys.executable, "-m", "crossmod", "seed-report", f"runs={runs}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=scaled(120))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert victim.read_text() == "mine\n"
    assert not (runs / "seed_summary.json").is_symlink() and "exp" in json.loads((runs / "seed_summary.json").read_text())


def test_evaluate_report_files_replace_planted_links(tmp_path):
    """report.json and summary.md go through the one writer (the files the evaluate job writes last)."""
    from crossmod.data.cache_files import write_file

    victim = _victim(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    (out / "summary.md").symlink_to(victim)
    write_file(out / "summary.md", b"report\n", "report", user_folder=True)
    assert victim.read_text() == "mine\n" and (out / "summary.md").read_text() == "report\n"
    source = (ROOT / "src" / "crossmod" / "results" / "evaluate.py").read_text()
    assert ".write_text(" not in source and "savefig" not in source  # every evaluate file goes through write_file


@pytest.mark.parametrize("planted", ["train.log", "config.yaml", ".hydra/config.yaml", "checkpoints/last.ckpt"])
def test_a_run_folder_with_a_planted_link_is_refused_before_a_resumed_run_writes(tmp_path, planted):
    victim = _victim(tmp_path)
    run = tmp_path / "logs" / "synthetic_concat" / "runs" / "shared"
    (run / ".hydra").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / planted).symlink_to(victim)
    with pytest.raises(UserError, match=rf"{planted}.* is a symlink .*remove the link"):
        planted_links(run)
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run}", f"paths.log_dir={tmp_path / 'logs'}", f"paths.data_dir={tmp_path / 'data'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=scaled(300),
    )  # fmt: skip
    assert done.returncode == 1 and "is a symlink" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert victim.read_text() == "mine\n"
    assert not (tmp_path / "data").exists()  # refused before any work

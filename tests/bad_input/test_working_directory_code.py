"""A folder that holds packages with generic names (`training/`, `models/`, `data/` …) is not code crossmod runs: its
tools import `crossmod.*` only, so running one from such a folder never executes the planted files (issue: code from
the working directory, which `python -m training.cv_report` used to run)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, scaled

PLANTED = ("training", "models", "datamodules", "evaluation", "data")


@pytest.fixture
def planted(tmp_path):
    """A working directory whose every generic-name package records that it ran."""
    for name in PLANTED:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'a').write({name!r} + '\\n')\n")
    return tmp_path


@pytest.mark.parametrize(
    "command", [["-m", "crossmod.recipes.cv_report", "--help"], [str(ROOT / "train.py"), "--help"]], ids=["-m", "script"]
)
def test_a_tool_run_from_a_folder_of_planted_packages_runs_none_of_them(planted, command):
    done = subprocess.run([sys.executable, *command], cwd=planted, capture_output=True, text=True, timeout=scaled(300))
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (planted / "RAN").exists(), f"ran the working directory's {(planted / 'RAN').read_text().split()}"

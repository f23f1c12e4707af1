"""A folder that holds packages with generic names (`training/`, `models/`, `data/` …) is not code crossmod runs: its
tools import `crossmod.*` only, so running one from such a folder never executes the planted files (issue: code from
the working directory, which `python -m training.cv_report` used to run)."""

from __future__ import annotations

import os
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


@pytest.fixture
def planted_crossmod(tmp_path):
    """A working directory with a planted `crossmod/` and a planted Hydra plugin, each recording that it ran."""
    marker = tmp_path / "RAN"
    (tmp_path / "crossmod").mkdir()
    (tmp_path / "crossmod" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('crossmod\\n')\n")
    (tmp_path / "hydra_plugins" / "planted").mkdir(parents=True)
    (tmp_path / "hydra_plugins" / "planted" / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('plugin\\n')\n")
    return tmp_path


def test_the_processes_a_job_starts_do_not_run_what_the_working_directory_plants(planted_crossmod, monkeypatch):
    """Fold processes and DDP ranks run `python -m crossmod…`: a job sets PYTHONSAFEPATH for them, so Python does not
    put their working directory first on sys.path (without it, the planted package runs in their place)."""
    from crossmod import cli

    for name in ("PYTHONSAFEPATH", "PYTHONPATH", "CROSSMOD_INVOKED_AS"):  # what run_job sets, restored after the test
        monkeypatch.setenv(name, os.environ.get(name, ""))  # recorded (absent stays absent afterwards), later commands fork
        if name == "PYTHONSAFEPATH" or not os.environ[name]:
            monkeypatch.delenv(name)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # run_job sets the job's own command line
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", sys.modules["__main__"].__spec__)
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: type("Job", (), {"__spec__": None, "__file__": name, "main": staticmethod(lambda: 0)}))
    cli.run_job("cv", [])
    child = {**os.environ}
    assert child["PYTHONSAFEPATH"] == "1" and child["PYTHONPATH"].split(os.pathsep)[0] == sys.path[0]
    command = [sys.executable, "-m", "crossmod.recipes.cv_report", "--help"]
    done = subprocess.run(command, cwd=planted_crossmod, env=child, capture_output=True, text=True, timeout=scaled(300))
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (planted_crossmod / "RAN").exists(), (planted_crossmod / "RAN").read_text()
    unsafe = {k: v for k, v in child.items() if k != "PYTHONSAFEPATH"}
    subprocess.run(command, cwd=planted_crossmod, env=unsafe, capture_output=True, text=True, timeout=scaled(300))
    assert "crossmod" in (planted_crossmod / "RAN").read_text()  # the attack this stops is real

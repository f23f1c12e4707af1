"""The README's "What you run" table names every job and tool, and each command it names exists and runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT


def _table_commands() -> list[str]:
    section = (ROOT / "README.md").read_text().split("## What you run", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| what you run")]
    return [command for row in rows for command in re.findall(r"`([^`]+)`", row.split(" | ", 1)[1])]


def _runnable(path: Path) -> bool:
    return path.is_file() and 'if __name__ == "__main__":' in path.read_text()


def test_every_command_in_the_table_exists_and_is_runnable():
    commands = _table_commands()
    assert len(commands) >= 10
    for command in commands:
        words = command.split()
        if words[:2] == ["python", "-m"]:
            assert _runnable(ROOT / "src" / (words[2].replace(".", "/") + ".py")), f"README names {command!r}: no such runnable module"
        elif words[0] == "python":
            assert _runnable(ROOT / words[1]), f"README names {command!r}: no such runnable script"
        elif words[0] == "crossmod":  # the installed command: a job it knows, whose module runs
            from crossmod.cli import JOBS

            assert words[1] in JOBS, f"README names {command!r}: crossmod has no job {words[1]!r}"
            assert _runnable(ROOT / "src" / (JOBS[words[1]].module.replace(".", "/") + ".py")), f"README names {command!r}"
        else:
            assert words[0] == "make" and f"\n{words[1]}:" in (ROOT / "Makefile").read_text(), f"README names {command!r}"


def test_every_root_script_is_in_the_table():
    named = {command.split()[1] for command in _table_commands() if command.startswith("python ") and not command.startswith("python -m")}
    scripts = {path.name for path in ROOT.glob("*.py") if _runnable(path)}
    assert scripts <= named, f"root scripts missing from the README's table: {sorted(scripts - named)}"
    assert {"train.py", "cross_validate.py", "zeroshot.py", "evaluate.py", "export.py", "predict.py", "prepare.py"} <= scripts

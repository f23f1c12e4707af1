"""docs/architecture.md's walk through `crossmod predict` is the code's: every step a module that exists, each called
(imported) from a step above it, and the rooms visited in the house's order, never back to one it left."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_direction import ALLOWED, imported_packages

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^\s*\d+\. `(src/crossmod/[\w/]+\.py)`", re.M)


def walk() -> list[Path]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### A walk through crossmod predict", 1)[1].split("\n## ", 1)[0]
    return [ROOT / path for path in STEP.findall(section)]


def package(path: Path) -> str:
    parts = path.relative_to(ROOT / "src" / "crossmod").parts
    return parts[0] if len(parts) > 1 else "cli"


def rank(name: str) -> int:
    """How many packages sit below this one (the command above them all)."""
    return len(ALLOWED) if name == "cli" else len(ALLOWED[name])


def imported_modules(path: Path) -> set[str]:
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def dotted(path: Path) -> str:
    return ".".join(path.relative_to(ROOT / "src").with_suffix("").parts)


def test_the_walk_is_long_enough_and_exists() -> None:
    steps = walk()
    assert len(steps) >= 8
    assert all(step.is_file() for step in steps), [str(s) for s in steps if not s.is_file()]


def test_each_step_is_called_from_a_step_above_it() -> None:
    steps = walk()
    jobs = (ROOT / "src" / "crossmod" / "cli.py").read_text()
    for index, step in enumerate(steps[1:], 1):
        callers = steps[:index]
        name = dotted(step)
        called = any(name in imported_modules(caller) for caller in callers) or (f'"{name}"' in jobs)
        assert called, f"step {index + 1} ({name}) is imported by no step above it"


def wrong_turns(names: list[str]) -> list[str]:
    """What is wrong with a walk through these packages: a step up the house, or a return to a package it left."""
    found = []
    ranks = [rank(name) for name in names]
    if ranks != sorted(ranks, reverse=True):
        found.append(f"goes back up: {names}")
    entered = [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]
    if len(entered) != len(set(entered)):
        found.append(f"returns to a package it left: {names}")
    return found


def test_the_walk_never_returns_to_a_package_it_left() -> None:
    assert not wrong_turns([package(step) for step in walk()])


def test_a_walk_that_goes_back_up_or_returns_is_caught() -> None:
    assert wrong_turns(["cli", "recipes", "runtime", "artifacts"]) == ["goes back up: ['cli', 'recipes', 'runtime', 'artifacts']"]
    assert wrong_turns(["cli", "prompting", "results", "prompting"])[-1].startswith("returns to a package it left")
    assert not wrong_turns(["cli", "recipes", "launch", "artifacts", "inference", "inference", "runtime"])
    assert imported_packages(ROOT / "src" / "crossmod" / "recipes" / "predict.py") >= {"launch", "artifacts", "inference"}

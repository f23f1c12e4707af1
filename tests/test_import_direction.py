"""crossmod's packages import downwards only: data ← evaluation ← models ← the rooms (runtime ← … ← launch) ← recipes.

Read from the source (every `import` and `from … import`, also inside functions), so an import that is
deferred to a function body to dodge a cycle still counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PACKAGE = ROOT / "src" / "crossmod"
# package → the crossmod packages it may import
ROOMS = ("runtime", "inference", "artifacts", "prompting", "results", "training", "reports", "serving", "launch")
ALLOWED = {
    "data": set(),
    "evaluation": {"data"},
    "models": {"data", "evaluation"},
    "runtime": {"data", "evaluation", "models"},  # errors, console, threads, strategies: what every process shares
    "inference": {"data", "evaluation", "models", "runtime"},  # scoring memes through Lightning's predict loop
    "artifacts": {"data", "evaluation", "models", "runtime", "inference"},  # run and export folders, the one loader
    "prompting": {"data", "evaluation", "models", "runtime", "inference", "artifacts"},  # the prompting jobs
    "results": {"data", "evaluation", "models", "runtime", "inference", "artifacts"},  # one run's scores, beside prompting
    "training": {"data", "evaluation", "models", "runtime", "inference", "artifacts", "results"},
    "reports": {"data", "evaluation", "models", "runtime", "inference", "artifacts", "results", "training"},
    "serving": {"data", "evaluation", "models", "runtime", "inference", "artifacts"},  # the culture adapters behind an API
    "launch": {"data", "evaluation", "models", *ROOMS[:-1]},  # preflight checks what any job reads
    "recipes": {"data", "evaluation", "models", *ROOMS},  # the jobs: nothing imports them but the command
}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return {name.split(".")[1] for name in found if name.startswith("crossmod.") and name.split(".")[1] in ALLOWED}


def import_graph() -> dict[str, set[str]]:
    return {package: set().union(*(imported_packages(p) for p in (PACKAGE / package).rglob("*.py"))) - {package} for package in ALLOWED}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_packages_below_it(package: str) -> None:
    upward = import_graph()[package] - ALLOWED[package]
    assert not upward, f"crossmod.{package} imports {sorted(upward)}, which sit above it or beside it"


def test_a_deferred_upward_import_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from crossmod.training.pipeline import run\n    import crossmod.models.module\n")
    assert imported_packages(module) == {"training", "models"}


def test_every_package_is_ranked() -> None:
    """A new package under src/crossmod joins the order above, so its imports are checked too."""
    found = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists() and p.name != "configs"}
    assert found == set(ALLOWED), f"unranked: {sorted(found - set(ALLOWED))}, gone: {sorted(set(ALLOWED) - found)}"

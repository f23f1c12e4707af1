"""docs/DESIGN.md's layout block names the tree as it is: every name listed exists, every package module is listed."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PACKAGES = (
    "src/crossmod",
    "src/crossmod/recipes",
    "src/crossmod/data",
    "src/crossmod/data/sources",
    "src/crossmod/models",
    "src/crossmod/models/backbones",
    "src/crossmod/models/vlm",
    "src/crossmod/models/tiny",
    "src/crossmod/evaluation",
    "src/crossmod/runtime",
    "src/crossmod/inference",
    "src/crossmod/artifacts",
    "src/crossmod/prompting",
    "src/crossmod/results",
    "src/crossmod/training",
    "src/crossmod/training/callbacks",
    "src/crossmod/reports",
    "src/crossmod/serving",
    "src/crossmod/launch",
)


def _layout() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    listed: dict[str, set[str]] = {}
    current = ""
    for line in block.splitlines():
        if not line.strip():
            continue
        head = line.split()[0]
        if not line.startswith(" ") and head.endswith("/"):
            current = head.rstrip("/")
            words = line.split()[1:]
        elif not line.startswith(" "):
            current, words = "", line.split()
        else:
            words = line.split()
        names = {w for w in words if re.fullmatch(r"[\w.]+\.(py|yaml|sbatch|sh)|\w+/", w)}
        listed.setdefault(current, set()).update(names)
    return listed


def test_every_listed_name_exists():
    for directory, names in _layout().items():
        for name in names:
            assert (ROOT / directory / name.rstrip("/")).exists(), f"docs/DESIGN.md lists {directory}/{name}, which does not exist"


def test_every_package_module_is_listed():
    listed = _layout()
    for package in PACKAGES:
        modules = {p.name for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"}
        modules |= {f"{p.name}/" for p in (ROOT / package).iterdir() if p.is_dir() and (p / "__init__.py").exists()}
        missing = modules - listed.get(package, set())
        assert not missing, f"docs/DESIGN.md's layout does not list {sorted(missing)} of {package}/"


# test folders that are not a package's: the attacker's suite, bench/'s logic, the tiny-data builders, the SLURM cluster
NOT_A_PACKAGE = {"bad_input", "bench_logic", "fixtures", "slurm"}


def test_test_folders_mirror_the_packages() -> None:
    packages = {p.name for p in (ROOT / "src" / "crossmod").iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders - NOT_A_PACKAGE <= packages, f"tests/{sorted(folders - NOT_A_PACKAGE - packages)} name no package"

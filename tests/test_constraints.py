"""constraints.txt is the stack `make` installs: it pins every requirement of setup.cfg (install and dev extras)
inside setup.cfg's own range, and the environment running the suite is that stack.

constraints-floor.txt is the other end of the range: the oldest releases of the key dependencies that `make test-floor`
verified. Each package it pins has exactly that pin as its lower bound in setup.cfg, so the floors users read are the
ones tested."""

from __future__ import annotations

import configparser
import os
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import ROOT

# Pinned in constraints-floor.txt without being a requirement of setup.cfg: released in lockstep with the package named
# (lightning requires pytorch-lightning without a version, so pip would pair an old lightning with the newest one).
FLOOR_COMPANIONS = {"pytorch-lightning": "lightning"}


def setup_cfg() -> configparser.ConfigParser:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    return setup


def parse(lines: list[str]) -> list[Requirement]:
    return [Requirement(line) for line in (raw.split("#")[0].strip() for raw in lines) if line]


def requirements() -> list[Requirement]:
    """install_requires and the dev extra, with dev's `crossmod[...]` line expanded into the extras it names."""
    setup = setup_cfg()
    extras = setup["options.extras_require"]
    found = []
    for requirement in parse(setup["options"]["install_requires"].splitlines() + extras["dev"].splitlines()):
        if canonicalize_name(requirement.name) == "crossmod":
            for extra in sorted(requirement.extras):
                found += parse(extras[extra].splitlines())
        else:
            found.append(requirement)
    return found


def all_requirements() -> list[Requirement]:
    """install_requires and every extra: a floor is raised wherever the package is named."""
    setup = setup_cfg()
    lines = setup["options"]["install_requires"].splitlines()
    for extra in setup["options.extras_require"].values():
        lines += extra.splitlines()
    return parse(lines)


def pins(filename: str = "constraints.txt") -> dict[str, str]:
    pinned = {}
    for raw in (ROOT / filename).read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{filename}: {raw!r} is not name==version"
            pinned[canonicalize_name(name)] = version
    return pinned


def test_every_requirement_is_pinned_inside_its_range():
    pinned = pins()
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} (setup.cfg) has no pin in constraints.txt: run make constraints"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]} outside setup.cfg's {requirement}"
        )


def test_setup_cfg_floors_are_the_verified_floor_stack():
    floors = pins("constraints-floor.txt")
    named = {}
    for requirement in all_requirements():
        named.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    for name, pin in floors.items():
        if name in FLOOR_COMPANIONS:
            companion = canonicalize_name(FLOOR_COMPANIONS[name])
            assert floors.get(companion) == pin, f"constraints-floor.txt: {name}=={pin} must equal its companion {companion}'s pin"
            continue
        assert name in named, f"constraints-floor.txt pins {name}, which setup.cfg does not require"
        for requirement in named[name]:
            lower = [spec.version for spec in requirement.specifier if spec.operator == ">="]
            assert lower and Version(lower[0]) == Version(pin), (
                f"setup.cfg's {requirement} must have the floor constraints-floor.txt verified: {requirement.name}>={pin}"
            )
            assert requirement.specifier.contains(pin, prereleases=True), f"setup.cfg's {requirement} excludes its own floor {pin}"


def test_the_suite_runs_on_the_pinned_stack():
    """make test runs on constraints.txt, make test-floor on constraints-floor.txt (CROSSMOD_CONSTRAINTS names it)."""
    filename = os.environ.get("CROSSMOD_CONSTRAINTS", "constraints.txt")
    pinned = pins(filename)
    target = "make test-floor" if filename == "constraints-floor.txt" else "make env"
    for name in ("torch", "torchvision", "lightning", "transformers", "peft", "deepspeed", "webdataset", "hydra-core"):
        installed = metadata.version(name)
        assert installed == pinned[name], f"{name} {installed} is installed, {filename} pins {pinned[name]}: run {target}"

"""constraints.txt is the stack `make` installs: it pins every requirement of setup.cfg (install and dev extras)
inside setup.cfg's own range, and the environment running the suite is that stack."""

from __future__ import annotations

import configparser
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT


def requirements() -> list[Requirement]:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    lines = setup["options"]["install_requires"].splitlines() + setup["options.extras_require"]["dev"].splitlines()
    return [Requirement(line) for line in (raw.split("#")[0].strip() for raw in lines) if line]


def pins() -> dict[str, str]:
    pinned = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {raw!r} is not name==version"
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


def test_the_suite_runs_on_the_pinned_stack():
    pinned = pins()
    for name in ("torch", "torchvision", "lightning", "transformers", "peft", "deepspeed", "webdataset", "hydra-core"):
        installed = metadata.version(name)
        assert installed == pinned[name], f"{name} {installed} is installed, constraints.txt pins {pinned[name]}: run make env"

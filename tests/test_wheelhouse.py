"""scripts/wheelhouse.py: exactly the wheels a node's base image lacks, offline and within its budget.

No index is used: the node's base is this environment's own packages minus a few crossmod needs, and the wheels those
few come from are repacked from this environment's installed files (their RECORD), as a local `--find-links` folder."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from scripts.wheelhouse import Target, WheelhouseError, compatible_platforms, outdated, read_base, requirements_of, stand_in_version
from tests.conftest import ROOT
from tests.conftest import offline_pip_env as _offline_env

# crossmod's requirements (direct or not) that the simulated node lacks: small, pure Python
MISSING = ("webdataset", "braceexpand", "hydra-core", "omegaconf", "antlr4-python3-runtime", "num2words", "docopt")
OUTDATED = ("krippendorff", "0.5.1")
UNVERSIONED = "rich"  # on the node, listed without a version: taken as present  # on the node, but older than setup.cfg's krippendorff>=0.6


def repack(distribution: metadata.Distribution, folder: Path) -> Path:
    """The installed distribution as a wheel again: its files under site-packages, its own METADATA and WHEEL tags."""
    wheel_text = distribution.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")]
    python, abi, platform = (".".join(sorted({tag.split("-")[i] for tag in tags})) for i in range(3))
    name, version = distribution.metadata["Name"].replace("-", "_"), distribution.version
    path = folder / f"{name}-{version}-{python}-{abi}-{platform}.whl"
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in distribution.files or []:
            relative = str(file)
            if relative.startswith("..") or "__pycache__" in relative or relative.endswith(".dist-info/RECORD"):
                continue
            data = Path(file.locate()).read_bytes()
            archive.writestr(relative, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{relative},sha256={digest},{len(data)}")
        info = next(str(f).split("/")[0] for f in distribution.files if str(f).endswith(".dist-info/METADATA"))
        archive.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> dict:
    """A node's base freeze (this environment without MISSING, with OUTDATED's old version) and a local index."""
    folder = tmp_path_factory.mktemp("node")
    index = folder / "index"
    index.mkdir()
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    for name in (*MISSING, OUTDATED[0], UNVERSIONED):
        repack(installed[name], index)
    lines = [f"{name}=={d.version}" for name, d in sorted(installed.items()) if name not in (*MISSING, OUTDATED[0], UNVERSIONED)]
    base = folder / "base.txt"
    base.write_text(
        "\n".join([*lines, f"{OUTDATED[0]}=={OUTDATED[1]}", "# a comment, then a package listed without its version", UNVERSIONED]) + "\n"
    )
    return {"base": base, "index": index, "folder": folder}


def _wheelhouse(node: dict, out: Path, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "scripts" / "wheelhouse.py"), "--base", str(node["base"]), "--out", str(out)]
    command += ["--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", *options]
    command += ["--", "--no-index", "--find-links", str(node["index"])]
    return subprocess.run(command, cwd=node["folder"], env=_offline_env(), capture_output=True, text=True, timeout=900)


def test_the_wheelhouse_holds_exactly_what_the_base_lacks_and_installs_offline(node, tmp_path):
    out = tmp_path / "wheelhouse"
    done = _wheelhouse(node, out)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    names = {canonicalize_name(row["file"].split("-")[0]): row["reason"] for row in manifest["wheels"]}
    assert set(names) == {"crossmod", *MISSING, OUTDATED[0]}
    assert names[OUTDATED[0]] == "base has 0.5.1, crossmod needs >=0.6"
    assert names["webdataset"] == "not in the base" and names["crossmod"] == "crossmod itself"
    assert manifest["assumed_present_unversioned"] == [UNVERSIONED] and manifest["offline_install_resolves"]
    assert sorted(p.name for p in out.glob("*.whl")) == sorted(row["file"] for row in manifest["wheels"])
    assert "MiB" in done.stdout and "not in the base" in done.stdout
    # on the node: an offline install into a scratch target, then the missing packages import from it
    target = tmp_path / "site"
    install = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--target",
        str(target),
        *map(str, out.glob("*.whl")),
    ]
    subprocess.run(install, env=_offline_env(), check=True, capture_output=True, timeout=600)
    probe = "import webdataset, krippendorff, num2words, hydra; print(webdataset.__file__, krippendorff.__file__)"
    imported = subprocess.run(
        [sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True, timeout=300
    )
    assert imported.returncode == 0, imported.stderr
    assert all(path.startswith(str(target)) for path in imported.stdout.split())
    # a package crossmod needs in the wheelhouse, nothing of the base's, and no build folder left in the checkout
    assert not (ROOT / "build").exists()


def test_over_its_budget_the_wheelhouse_writes_nothing(node, tmp_path):
    out = tmp_path / "wheelhouse"
    done = _wheelhouse(node, out, "--budget-mib", "0.1")
    assert done.returncode == 2
    assert "refused:" in done.stderr and "over the budget of 0.1 MiB" in done.stderr
    assert not out.exists()


def test_a_folder_that_is_not_a_wheelhouse_is_never_replaced(node, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("kept")
    done = _wheelhouse(node, out)
    assert done.returncode == 2 and "no manifest.json" in done.stderr
    assert (out / "notes.txt").read_text() == "kept"


def test_base_freezes_are_read_strictly(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("Torch==2.11.0+cu130\nhydra_core==1.3.2\nrich\n")
    assert read_base(freeze) == {"torch": "2.11.0+cu130", "hydra-core": "1.3.2", "rich": None}
    freeze.write_text("torch==2.11.0\nmypkg @ file:///build/mypkg\n")
    with pytest.raises(WheelhouseError, match=r"freeze.txt:2: 'mypkg @ file:///build/mypkg' is not `name==version`"):
        read_base(freeze)


def test_stand_ins_keep_the_base_version_for_every_requirement():
    from packaging.specifiers import SpecifierSet

    for version, spec in [("2.11.0", ">=2.11.0"), ("2.11.0+cu130", "==2.11.0"), ("5.17.0", "<5.18"), ("1.3.2", "~=1.3")]:
        assert SpecifierSet(spec).contains(stand_in_version(version))
    assert stand_in_version("2.11.0+cu130") == "2.11.0+cu130.crossmodbase"


def test_the_recorded_gpu_node_needs_a_newer_transformers(tmp_path):
    """The recorded GPU node image (bench/bases/gpu_node.txt) holds transformers 5.17.0, below setup.cfg's range."""
    wheel = tmp_path / "crossmod-0.1.0-py3-none-any.whl"
    requires = ["transformers>=5.18.0", "torch>=2.11.0", "wandb>=0.17; extra == 'wandb'", "deepspeed>=0.17; extra == 'deepspeed'"]
    meta = "Metadata-Version: 2.1\nName: crossmod\nVersion: 0.1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    meta += "Provides-Extra: wandb\nProvides-Extra: deepspeed\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("crossmod-0.1.0.dist-info/METADATA", meta)
    target = Target("3.12", compatible_platforms("manylinux_2_28_x86_64"))
    wanted = requirements_of(wheel, ["deepspeed"], target)
    assert set(wanted) == {"transformers", "torch", "deepspeed"}
    base = read_base(ROOT / "bench" / "bases" / "gpu_node.txt")
    assert outdated(base, wanted) == {"transformers": "base has 5.17.0, crossmod needs >=5.18.0"}
    with pytest.raises(WheelhouseError, match="no extra optuna in crossmod"):
        requirements_of(wheel, ["optuna"], target)

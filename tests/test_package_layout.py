"""crossmod installs one importable name: the wheel holds `crossmod/` (code and its Hydra configs) and its metadata,
nothing else at top level, so a user's own `models/` or `training/` package never meets crossmod's."""

from __future__ import annotations

import zipfile

from scripts.wheelhouse import build_own_wheel
from tests.conftest import ROOT


def test_the_wheel_installs_crossmod_and_nothing_else_at_top_level(tmp_path):
    wheel = build_own_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"crossmod", "crossmod-0.1.0.dist-info"}, sorted(top_level)
    # the configs every job composes ship inside, so an installed crossmod composes them outside a checkout
    assert {"crossmod/configs/train.yaml", "crossmod/configs/experiment/qwen_lora_cv.yaml", "crossmod/configs/model/vlm.yaml"} <= set(names)
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    # every module of the source tree is in the wheel (a folder without __init__.py is no package to setuptools' find)
    source = {str(p.relative_to(ROOT / "src")) for p in (ROOT / "src" / "crossmod").rglob("*.py") if "__pycache__" not in p.parts}
    assert source - set(names) == set(), sorted(source - set(names))
    # the license setup.cfg declares travels in the wheel's metadata, word for word the checkout's LICENSE
    (license_name,) = [name for name in names if name.startswith("crossmod-0.1.0.dist-info/") and "LICENSE" in name]
    assert zipfile.ZipFile(wheel).read(license_name) == (ROOT / "LICENSE").read_bytes()


def test_the_license_file_is_the_one_setup_cfg_declares():
    import configparser

    metadata = configparser.ConfigParser()
    metadata.read(ROOT / "setup.cfg")
    assert metadata["metadata"]["license"] == "Apache-2.0" and metadata["metadata"]["license_files"].strip() == "LICENSE"
    text = (ROOT / "LICENSE").read_text()
    assert text.split("\n")[1].strip() == "Version 2.0, January 2004" and "Apache License" in text.split("\n")[0]
    assert "END OF TERMS AND CONDITIONS" in text


def test_every_folder_of_code_is_a_package():
    """An implicit namespace package inside crossmod is left out of the wheel by setuptools' find; each has an __init__."""
    folders = {p.parent for p in (ROOT / "src" / "crossmod").rglob("*.py")}
    assert [str(f) for f in folders if not (f / "__init__.py").is_file()] == []

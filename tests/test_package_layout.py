"""crossmod installs one importable name: the wheel holds `crossmod/` (code and its Hydra configs) and its metadata,
nothing else at top level, so a user's own `models/` or `training/` package never meets crossmod's."""

from __future__ import annotations

import zipfile

from scripts.wheelhouse import build_own_wheel


def test_the_wheel_installs_crossmod_and_nothing_else_at_top_level(tmp_path):
    wheel = build_own_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"crossmod", "crossmod-0.1.0.dist-info"}, sorted(top_level)
    # the configs every job composes ship inside, so an installed crossmod composes them outside a checkout
    assert {"crossmod/configs/train.yaml", "crossmod/configs/experiment/qwen_lora_cv.yaml", "crossmod/configs/model/vlm.yaml"} <= set(names)
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]

"""`cross_validate.py cv.zeroshot=<experiment>`: the zero-shot run is launched as `crossmod zeroshot` with the folds' memes and base model."""

from __future__ import annotations

import subprocess
from pathlib import Path

from crossmod.recipes.cross_validate import zeroshot_command
from tests.conftest import ROOT, scaled


def test_cv_zeroshot_launches_zeroshot_py_with_the_folds_memes_and_base_model(tmp_path: Path):
    overrides = [
        *("cv.per_culture=true", "cv.zeroshot=qwen_zeroshot", "num_folds=3", "trainer.max_epochs=1", "~data.heads.MX"),
        *("data.raw_dir=/memes", "model.name_or_path=/base", "+zeroshot.max_new_tokens=4"),
    ]
    command = zeroshot_command(overrides, "qwen_zeroshot", tmp_path / "zeroshot_run")
    assert command[1:4] == ["-m", "crossmod", "zeroshot"]  # the installed crossmod's job, wherever it runs from
    assert command[4:] == [
        "experiment=qwen_zeroshot", "~data.heads.MX", "data.raw_dir=/memes", "model.name_or_path=/base", "zeroshot.max_new_tokens=4",
        f"hydra.run.dir={tmp_path / 'zeroshot_run'}",
    ]  # fmt: skip
    # the command composes as given (Hydra prints the job's config without running it)
    composed = subprocess.run([*command, "--cfg", "job"], cwd=ROOT, capture_output=True, text=True, timeout=scaled(120), check=True).stdout
    assert "name: qwen_zeroshot" in composed and "raw_dir: /memes" in composed and "max_new_tokens: 4" in composed
    assert "    DE:\n" in composed and "    MX:\n" not in composed  # the same heads as the folds


def test_multi_head_is_cross_validated_beside_the_cultures_on_the_same_folds(tmp_path: Path):
    """`cv.per_culture=true cv.multi_head=true`: FT-<culture> runs and the every-head model in one folder, so one report
    holds Table 11 with its multi-head row; the launcher's own keys never reach the fold runs."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from crossmod.recipes import cross_validate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["cv.per_culture=true", "cv.multi_head=true", "name=m"])
    planned = cross_validate.models(cfg, tmp_path)
    assert [name for name, _, _ in planned] == ["m-FT-US", "m-FT-DE", "m-FT-MX", "m-FT-IN", "m-FT-CN", "m"]
    name, extra, runs_dir = planned[-1]
    assert extra == [] and runs_dir == tmp_path / "multi-head"  # every head kept, same folder as the FT runs
    command = cross_validate.fold_command(["cv.per_culture=true", "cv.multi_head=true", "seed=3"], 1, 3, runs_dir)
    assert "seed=3" in command and not any(a.startswith(("cv.per_culture", "cv.multi_head")) for a in command)

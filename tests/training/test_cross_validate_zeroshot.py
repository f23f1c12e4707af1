"""`cross_validate.py cv.zeroshot=<experiment>`: the zero-shot run is launched through `zeroshot.py` with the folds' memes and base model."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cross_validate import zeroshot_command
from tests.conftest import ROOT, scaled


def test_cv_zeroshot_launches_zeroshot_py_with_the_folds_memes_and_base_model(tmp_path: Path):
    overrides = [
        *("cv.per_culture=true", "cv.zeroshot=qwen_zeroshot", "num_folds=3", "trainer.max_epochs=1", "~data.heads.MX"),
        *("data.raw_dir=/memes", "model.name_or_path=/base", "+zeroshot.max_new_tokens=4"),
    ]
    command = zeroshot_command(overrides, "qwen_zeroshot", tmp_path / "zeroshot_run")
    assert command[1] == str(ROOT / "zeroshot.py")
    assert command[2:] == [
        "experiment=qwen_zeroshot", "~data.heads.MX", "data.raw_dir=/memes", "model.name_or_path=/base", "zeroshot.max_new_tokens=4",
        f"hydra.run.dir={tmp_path / 'zeroshot_run'}",
    ]  # fmt: skip
    # the command composes as given (Hydra prints the job's config without running it)
    composed = subprocess.run([*command, "--cfg", "job"], cwd=ROOT, capture_output=True, text=True, timeout=scaled(120), check=True).stdout
    assert "name: qwen_zeroshot" in composed and "raw_dir: /memes" in composed and "max_new_tokens: 4" in composed
    assert "    DE:\n" in composed and "    MX:\n" not in composed  # the same heads as the folds

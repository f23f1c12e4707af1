"""The vision cache through `train.py`: a LoRA run over a frozen tower encodes each image once (its first epoch and
the memes validation first shows), reads it afterwards, says so, and scores what the same run without the cache
scores; a second run on two DDP ranks reads everything the first stored."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import SMALL_DATA

pytestmark = pytest.mark.slow

RUN = (
    "model=vlm",
    "model.preprocessor.image_size=56",
    "data.batch_size=8",
    "data.num_workers=0",
    "fold=0",
    "num_folds=3",
    "trainer.max_epochs=2",
    "print_table=false",
    *SMALL_DATA,
)
REPORT = re.compile(r"\[(\w+)\] vision cache (\S+): (\d+) images read, (\d+) encoded, (\d+) written .*the folder holds (\d+) images")


@pytest.fixture(scope="module")
def tiny_qwen(data_dir: Path) -> str:
    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))


def probabilities(run: Path, split: str) -> dict[tuple[str, str], float]:
    return {(r["id"], r["head"]): float(r["probability"]) for r in csv.DictReader(open(run / "predictions" / f"{split}.csv"))}


def reports(output: str) -> dict[str, tuple[int, ...]]:
    return {m[1]: tuple(int(g) for g in m.groups()[2:]) for m in REPORT.finditer(output)}


def test_a_cached_run_scores_what_the_tower_scores_and_encodes_each_image_once(train_run, tiny_qwen, tmp_path):
    model = f"model.name_or_path={tiny_qwen}"
    train_run(*RUN, model, "model.fusion.vision_cache=false", env={"CROSSMOD_RUN_ID": "tower"})
    cache = tmp_path / "cache"
    cached = train_run(*RUN, model, f"model.fusion.vision_cache_dir={cache}", env={"CROSSMOD_RUN_ID": "cached"})
    runs = train_run.log_dir / "synthetic_vlm" / "runs"
    for split in ("val", "test"):
        tower, read = probabilities(runs / "tower", split), probabilities(runs / "cached", split)
        assert tower.keys() == read.keys() and max(abs(tower[k] - read[k]) for k in tower) < 1e-5
    seen = reports(cached.stdout + cached.stderr)
    assert set(seen) == {"fit", "validate", "test"}, cached.stdout[-3000:]
    assert seen["validate"][1] == 0  # the best checkpoint's validation reads every image
    read, encoded, written, held = seen["fit"]
    assert encoded >= written == held > 0 and read >= written  # epoch 2 and validation read what epoch 1 encoded
    read, encoded, written, held_after_test = seen["test"]
    assert written == held_after_test - held and read + encoded > 0  # the held-out fold's images join the cache
    assert held_after_test == len(list(cache.glob("*/*/*.safetensors")))

    # a second run, on two DDP ranks, reads every image the first one stored and encodes none
    again = train_run(*RUN, model, "trainer=ddp_cpu", f"model.fusion.vision_cache_dir={cache}", env={"CROSSMOD_RUN_ID": "again"})
    assert {stage: counts[1] for stage, counts in reports(again.stdout + again.stderr).items()} == {"fit": 0, "validate": 0, "test": 0}
    assert not list(cache.glob("*/*/.*.partial"))  # no staging file left behind

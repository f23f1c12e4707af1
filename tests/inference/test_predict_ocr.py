"""predict.py on a folder of meme images with a model that reads text: without a caption source it stops
and says how to give one; with `ocr=rapidocr` the captions are read off the images, cached, written beside
the scores; `allow_missing=[text]` scores them on empty text, with a warning."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, SMALL_DATA, scaled
from tests.data.test_ocr import CAPTIONS, meme
from tests.zygote import run_python

pytestmark = pytest.mark.slow


def _predict(*args: str) -> subprocess.CompletedProcess:
    return run_python([sys.executable, str(ROOT / "predict.py"), *args], cwd=ROOT, capture_output=True, text=True, timeout=scaled(600))


def test_images_alone_need_ocr_or_an_explicit_allowance(train_run, tmp_path):
    train_run(*SMALL_DATA, "debug=limit", env={"CROSSMOD_RUN_ID": "ocr"})
    run = train_run.log_dir / "synthetic_concat" / "runs" / "ocr"
    export = run_python(
        [sys.executable, str(ROOT / "export.py"), f"run={run}", "culture=DE", f"out={tmp_path / 'export'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert export.returncode == 0, export.stderr[-3000:]
    images = tmp_path / "memes"
    images.mkdir()
    for lang, (top, bottom) in CAPTIONS.items():
        (images / f"{lang}.jpg").write_bytes(meme(top, bottom))
    common = (f"adapters={tmp_path / 'export' / 'DE'}", f"inputs={images}")

    refused = _predict(*common, f"out={tmp_path / 'none.jsonl'}")
    assert refused.returncode == 1 and not (tmp_path / "none.jsonl").exists()
    assert "3 of 3 memes have no text" in refused.stderr and "ocr=rapidocr" in refused.stderr and "allow_missing=[text]" in refused.stderr

    cache = tmp_path / "cache" / "ocr.jsonl"
    read = _predict(*common, "ocr=rapidocr", f"ocr_cache={cache}", f"out={tmp_path / 'ocr.jsonl'}")
    assert read.returncode == 0, read.stderr[-3000:]
    rows = {row["id"]: row for row in map(json.loads, open(tmp_path / "ocr.jsonl"))}
    assert len(rows) == 3 and all("DE_probability" in row for row in rows.values())
    for row in rows.values():
        lang = next(lang for lang in CAPTIONS if row["id"].endswith(lang))
        assert "\n" in row["ocr_text"] and CAPTIONS[lang][1].split()[0] in row["ocr_text"]
    assert len(cache.read_text().splitlines()) == 3
    again = _predict(*common, "ocr=rapidocr", f"ocr_cache={cache}", f"out={tmp_path / 'again.jsonl'}")
    assert "3 captions read off their images with rapidocr (3 from the cache" in again.stdout
    assert len(cache.read_text().splitlines()) == 3

    allowed = _predict(*common, "allow_missing=[text]", f"out={tmp_path / 'empty.jsonl'}")
    assert allowed.returncode == 0 and "3 memes scored without text (allow_missing)" in allowed.stdout

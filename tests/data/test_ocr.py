"""Captions read off meme images (RapidOCR's PP-OCR models from the wheel), their cache, and the check that
stops a model from scoring memes that lack an input it reads."""

from __future__ import annotations

import json
import shutil

import jiwer
import numpy as np
import pytest
from PIL import ImageFont

from bench.rendered_memes import SCRIPT, font_file, render
from crossmod.data.ocr import CaptionReader, RapidOcr, TesseractOcr, caption
from crossmod.data.predict_inputs import check_inputs, missing_inputs
from crossmod.data.synthetic import random_scene, render_meme

CAPTIONS = {  # top and bottom text of the memes test_predict_ocr scores
    "en": ("Germany!", "always fun to watch"),
    "de": ("Deutschland!", "immer lustig zu sehen"),
    "es": ("¡México!", "siempre divertido de ver"),
}
MAX_CER = {"Latin": 0.10, "Han": 0.20, "Devanagari": 0.40}  # bench/ocr.py measures the rates on more memes


def meme(top: str, bottom: str, size: int = 512) -> bytes:
    """White outlined top and bottom text on a picture, drawn as the synthetic generator draws memes."""
    scene = random_scene(np.random.default_rng(0), 0)
    font = ImageFont.truetype(str(font_file("Latin")), size // 13)
    return render_meme(scene, f"{top} | {bottom}", size, font, stroke_width=3, margin=10)


@pytest.fixture(scope="module")
def engine() -> RapidOcr:
    return RapidOcr(["en", "de", "es", "zh"])


@pytest.mark.parametrize("lang", ["en", "de", "es", "zh"])
def test_rapidocr_reads_latin_and_han_captions_top_then_bottom(engine, lang):
    truths, texts = [], []
    for index in (4, 9):  # captions bench/ocr.py scores, not the ones its settings were chosen on
        image, truth = render(lang, index, seed=7)
        text = caption(engine.lines(image))
        assert text.count("\n") == 1, text  # top and bottom text on their own lines, as dataset captions keep them
        truths.append(truth)
        texts.append(text)
    # CER as bench/ocr.py defines it: edits over all memes of the language / their reference characters
    assert jiwer.cer(truths, texts) <= MAX_CER[SCRIPT[lang]], (truths, texts)


def test_tesseract_reads_devanagari_captions():
    """The wheel's PP-OCR models have no Devanagari; Tesseract with its Hindi data is the engine for it."""
    try:
        engine = TesseractOcr(["hi"])
    except (ImportError, FileNotFoundError) as missing:  # the program, pytesseract or the hin language data
        pytest.skip(f"Tesseract cannot read Hindi here: {missing}")
    image, truth = render("hi", 5, seed=0)
    text = caption(engine.lines(image))
    assert jiwer.cer(truth, text) <= MAX_CER["Devanagari"], (truth, text)


def test_tesseract_names_missing_language_data(monkeypatch):
    pytesseract = pytest.importorskip("pytesseract")
    if shutil.which("tesseract") is None:
        pytest.skip("the tesseract program is not installed (apt-get install tesseract-ocr)")
    monkeypatch.setattr(pytesseract, "get_languages", lambda config="": ["eng", "osd"])
    with pytest.raises(
        FileNotFoundError,
        match=r"language data \['hin', 'chi_sim'\] is not installed: apt-get install tesseract-ocr-hin tesseract-ocr-chi-sim",
    ):
        TesseractOcr(["en", "hi", "zh"])


def test_boxes_form_lines_top_to_bottom_left_to_right_spaces_squeezed():
    boxes = [(400.0, 440.0, 300.0, "text"), (5.0, 40.0, 10.0, " top "), (200.0, 230.0, 0.0, ""), (404.0, 436.0, 20.0, "bottom  of")]
    assert caption(boxes) == "top\nbottom of text"


def test_the_cache_reads_each_image_once_and_skips_a_damaged_line(engine, tmp_path):
    cache = tmp_path / "ocr.jsonl"
    image = meme(*CAPTIONS["en"])
    first = CaptionReader(engine, cache)
    text = first.read(image)
    assert first.read(image) == text and (first.reads, first.hits) == (1, 1)
    again = CaptionReader(engine, cache)  # a later run
    assert again.read(image) == text and (again.reads, again.hits) == (0, 1)
    (entry,) = [json.loads(line) for line in cache.read_text().splitlines()]
    assert entry["key"].startswith("rapidocr[det_unclip_ratio=2.5,use_cls=False]:en+de+es+zh:") and entry["text"] == text
    cache.write_text(cache.read_text() + "not json\n")
    damaged = CaptionReader(engine, cache)  # the damaged line is skipped and counted, the good one kept
    assert damaged.skipped_lines == [2] and damaged.read(image) == text and damaged.hits == 1


def test_memes_lacking_what_the_model_reads_stop_the_run_with_the_way_out():
    records = [{"id": "a", "text": "", "image": b"x"}, {"id": "b", "text": "words", "image": None}, {"id": "c", "text": " ", "image": b"y"}]
    assert missing_inputs(records, frozenset({"text", "image"})) == {"text": ["a", "c"], "image": ["b"]}
    assert missing_inputs(records, frozenset()) == {}
    with pytest.raises(ValueError, match=r"2 of 3 memes have no text \(a, c\), and this model reads the text: run with ocr=rapidocr"):
        check_inputs(records, frozenset({"text"}))
    with pytest.raises(ValueError, match=r"1 of 3 memes have no image \(b\).*allow_missing=\[image\]"):
        check_inputs(records, frozenset({"image"}))
    assert check_inputs(records, frozenset({"text"}), frozenset({"text"})) == {"text": ["a", "c"]}


def test_a_dataset_without_text_is_converted_with_captions_read_off_its_images(tmp_path, engine):
    """Hateful Memes layout, two memes with their text missing: without OCR the conversion names the first;
    with `ocr` their captions come from the images, marked as such, and the shards get their own fingerprint."""
    from crossmod.data.memes import MemeDataModule
    from crossmod.data.shards import read_samples
    from tests.data.sources.helpers import source
    from tests.data.sources.layouts import hateful_memes, write_jsonl

    raw = hateful_memes(tmp_path / "raw", train=4, dev=2, test=2)
    items = [json.loads(line) for line in (raw / "train.jsonl").read_text().splitlines()]
    for item, lang in zip(items[:2], ("en", "de")):
        del item["text"]
        (raw / item["img"]).write_bytes(meme(*CAPTIONS[lang]))
    write_jsonl(raw / "train.jsonl", items)

    def datamodule(**ocr):
        src = source("hateful_memes", raw)
        return MemeDataModule(heads=src.heads, source=src, shard_root=str(tmp_path / "shards"), **ocr)

    plain = datamodule()
    with pytest.raises(Exception, match=rf"empty or missing 'text' for id {items[0]['id']}"):
        plain.conversion.convert()
    read = datamodule(ocr={"engine": "rapidocr", "langs": ["en", "de"], "cache": str(tmp_path / "ocr.jsonl")})
    assert read.dataset_dir != plain.dataset_dir  # the engine is part of the shards' fingerprint
    read.conversion.convert()
    samples = {s["id"]: s for s in read_samples(read.dataset_dir)}
    for item, lang in zip(items[:2], ("en", "de")):
        sample = samples[f"hateful_memes/{item['id']}"]
        assert jiwer.cer("\n".join(CAPTIONS[lang]), sample["text"]) <= 0.10, sample["text"]
        assert sample["meta"]["text_source"] == engine.identity
    untouched = samples[f"hateful_memes/{items[2]['id']}"]
    assert untouched["text"] == items[2]["text"] and "text_source" not in untouched["meta"]
    assert len((tmp_path / "ocr.jsonl").read_text().splitlines()) == 2

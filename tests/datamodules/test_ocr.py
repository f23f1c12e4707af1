"""Captions read off meme images (RapidOCR's PP-OCR models from the wheel), their cache, and the check that
stops a model from scoring memes that lack an input it reads."""

from __future__ import annotations

import io
import json

import jiwer
import pytest
from PIL import Image, ImageDraw, ImageFont

from datamodules.ocr import CaptionReader, RapidOcr, caption
from datamodules.predict_inputs import check_inputs, missing_inputs

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
CAPTIONS = {
    "en": ("Germany!", "always fun to watch"),
    "de": ("Deutschland!", "immer lustig zu sehen"),
    "es": ("¡México!", "siempre divertido de ver"),
}


def meme(top: str, bottom: str, size: int = 512) -> bytes:
    """White outlined top and bottom text on a picture, as memes are drawn."""
    image = Image.new("RGB", (size, size), (70, 110, 150))
    draw = ImageDraw.Draw(image)
    draw.ellipse((150, 150, 360, 360), fill=(200, 60, 40))
    font = ImageFont.truetype(FONT, size // 13)
    draw.text((size / 2, 10), top, font=font, fill="white", anchor="ma", stroke_width=3, stroke_fill="black")
    draw.text((size / 2, size - 10), bottom, font=font, fill="white", anchor="md", stroke_width=3, stroke_fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def engine() -> RapidOcr:
    return RapidOcr(["en", "de", "es"])


@pytest.mark.parametrize("lang", sorted(CAPTIONS))
def test_latin_captions_are_read_top_then_bottom(engine, lang):
    top, bottom = CAPTIONS[lang]
    text = caption(engine.lines(meme(top, bottom)))
    assert "\n" in text  # top and bottom text on their own lines, as dataset captions keep them
    # untuned PP-OCR (the wheel's defaults) drops some spaces between Latin words; bench/ocr.py measures the rates
    assert jiwer.cer(f"{top}\n{bottom}", text) <= 0.20, text


def test_lines_are_ordered_by_height_and_spaces_squeezed():
    assert caption([(400.0, "bottom  text"), (5.0, " top "), (200.0, "")]) == "top\nbottom text"


def test_the_cache_reads_each_image_once_and_refuses_a_damaged_file(engine, tmp_path):
    cache = tmp_path / "ocr.jsonl"
    image = meme(*CAPTIONS["en"])
    first = CaptionReader(engine, cache)
    text = first.read(image)
    assert first.read(image) == text and (first.reads, first.hits) == (1, 1)
    again = CaptionReader(engine, cache)  # a later run
    assert again.read(image) == text and (again.reads, again.hits) == (0, 1)
    (entry,) = [json.loads(line) for line in cache.read_text().splitlines()]
    assert entry["key"].startswith("rapidocr:en+de+es:") and entry["text"] == text
    cache.write_text(cache.read_text() + "not json\n")
    with pytest.raises(ValueError, match=r"ocr.jsonl:2: not an OCR cache line"):
        CaptionReader(engine, cache)


def test_memes_lacking_what_the_model_reads_stop_the_run_with_the_way_out():
    records = [{"id": "a", "text": "", "image": b"x"}, {"id": "b", "text": "words", "image": None}, {"id": "c", "text": " ", "image": b"y"}]
    assert missing_inputs(records, frozenset({"text", "image"})) == {"text": ["a", "c"], "image": ["b"]}
    assert missing_inputs(records, frozenset()) == {}
    with pytest.raises(ValueError, match=r"2 of 3 memes have no text \(a, c\), and this model reads the text: run with ocr=rapidocr"):
        check_inputs(records, frozenset({"text"}))
    with pytest.raises(ValueError, match=r"1 of 3 memes have no image \(b\).*allow_missing=\[image\]"):
        check_inputs(records, frozenset({"image"}))
    assert check_inputs(records, frozenset({"text"}), frozenset({"text"})) == {"text": ["a", "c"]}

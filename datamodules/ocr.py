"""Captions read off meme images, for memes that arrive as pictures only.

Memes in the wild carry their text inside the image; the studies' datasets ship it because someone ran
OCR or typed it. Two offline engines:
- `rapidocr`: PP-OCR detection + recognition (ONNX models inside the `rapidocr-onnxruntime` wheel, so a
  fresh environment has it with no download). Its recogniser reads Chinese and Latin script; Devanagari
  is outside its character set (bench/ocr.py reports what that costs).
- `tesseract`: Tesseract 5 through `pytesseract`, with the system's language data (`apt-get install
  tesseract-ocr tesseract-ocr-deu tesseract-ocr-spa tesseract-ocr-hin tesseract-ocr-chi-sim`).

Recognised lines are ordered top to bottom and joined with a line break, the way dataset captions keep
top and bottom text apart (`datamodules.sources.readers` normalisation), then normalised the same way.
Results are cached per (engine, languages, sha256 of the image bytes) in a JSON-lines file, so a folder
scored twice is read once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from PIL import Image

ENGINES = ("rapidocr", "tesseract")
TESSERACT_LANGS = {"en": "eng", "de": "deu", "es": "spa", "hi": "hin", "zh": "chi_sim"}


class OcrEngine(Protocol):
    name: str
    langs: tuple[str, ...]

    def lines(self, image: bytes) -> list[tuple[float, str]]:
        """Recognised text lines with their vertical position (top of the line box, pixels)."""
        ...


class RapidOcr:
    """PP-OCR (det + rec) with the models shipped in `rapidocr-onnxruntime`."""

    name = "rapidocr"

    def __init__(self, langs: Iterable[str], **options: float) -> None:
        """`options`: RapidOCR's own settings by its keyword names (e.g. `det_unclip_ratio`, how far text boxes
        are grown before recognition); none by default, so the wheel's configuration is what runs."""
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as error:
            raise ImportError(f"ocr=rapidocr needs the rapidocr-onnxruntime package ({error}); pip install rapidocr-onnxruntime") from None
        self.langs = tuple(langs)
        self.engine = RapidOCR(**options)

    def lines(self, image: bytes) -> list[tuple[float, str]]:
        found, _ = self.engine(image)
        return [(min(point[1] for point in box), text) for box, text, _score in found or []]


class TesseractOcr:
    """Tesseract 5 with the system's language data for the requested languages."""

    name = "tesseract"

    def __init__(self, langs: Iterable[str]) -> None:
        try:
            import pytesseract
        except ImportError as error:
            raise ImportError(f"ocr=tesseract needs the pytesseract package ({error}); pip install pytesseract") from None
        if shutil.which("tesseract") is None:
            raise FileNotFoundError("ocr=tesseract needs the tesseract program: apt-get install tesseract-ocr (README: Reading captions)")
        self.langs = tuple(langs)
        unknown = [lang for lang in self.langs if lang not in TESSERACT_LANGS]
        if unknown:
            raise ValueError(f"ocr=tesseract: no language data name for {unknown}; known: {sorted(TESSERACT_LANGS)}")
        installed = set(pytesseract.get_languages(config=""))
        missing = [TESSERACT_LANGS[lang] for lang in self.langs if TESSERACT_LANGS[lang] not in installed]
        if missing:
            packages = " ".join(f"tesseract-ocr-{code.replace('_', '-').lower()}" for code in missing)
            raise FileNotFoundError(f"ocr=tesseract: language data {missing} is not installed: apt-get install {packages}")
        self.pytesseract = pytesseract

    def lines(self, image: bytes) -> list[tuple[float, str]]:
        with Image.open(io.BytesIO(image)) as picture:
            data = self.pytesseract.image_to_data(
                picture.convert("RGB"),
                lang="+".join(TESSERACT_LANGS[lang] for lang in self.langs),
                output_type=self.pytesseract.Output.DICT,
            )
        rows: dict[tuple[int, int, int], list[tuple[int, int, str]]] = {}
        for i, word in enumerate(data["text"]):
            if word.strip():
                key = (data["block_num"][i], data["par_num"][i], data["line_num"][i])
                rows.setdefault(key, []).append((data["top"][i], data["left"][i], word))
        return [(min(t for t, _, _ in words), " ".join(w for _, _, w in sorted(words, key=lambda x: x[1]))) for words in rows.values()]


def ocr_engine(name: str, langs: Iterable[str]) -> OcrEngine:
    if name == "rapidocr":
        return RapidOcr(langs)
    if name == "tesseract":
        return TesseractOcr(langs)
    raise ValueError(f"unknown OCR engine {name!r}; choose from {ENGINES}")


def caption(lines: list[tuple[float, str]]) -> str:
    """Lines top to bottom, one per line; spaces squeezed (the captions' normalisation)."""
    ordered = [" ".join(text.split()) for _, text in sorted(lines, key=lambda line: line[0])]
    return "\n".join(line for line in ordered if line)


class CaptionReader:
    """`read(image)` → caption, through a cache file shared by runs (one JSON line per image read)."""

    def __init__(self, engine: OcrEngine, cache_file: Path | None) -> None:
        self.engine, self.cache_file = engine, cache_file
        self.cache: dict[str, str] = {}
        self.hits = self.reads = 0
        if cache_file is not None and cache_file.is_file():
            for number, line in enumerate(cache_file.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    entry = json.loads(line)
                    self.cache[str(entry["key"])] = str(entry["text"])
                except (ValueError, KeyError, TypeError):
                    raise ValueError(f"{cache_file}:{number}: not an OCR cache line; delete the file to start a new cache") from None

    def key(self, image: bytes) -> str:
        return f"{self.engine.name}:{'+'.join(self.engine.langs)}:{hashlib.sha256(image).hexdigest()}"

    def read(self, image: bytes) -> str:
        key = self.key(image)
        if key in self.cache:
            self.hits += 1
            return self.cache[key]
        text = caption(self.engine.lines(image))
        self.reads += 1
        self.cache[key] = text
        if self.cache_file is not None:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.cache_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"key": key, "text": text}, ensure_ascii=False) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        return text

"""Captions read off meme images, for memes that arrive as pictures only.

Memes in the wild carry their text inside the image; the studies' datasets ship it because someone ran
OCR or typed it. Two offline engines:
- `rapidocr`: PP-OCR detection + recognition (ONNX models inside the `rapidocr-onnxruntime` wheel, so a
  fresh environment has it with no download). Its recogniser reads Chinese and Latin script; Devanagari
  is outside its character set (bench/ocr.py reports what that costs).
- `tesseract`: Tesseract 5 through `pytesseract`, with the system's language data (`apt-get install
  tesseract-ocr tesseract-ocr-deu tesseract-ocr-spa tesseract-ocr-hin tesseract-ocr-chi-sim`).

Recognised boxes on one line (overlapping heights) are joined left to right, and lines ordered top to
bottom and joined with a line break, the way dataset captions keep
top and bottom text apart (`crossmod.data.sources.readers` normalisation), then normalised the same way.
Results are cached per (engine, languages, sha256 of the image bytes) in a JSON-lines file, so a folder
scored twice is read once.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import shutil
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image, ImageFilter

from crossmod.data.cache_files import append_line, refuse_links
from crossmod.data.cache_keys import entry_mac, mac_matches
from crossmod.data.sample import Sample
from crossmod.data.shards import Skipped

ENGINES = ("rapidocr", "tesseract")
# RapidOCR's settings crossmod changes from the wheel's configuration, chosen by bench/ocr.py on renders
# kept apart from the ones it scores (its `tuning` section): PP-OCR's recogniser drops the spaces between
# Latin words when the detector's boxes hug the letters, so the boxes are grown (`det_unclip_ratio`, 1.6 in
# the wheel); and the angle classifier, which turns lines it takes for upside down, turned some upright
# bottom lines over and lost them (`use_cls`): meme text is upright. bench/ocr.py checks that these are
# still the tuning set's best choice.
RAPIDOCR_SETTINGS: dict[str, float | bool] = {"det_unclip_ratio": 2.5, "use_cls": False}
TESSERACT_MEME_TEXT_MASK = True  # read the outlined text as black print (TesseractOcr), chosen the same way
WHEEL_DEFAULTS: dict[str, float | bool] = {"det_unclip_ratio": 1.6, "use_cls": True}  # rapidocr_onnxruntime/config.yaml's values
TESSERACT_LANGS = {"en": "eng", "de": "deu", "es": "spa", "hi": "hin", "zh": "chi_sim"}
# Images OCR decodes at most this many pixels (checked from the header, before decoding): 6000×6000, several
# times any meme, while a hostile 1-bit PNG of a few kilobytes can declare billions.
MAX_OCR_PIXELS = 36_000_000
log = logging.getLogger(__name__)


Box = tuple[float, float, float, str]  # top, bottom, left (pixels), recognised text


class OcrEngine(Protocol):
    name: str
    langs: tuple[str, ...]
    identity: str  # engine and every setting that changes its output: part of the cache key

    def lines(self, image: bytes) -> list[Box]:
        """Recognised text boxes: (top, bottom, left) in pixels and the text."""
        ...


class RapidOcr:
    """PP-OCR (det + rec) with the models shipped in `rapidocr-onnxruntime`."""

    name = "rapidocr"

    def __init__(self, langs: Iterable[str], **options: float | bool) -> None:
        """`options`: RapidOCR's own settings by its keyword names (e.g. `det_unclip_ratio`, how far text boxes
        are grown before recognition), over `RAPIDOCR_SETTINGS`; `RapidOcr(langs, **WHEEL_DEFAULTS)` runs the
        wheel's configuration untouched."""
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as error:
            raise ImportError(f"ocr=rapidocr needs the rapidocr-onnxruntime package ({error}); pip install rapidocr-onnxruntime") from None
        self.langs = tuple(langs)
        self.settings = {**RAPIDOCR_SETTINGS, **options}
        self.identity = "rapidocr[" + ",".join(f"{k}={v}" for k, v in sorted(self.settings.items())) + "]"
        self.engine = RapidOCR(**self.settings)

    def lines(self, image: bytes) -> list[Box]:
        found, _ = self.engine(image)
        return [(min(y for _, y in box), max(y for _, y in box), min(x for x, _ in box), text) for box, text, _score in found or []]


class TesseractOcr:
    """Tesseract 5 with the system's language data for the requested languages."""

    name = "tesseract"

    def __init__(self, langs: Iterable[str], meme_text_mask: bool = TESSERACT_MEME_TEXT_MASK) -> None:
        """`meme_text_mask`: read a black-on-white image of the white pixels that lie along a dark outline
        (meme text) instead of the picture; Tesseract is made for dark print on a light page and read
        nothing on many outlined captions without it (bench/ocr.py measures both)."""
        try:
            import pytesseract
        except ImportError as error:
            raise ImportError(f"ocr=tesseract needs the pytesseract package ({error}); pip install pytesseract") from None
        if shutil.which("tesseract") is None:
            raise FileNotFoundError(
                "ocr=tesseract needs the tesseract program: apt-get install tesseract-ocr (docs/inference.md, 'Evaluate, export, predict')"
            )
        self.langs = tuple(langs)
        unknown = [lang for lang in self.langs if lang not in TESSERACT_LANGS]
        if unknown:
            raise ValueError(f"ocr=tesseract: no language data name for {unknown}; known: {sorted(TESSERACT_LANGS)}")
        installed = set(pytesseract.get_languages(config=""))
        missing = [TESSERACT_LANGS[lang] for lang in self.langs if TESSERACT_LANGS[lang] not in installed]
        if missing:
            packages = " ".join(f"tesseract-ocr-{code.replace('_', '-').lower()}" for code in missing)
            raise FileNotFoundError(f"ocr=tesseract: language data {missing} is not installed: apt-get install {packages}")
        self.pytesseract, self.meme_text_mask = pytesseract, meme_text_mask
        self.identity = f"tesseract[{pytesseract.get_tesseract_version()},meme_text_mask={meme_text_mask}]"

    def lines(self, image: bytes) -> list[Box]:
        with Image.open(io.BytesIO(image)) as picture:
            picture = picture.convert("RGB")
            data = self.pytesseract.image_to_data(
                outlined_text(picture) if self.meme_text_mask else picture,
                lang="+".join(TESSERACT_LANGS[lang] for lang in self.langs),
                output_type=self.pytesseract.Output.DICT,
            )
        rows: dict[tuple[int, int, int], list[tuple[int, int, str]]] = {}
        for i, word in enumerate(data["text"]):
            if word.strip():
                key = (data["block_num"][i], data["par_num"][i], data["line_num"][i])
                rows.setdefault(key, []).append((data["top"][i], data["top"][i] + data["height"][i], data["left"][i], word))
        return [
            (
                min(w[0] for w in words),
                max(w[1] for w in words),
                min(w[2] for w in words),
                " ".join(w[3] for w in sorted(words, key=lambda w: w[2])),
            )
            for words in rows.values()
        ]


def outlined_text(picture: Image.Image, white: int = 190, dark: int = 80, reach: int = 9) -> Image.Image:
    """Meme text as black print on white: pixels whose every channel is at least `white` and that lie
    within `reach` pixels of a pixel whose every channel is at most `dark` (the outline)."""
    pixels = np.asarray(picture)
    outline = Image.fromarray(((pixels.max(axis=2) <= dark) * 255).astype(np.uint8)).filter(ImageFilter.MaxFilter(reach))
    text = (pixels.min(axis=2) >= white) & (np.asarray(outline) > 0)
    return Image.fromarray(np.where(text, 0, 255).astype(np.uint8))


def ocr_engine(name: str, langs: Iterable[str]) -> OcrEngine:
    if name == "rapidocr":
        return RapidOcr(langs)
    if name == "tesseract":
        return TesseractOcr(langs)
    raise ValueError(f"unknown OCR engine {name!r}; choose from {ENGINES}")


def caption(boxes: list[Box]) -> str:
    """Boxes whose middle lies within a line's height join that line, left to right (a detector may split
    one line of meme text in two); lines top to bottom, one per line; spaces squeezed (the captions'
    normalisation)."""
    lines: list[tuple[float, float, list[tuple[float, str]]]] = []
    for top, bottom, left, text in sorted(boxes, key=lambda box: (box[0] + box[1]) / 2):
        if lines and lines[-1][0] <= (top + bottom) / 2 <= lines[-1][1]:
            lines[-1][2].append((left, text))
        else:
            lines.append((top, bottom, [(left, text)]))
    joined = (" ".join(" ".join(text.split()) for _, text in sorted(words)) for _, _, words in lines)
    return "\n".join(" ".join(line.split()) for line in joined if line.strip())


class CaptionReader:
    """`read(image)` → caption, through a cache file shared by runs (one JSON line per image read).

    The cache is data: a line that is not `{"key": str, "text": str, "mac": str}` in UTF-8 (a line cut by a crash,
    another type, bytes that are not UTF-8, a lone surrogate), or whose `mac` is not the HMAC of its key and text under
    this user's cache key (a line planted or swapped to another image, src/crossmod/data/cache_keys.py), is skipped and
    counted (`skipped_lines`, with a warning naming the file), never handed to the tokenizer. Images over `MAX_OCR_PIXELS` are refused before the
    engine decodes them."""

    def __init__(self, engine: OcrEngine, cache_file: Path | None) -> None:
        self.engine, self.cache_file = engine, cache_file
        self.cache: dict[str, str] = {}
        self.hits = self.reads = 0
        self.skipped_lines: list[int] = []
        self._newline_first = False  # the file's last line was cut: the next entry starts on a line of its own
        if cache_file is not None:
            refuse_links(cache_file, "OCR cache")
        if cache_file is not None and cache_file.is_file():
            data = cache_file.read_bytes()
            self._newline_first = bool(data) and not data.endswith(b"\n")
            for number, line in enumerate(data.splitlines(), 1):
                entry = _cache_entry(line)
                if entry is None:
                    self.skipped_lines.append(number)
                else:
                    self.cache[entry[0]] = entry[1]
            if self.skipped_lines:
                log.warning(
                    "%s: %d lines are not OCR cache entries signed with this user's cache key and were skipped (lines %s); "
                    "their images are read again when met. "
                    "Delete the file to start a new cache",
                    cache_file,
                    len(self.skipped_lines),
                    ", ".join(map(str, self.skipped_lines[:10])),
                )

    def key(self, image: bytes) -> str:
        return f"{self.engine.identity}:{'+'.join(self.engine.langs)}:{hashlib.sha256(image).hexdigest()}"

    def read(self, image: bytes, name: str = "an image") -> str:
        """The caption of `image` (`name` says which meme, in errors)."""
        key = self.key(image)
        if key in self.cache:
            self.hits += 1
            return self.cache[key]
        check_pixels(image, name)
        text = caption(self.engine.lines(image))
        self.reads += 1
        self.cache[key] = text
        if self.cache_file is not None:
            line = json.dumps({"key": key, "text": text, "mac": entry_mac("ocr", key, text)}, ensure_ascii=False)
            append_line(self.cache_file, "\n" + line if self._newline_first else line, "OCR cache")
            self._newline_first = False
        return text


def _cache_entry(line: bytes) -> tuple[str, str] | None:
    """(key, text) of one cache line, or None when it is not a UTF-8 JSON object of two strings signed by this user."""
    try:
        entry = json.loads(line.decode("utf-8"))
        key, text = entry["key"], entry["text"]
        if not isinstance(key, str) or not isinstance(text, str):
            return None
        (key + text).encode("utf-8")  # a lone surrogate (`"\\ud800"` in the JSON) does not encode
        if not mac_matches(entry.get("mac"), "ocr", key, text):
            return None
    except (ValueError, KeyError, TypeError):  # UnicodeError is a ValueError
        return None
    return key, text


class ImageOverOcrBound(ValueError):
    """An image whose header declares more pixels than OCR decodes: a bad input (skipped when the user allows)."""


def check_pixels(image: bytes, name: str) -> None:
    """Refuse an image over `MAX_OCR_PIXELS` from its header alone: a small file can declare a picture whose decoding
    takes gigabytes and minutes. An image PIL cannot read is left to the engine (which reports it)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(image)) as picture:
                width, height = picture.size
        size = f"{width}×{height} pixels"
    except Image.DecompressionBombError as error:  # over twice PIL's own bound: PIL says the size
        width = height = MAX_OCR_PIXELS
        size = f"larger than PIL decodes ({str(error).rstrip('.')})"
    except Exception:  # noqa: BLE001 - not PIL's to judge
        return
    if width * height > MAX_OCR_PIXELS:
        raise ImageOverOcrBound(
            f"{name}: the image is {size}, over OCR's bound of {MAX_OCR_PIXELS:,} pixels (src/crossmod/data/ocr.py MAX_OCR_PIXELS); "
            "a meme is far smaller: resize the image, or give its caption as 'text'"
        )


class CaptionsFromImages:
    """A source whose memes without text get the caption read off their image, for converting datasets
    that ship images only (`data.ocr={engine: rapidocr, langs: [en]}`). The engine's identity and languages
    join the source's parameters, so shards read by another engine get another fingerprint; every filled
    meme says so in `meta["text_source"]`, and the conversion prints how many were filled."""

    def __init__(self, source, engine: str, langs: Iterable[str] = ("en",), cache: str | None = None) -> None:
        self.source = source
        source.text_from_image = True  # converters keep image-only memes for this wrapper to caption
        self.reader = CaptionReader(ocr_engine(engine, langs), Path(cache).expanduser() if cache else None)
        self.filled = self.empty = 0

    def __getattr__(self, name: str):  # name, heads, on_error, … are the wrapped source's
        if name == "source":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.source, name)

    def params(self) -> dict:
        return {**self.source.params(), "ocr": {"engine": self.reader.engine.identity, "langs": list(self.reader.engine.langs)}}

    def __iter__(self):
        self.filled = self.empty = 0
        for sample in self.source:  # Samples, and the `Skipped` records of bad inputs the user allowed
            if isinstance(sample, Sample) and not sample.text.strip() and sample.image is not None:
                try:
                    sample.text = self.reader.read(sample.image, sample.id)
                except ImageOverOcrBound as error:
                    if getattr(self.source, "on_error", "raise") != "skip":
                        raise ImageOverOcrBound(f"{error} (with data.on_error=skip such images are counted and skipped)") from None
                    yield Skipped(input=sample.id, reason=str(error))  # counted in the manifest, as every bad input
                    continue
                sample.meta = {**sample.meta, "text_source": self.reader.engine.identity}
                self.filled += 1
                self.empty += not sample.text
            yield sample

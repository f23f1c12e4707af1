"""The OCR cache and the images OCR reads are data: a damaged cache loses only its bad lines (counted),
and an image declaring a huge picture is refused, named, before the engine spends gigabytes on it."""

from __future__ import annotations

import io
import json
import struct
import zlib

import pytest
from PIL import Image

from crossmod.data.ocr import CaptionReader, CaptionsFromImages
from crossmod.data.sample import Sample
from crossmod.data.shards import Skipped
from crossmod.inference.new_memes import read_captions


class CountingEngine:
    name, langs, identity = "counting", ("en",), "counting[1]"

    def __init__(self) -> None:
        self.images = 0

    def lines(self, image: bytes):
        self.images += 1
        return [(0.0, 10.0, 0.0, f"caption {self.images}")]


def png(width: int = 8, height: int = 8) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (width % 256, 0, 0)).save(buffer, "PNG")
    return buffer.getvalue()


def test_a_cache_cut_by_a_crash_and_poisoned_lines_lose_only_those_lines(tmp_path):
    engine = CountingEngine()
    cache = tmp_path / "ocr.jsonl"
    first = CaptionReader(engine, cache)
    good = [png(8 + i) for i in range(3)]
    texts = [first.read(image) for image in good]
    key = first.key(png(20))
    poisoned = [
        json.dumps({"key": first.key(png(21)), "text": ["not", "a", "string"]}).encode(),  # wrong type
        b'{"key": "' + first.key(png(22)).encode() + b'", "text": "caf\xe9"}',  # not UTF-8
        json.dumps({"key": first.key(png(23)), "text": "\ud800 lone surrogate"}).encode(),  # escaped as \\ud800
        json.dumps({"key": key, "text": "cut short"}).encode()[:30],  # the crash: no end, no newline
    ]
    cache.write_bytes(cache.read_bytes() + b"\n".join(poisoned))

    again = CaptionReader(engine, cache)
    assert again.skipped_lines == [4, 5, 6, 7]
    assert [again.read(image) for image in good] == texts and again.hits == 3  # the good lines still count
    records = [{"id": f"m{i}", "text": "", "image": png(21 + i)} for i in range(3)]
    assert read_captions(records, again) == 3
    assert [r["text"] for r in records] == ["caption 4", "caption 5", "caption 6"]  # read again, never the poisoned values
    new = again.read(png(20))
    assert CaptionReader(engine, cache).cache[key] == new  # the entry after the cut line is a line of its own


def huge_one_bit_png(width: int, height: int) -> bytes:
    """A 1-bit black PNG of width×height, a few kilobytes on disk, built row by row (never held in memory)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    compressor, row, parts = zlib.compressobj(9), b"\0" * (1 + (width + 7) // 8), []
    for _ in range(height):
        parts.append(compressor.compress(row))
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    "side, declared",
    [(40_000, r"larger than PIL decodes .*1600000000 pixels.*"), (8_000, "8000×8000 pixels")],
    ids=["over-PIL-bound", "under-PIL-bound"],
)
def test_a_tiny_file_declaring_a_huge_picture_is_refused_before_the_engine_runs(side, declared, tmp_path):
    bomb = huge_one_bit_png(side, side)
    assert len(bomb) < 400_000
    engine = CountingEngine()
    records = [{"id": "memes/bomb.png", "text": "", "image": bomb}]
    with pytest.raises(ValueError, match=rf"memes/bomb.png: the image is {declared}, over OCR's bound .*resize the image"):
        read_captions(records, CaptionReader(engine, tmp_path / "ocr.jsonl"))
    assert engine.images == 0


class ImageOnlySource:
    """Memes without text, as a converter yields them for OCR, with the user's on_error."""

    def __init__(self, images: dict[str, bytes], on_error: str) -> None:
        self.images, self.on_error = images, on_error

    def params(self) -> dict:
        return {}

    def __iter__(self):
        for name, image in self.images.items():
            yield Sample(id=name, group=name, lang="en", text="", image=image, labels={})


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_an_image_over_the_bound_is_a_counted_skip_when_the_user_asked_for_skipping(on_error, monkeypatch):
    engine = CountingEngine()
    monkeypatch.setattr("crossmod.data.ocr.ocr_engine", lambda name, langs: engine)
    images = {"memes/a.png": png(9), "memes/bomb.png": huge_one_bit_png(8_000, 8_000), "memes/b.png": png(10)}
    source = CaptionsFromImages(ImageOnlySource(images, on_error), engine="counting")
    if on_error == "raise":
        with pytest.raises(ValueError, match=r"memes/bomb.png: the image is 8000×8000 pixels.*data.on_error=skip"):
            list(source)
        return
    records = list(source)
    assert [r.id for r in records if isinstance(r, Sample)] == ["memes/a.png", "memes/b.png"]
    (skipped,) = [r for r in records if isinstance(r, Skipped)]
    assert skipped.input == "memes/bomb.png" and "over OCR's bound" in skipped.reason
    assert engine.images == 2 and source.filled == 2  # the bomb never reached the engine


def test_a_caption_swapped_to_another_image_is_not_read(tmp_path):
    """Someone who can write the shared cache appends a line giving image B the caption they want (the key is only a
    digest of B's bytes, anyone can compute it): unsigned by this user's key, it is skipped, and B is read again."""
    engine = CountingEngine()
    cache = tmp_path / "ocr.jsonl"
    reader = CaptionReader(engine, cache)
    victim = png(30)
    planted = {"key": reader.key(victim), "text": "planted caption"}
    with cache.open("a") as handle:
        handle.write(json.dumps(planted) + "\n")
        handle.write(json.dumps({**planted, "mac": "0" * 64}) + "\n")
    again = CaptionReader(engine, cache)
    assert again.skipped_lines == [1, 2]
    assert again.read(victim) == "caption 1" and engine.images == 1

"""Every kind of bad input: a message naming file, line and reason, or (on_error=skip) a counted skip.

Each case builds a fresh fixture layout, breaks it in one way, and checks both modes. In skip mode
the number of inputs is known from the fixture, so `inputs_read == written + skipped` is checked
against an independent count, not only against itself.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from crossmod.data.sources.base import RawDataError
from tests.data.sources import layouts
from tests.data.sources.helpers import convert, source


def edit_jsonl_line(path: Path, line: int, text: str | bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = text if isinstance(text, bytes) else text.encode("utf-8")
    path.write_bytes(b"\n".join(lines))


def edit_csv(path: Path, edit: Callable[[list[list[str]]], None]) -> None:
    """Rewrite a CSV through a function of its rows (header included, BOM kept)."""
    raw = path.read_bytes()
    bom = raw.startswith(b"\xef\xbb\xbf")
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
    edit(rows)
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + buffer.getvalue().encode("utf-8"))


def set_cell(column: str, line: int, value: str) -> Callable[[list[list[str]]], None]:
    def edit(rows: list[list[str]]) -> None:
        rows[line - 1][rows[0].index(column)] = value

    return edit


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def m3h_image(raw: Path, lang: str, meme_id: int) -> Path:
    return next((raw / "memes" / lang).rglob(f"{meme_id}.jpg"))


@dataclass
class Case:
    dataset: str
    break_it: Callable[[Path], None]
    file: str  # relative to raw_dir
    line: int | None  # None: the whole file is one input
    reason: str
    inputs: int  # inputs read in skip mode (counted independently from the fixture)
    written: int


# Fixture sizes: Hateful Memes 10 lines (train ids 1001-1006 on lines 1-6); Multi3Hate 6 memes
# (ids 10, 13, 16, 19, 22, 25 on CSV lines 2-7) x 5 languages = 30 rows; MHC 2 files x 6 rows
# (lines 2-7); ToxicTags and MemeBridge 8 lines each.
CASES = {
    "missing image": Case("hateful_memes", lambda r: (r / "img" / "01002.png").unlink(), "train.jsonl", 2, "image file not found", 10, 9),
    "missing image (multi3hate)": Case(
        "multi3hate", lambda r: m3h_image(r, "es", 16).unlink(), "captions/es.csv", 4, "image file not found", 30, 29
    ),
    "truncated PNG": Case(
        "hateful_memes", lambda r: truncate(r / "img" / "01003.png"), "train.jsonl", 3, "corrupt or truncated image", 10, 9
    ),
    "truncated JPEG": Case(
        "multi3hate", lambda r: truncate(m3h_image(r, "hi", 19)), "captions/hi.csv", 5, "corrupt or truncated image", 30, 29
    ),
    "corrupt JPEG": Case(
        "multi3hate",
        lambda r: m3h_image(r, "de", 13).write_bytes(b"\xff\xd8\xff\xe0" + b"not a jpeg" * 20),
        "captions/de.csv",
        3,
        "corrupt or truncated image",
        30,
        29,
    ),
    "not an image": Case(
        "toxictags", lambda r: (r / "images" / "tt3.jpg").write_bytes(b"GIF89a...."), "toxictags.jsonl", 4, "not a JPEG, PNG or WebP", 8, 7
    ),
    "decompression bomb (error)": Case(
        "hateful_memes",
        lambda r: (r / "img" / "01004.png").write_bytes(layouts.bomb_png(20000, 20000)),
        "train.jsonl",
        4,
        "decompression bomb",
        10,
        9,
    ),
    "decompression bomb (warning)": Case(
        "memebridge",
        lambda r: (r / "images" / "mb1.png").write_bytes(layouts.bomb_png(10000, 10000)),
        "memebridge.jsonl",
        2,
        "decompression bomb",
        8,
        7,
    ),
    "malformed JSON": Case(
        "hateful_memes", lambda r: edit_jsonl_line(r / "train.jsonl", 5, '{"id": 1005, "img": '), "train.jsonl", 5, "malformed JSON", 10, 9
    ),
    "JSON line that is no object": Case(
        "toxictags", lambda r: edit_jsonl_line(r / "toxictags.jsonl", 2, '["tt1"]'), "toxictags.jsonl", 2, "expected a JSON object", 8, 7
    ),
    "CSV missing a required column": Case(
        "multi3hate",
        lambda r: edit_csv(r / "captions" / "es.csv", lambda rows: [row.pop(3) for row in rows]),
        "captions/es.csv",
        None,
        "missing required column(s) 'Translation'",
        30 - 6 + 1,
        24,
    ),
    "CSV missing a required column (mhc)": Case(
        "mhc",
        lambda r: edit_csv(r / "hatecheck_cases_final_german.csv", lambda rows: [row.pop(3) for row in rows]),
        "hatecheck_cases_final_german.csv",
        None,
        "missing required column(s) 'label_gold'",
        12 - 6 + 1,
        6,
    ),
    "CSV row with too few fields": Case(
        "mhc",
        lambda r: edit_csv(r / "hatecheck_cases_final_dutch.csv", lambda rows: rows[2].pop()),
        "hatecheck_cases_final_dutch.csv",
        3,
        "row has 12 fields but the header has 13",
        12,
        11,
    ),
    "label maybe (multi3hate)": Case(
        "multi3hate",
        lambda r: edit_csv(r / "final_annotations.csv", set_cell("DE", 4, "maybe")),
        "final_annotations.csv",
        4,
        "column DE: label 'maybe' is not 0 or 1",
        30 + 1,
        25,
    ),
    "label 2 (hateful memes)": Case(
        "hateful_memes",
        lambda r: edit_jsonl_line(r / "train.jsonl", 1, '{"id": 1001, "img": "img/01001.png", "label": 2, "text": "t"}'),
        "train.jsonl",
        1,
        "label 2 is not 0 or 1",
        10,
        9,
    ),
    "label maybe (mhc)": Case(
        "mhc",
        lambda r: edit_csv(r / "hatecheck_cases_final_german.csv", set_cell("label_gold", 4, "maybe")),
        "hatecheck_cases_final_german.csv",
        4,
        "label_gold 'maybe' is not one of",
        12,
        11,
    ),
    "label outside scheme (toxictags)": Case(
        "toxictags",
        lambda r: edit_jsonl_line(
            r / "toxictags.jsonl", 3, '{"id": "tt2", "image": "images/tt2.jpg", "title": "t", "label": "spicy", "split": "train"}'
        ),
        "toxictags.jsonl",
        3,
        "label 'spicy' is not one of",
        8,
        7,
    ),
    "emotion outside scheme (memebridge)": Case(
        "memebridge",
        lambda r: edit_jsonl_line(
            r / "memebridge.jsonl",
            2,
            '{"id": 1, "image": "images/mb1.png", "text": "t", "sentiment": "neutral", "emotions": ["bored"], "split": "train"}',
        ),
        "memebridge.jsonl",
        2,
        "emotions ['bored'] are not in",
        8,
        7,
    ),
    "sentiment outside scheme (memebridge)": Case(
        "memebridge",
        lambda r: edit_jsonl_line(
            r / "memebridge.jsonl", 3, '{"id": 2, "image": "images/mb2.png", "text": "t", "sentiment": "angry", "split": "val"}'
        ),
        "memebridge.jsonl",
        3,
        "sentiment 'angry' is not one of",
        8,
        7,
    ),
    "unknown split": Case(
        "memebridge",
        lambda r: edit_jsonl_line(r / "memebridge.jsonl", 4, '{"id": 3, "image": "images/mb3.png", "text": "t", "split": "dev"}'),
        "memebridge.jsonl",
        4,
        "split 'dev' is not one of",
        8,
        7,
    ),
    "duplicate id across split files": Case(
        "hateful_memes",
        lambda r: edit_jsonl_line(r / "dev_seen.jsonl", 2, '{"id": "01001", "img": "img/01001.png", "label": 1, "text": "again"}'),
        "dev_seen.jsonl",
        2,
        "duplicate id 'hateful_memes/1001' (first seen at train.jsonl:1)",
        10,
        9,
    ),
    "duplicate caption row": Case(
        "multi3hate",
        lambda r: edit_csv(r / "captions" / "hi.csv", lambda rows: rows.append(list(rows[1]))),
        "captions/hi.csv",
        8,
        "duplicate id 'multi3hate/10/hi' (first seen at captions/hi.csv:2)",
        31,
        30,
    ),
    "duplicate annotation row": Case(
        "multi3hate",
        lambda r: edit_csv(r / "final_annotations.csv", lambda rows: rows.append(list(rows[1]))),
        "final_annotations.csv",
        8,
        "duplicate Meme ID 10 (first at line 2)",
        31,
        30,
    ),
    "duplicate case id (mhc)": Case(
        "mhc",
        lambda r: edit_csv(r / "hatecheck_cases_final_dutch.csv", lambda rows: rows.append(list(rows[1]))),
        "hatecheck_cases_final_dutch.csv",
        8,
        "duplicate id 'mhc/dutch-1'",
        13,
        12,
    ),
    "annotation without caption": Case(
        "multi3hate",
        lambda r: edit_csv(r / "captions" / "zh.csv", lambda rows: rows.pop(4)),
        "final_annotations.csv",
        5,
        "meme id 19 has no caption row in captions/zh.csv",
        29 + 1,
        29,
    ),
    "caption without annotation": Case(
        "multi3hate",
        lambda r: edit_csv(r / "captions" / "en.csv", lambda rows: rows.append(["999", "Success-Kid", "x", "x"])),
        "captions/en.csv",
        8,
        "meme id 999 has no row in final_annotations.csv",
        31,
        30,
    ),
    "empty text (hateful memes)": Case(
        "hateful_memes",
        lambda r: edit_jsonl_line(r / "train.jsonl", 6, '{"id": 1006, "img": "img/01006.png", "label": 1, "text": "  "}'),
        "train.jsonl",
        6,
        "empty or missing 'text' for id 1006",
        10,
        9,
    ),
    "empty text (mhc)": Case(
        "mhc",
        lambda r: edit_csv(r / "hatecheck_cases_final_dutch.csv", set_cell("test_case", 3, "")),
        "hatecheck_cases_final_dutch.csv",
        3,
        "empty test_case for dutch-2",
        12,
        11,
    ),
    "empty text (multi3hate)": Case(
        "multi3hate",
        lambda r: edit_csv(r / "captions" / "de.csv", set_cell("Translation", 2, " ")),
        "captions/de.csv",
        2,
        "empty Translation for meme id 10",
        30,
        29,
    ),
    "empty text (toxictags)": Case(
        "toxictags",
        lambda r: edit_jsonl_line(
            r / "toxictags.jsonl",
            5,
            '{"id": "tt4", "image": "images/tt4.jpg", "title": "", "ocr_text": "", "label": "normal", "split": "train"}',
        ),
        "toxictags.jsonl",
        5,
        "id tt4: empty text",
        8,
        7,
    ),
    "non-UTF-8 bytes (jsonl)": Case(
        "hateful_memes",
        lambda r: edit_jsonl_line(r / "train.jsonl", 2, b'{"id": 1002, "img": "img/01002.png", "label": 0, "text": "caf\xe9"}'),
        "train.jsonl",
        2,
        "non-UTF-8 bytes",
        10,
        9,
    ),
    "non-UTF-8 bytes (csv)": Case(
        "mhc",
        lambda r: _replace_bytes(r / "hatecheck_cases_final_german.csv", b"german case 4", b"german \xe4 case 4"),
        "hatecheck_cases_final_german.csv",
        5,
        "non-UTF-8 bytes",
        12,
        11,
    ),
    "unknown language code (multi3hate)": Case(
        "multi3hate",
        lambda r: (r / "captions" / "xx.csv").write_bytes((r / "captions" / "en.csv").read_bytes()),
        "captions/xx.csv",
        None,
        "unknown language code 'xx'",
        31,
        30,
    ),
    "unknown language (mhc)": Case(
        "mhc",
        lambda r: (r / "hatecheck_cases_final_klingon.csv").write_bytes((r / "hatecheck_cases_final_dutch.csv").read_bytes()),
        "hatecheck_cases_final_klingon.csv",
        None,
        "unknown language 'klingon'",
        13,
        12,
    ),
    "unknown language code (jsonl)": Case(
        "toxictags",
        lambda r: edit_jsonl_line(
            r / "toxictags.jsonl",
            1,
            '{"id": "tt0", "image": "images/tt0.jpg", "title": "t", "label": "normal", "split": "train", "lang": "english"}',
        ),
        "toxictags.jsonl",
        1,
        "language code 'english' is not an ISO 639-1 code",
        8,
        7,
    ),
}


def _replace_bytes(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new))


@pytest.fixture(params=list(CASES), ids=list(CASES))
def case(request, tmp_path) -> tuple[Case, Path]:
    spec = CASES[request.param]
    raw = layouts.BUILDERS[spec.dataset](tmp_path / "raw")
    spec.break_it(raw)
    return spec, raw


def test_default_raises_naming_file_line_and_reason(case, tmp_path):
    spec, raw = case
    out = tmp_path / "shards"
    with pytest.raises(RawDataError) as caught:
        convert(source(spec.dataset, raw), out)
    message = str(caught.value)
    where = str(raw / spec.file) + (f", line {spec.line}:" if spec.line else ":")
    assert message.startswith(where), message
    assert spec.reason in message
    assert "on_error=skip" in message  # the fix is named
    assert not out.exists() and not list(tmp_path.glob("shards.partial-*"))  # nothing half-written


def test_skip_counts_every_input_and_records_the_reason(case, tmp_path):
    spec, raw = case
    manifest = convert(source(spec.dataset, raw, on_error="skip"), tmp_path / "shards")
    assert manifest["inputs_read"] == spec.inputs
    assert manifest["samples_written"] == spec.written
    assert manifest["inputs_read"] == manifest["samples_written"] + len(manifest["skipped"])
    expected_input = spec.file if spec.line is None else f"{spec.file}:{spec.line}"
    reasons = [s["reason"] for s in manifest["skipped"] if s["input"] == expected_input]
    assert reasons and any(spec.reason in r for r in reasons), manifest["skipped"]


@pytest.mark.parametrize("dataset", list(layouts.BUILDERS))
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_an_empty_dataset_is_an_error_never_an_empty_shard_set(dataset, on_error, tmp_path):
    raw = layouts.BUILDERS[dataset](tmp_path / "raw")
    for path in raw.rglob("*"):
        if path.suffix == ".jsonl":
            path.write_text("")
        elif path.suffix == ".csv":
            path.write_text(path.read_text(encoding="utf-8-sig").splitlines()[0] + "\n", encoding="utf-8")
    with pytest.raises(RawDataError, match="no samples could be read"):
        convert(source(dataset, raw, on_error=on_error), tmp_path / "shards")
    assert not (tmp_path / "shards").exists()


def test_everything_skipped_is_an_error_too(tmp_path):
    raw = layouts.toxictags(tmp_path / "raw")
    for image in (raw / "images").iterdir():
        os.remove(image)
    with pytest.raises(RawDataError, match=r"no samples could be read \(8 inputs skipped\)"):
        convert(source("toxictags", raw, on_error="skip"), tmp_path / "shards")

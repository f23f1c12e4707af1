"""Items 6 and 8: text that parses but is not what it seems.

Item 6: a lone surrogate (`"\\ud800"`, which `json.loads` accepts) cannot be stored as UTF-8; it
must be a per-input error naming file, line and field, so `on_error=skip` counts it.
Item 8: a stray quote in a CSV merges the following rows into one text; for MHC, whose test cases
never span lines, the row is reported with the lines it would merge and the rows after it are read
on their own. A quote still open at the end of a file is reported as such.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bad_input.conversion_attacks import refused_then_counted, replace_line
from tests.data.sources import layouts

SURROGATE = "\\ud800"  # as written in the JSON file: an escape json.loads turns into a lone surrogate


@pytest.mark.parametrize(
    ("dataset", "file", "line", "text", "field"),
    [
        (
            "hateful_memes",
            "train.jsonl",
            4,
            f'{{"id": 1004, "img": "img/01004.png", "label": 1, "text": "bad {SURROGATE} text"}}',
            "field 'text' holds a lone surrogate \\ud800 at character 5",
        ),
        (
            "toxictags",
            "toxictags.jsonl",
            2,
            f'{{"id": "tt1", "image": "images/tt1.jpg", "title": "t", "tags": ["ok", "{SURROGATE}"], "label": "normal", "split": "train"}}',
            "field 'tags[1]' holds a lone surrogate",
        ),
        (
            "toxictags",
            "toxictags.jsonl",
            3,
            f'{{"id": "tt2{SURROGATE}", "image": "images/tt2.jpg", "title": "t", "label": "normal", "split": "train"}}',
            "field 'id' holds a lone surrogate",
        ),
        (
            "memebridge",
            "memebridge.jsonl",
            5,
            f'{{"id": 4, "image": "images/mb4.png", "text": "t", "explanation": "{SURROGATE}", "split": "train"}}',
            "field 'explanation' holds a lone surrogate",
        ),
    ],
    ids=["hateful_memes text", "toxictags tag", "toxictags id", "memebridge meta field"],
)
def test_lone_surrogate_is_a_per_input_error(dataset, file, line, text, field, tmp_path, record_property):
    raw = layouts.BUILDERS[dataset](tmp_path / "raw")
    replace_line(raw / file, line, text)
    inputs = {"hateful_memes": 10, "toxictags": 8, "memebridge": 8}[dataset]
    refused_then_counted(
        dataset, raw, tmp_path / "out", record_property, file=file, line=line, reason=field, inputs=inputs, written=inputs - 1
    )


# ------------------------------------------------------------------------------------ MHC quotes
HEADER = layouts.MHC_HEADER_NO_GENDER


def _row(n: int, text: str) -> str:
    return f"dutch-{n},derog_neg_emote_h,{text},{'hateful' if n % 2 else 'non-hateful'},women,,,{n},I hate [IDENT_P].,,hateful,False,False"


def _mhc(raw: Path, texts: dict[int, str], rows: int = 8) -> Path:
    """hatecheck_cases_final_dutch.csv with `rows` data rows (row n on line n + 1), some texts replaced."""
    raw.mkdir(parents=True)
    lines = [HEADER, *(_row(n, texts.get(n, f"case {n}")) for n in range(1, rows + 1))]
    (raw / "hatecheck_cases_final_dutch.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return raw


def test_mhc_stray_quote_is_reported_with_its_line_span_and_the_rows_after_it_are_kept(tmp_path, record_property):
    # Row 3 (line 4) opens a quote; row 6 (line 7) has a quote inside its text: a plain CSV reader
    # merges lines 4-7 into one row with the right number of fields (8 physical rows -> 5 inputs).
    raw = _mhc(tmp_path / "raw", {3: '"I hate them all', 6: 'they said "no" to it'})
    manifest = refused_then_counted(
        "mhc",
        raw,
        tmp_path / "out",
        record_property,
        file="hatecheck_cases_final_dutch.csv",
        line=4,
        reason="field 'test_case' opened on line 4 holds line breaks up to line 7, so lines 4-7 would merge",
        inputs=8,
        written=7,
    )
    assert len(manifest["skipped"]) == 1


def test_mhc_nul_in_a_text_is_a_per_input_error(tmp_path, record_property):
    """A NUL inside a test case is no caption: the row is named with its field, counted, and the others are kept."""
    raw = _mhc(tmp_path / "raw", {5: "I hate\0 them"})
    refused_then_counted(
        "mhc", raw, tmp_path / "out", record_property, file="hatecheck_cases_final_dutch.csv", line=6,
        reason="field 'test_case' holds a NUL character at character 7", inputs=8, written=7,
    )  # fmt: skip


def test_mhc_quote_left_open_at_the_end_is_reported_as_unclosed(tmp_path, record_property):
    raw = _mhc(tmp_path / "raw", {8: '"never closed'})
    refused_then_counted(
        "mhc",
        raw,
        tmp_path / "out",
        record_property,
        file="hatecheck_cases_final_dutch.csv",
        line=9,
        reason="unclosed quote: a quoted field opened on line 9 runs to the end of the file",
        inputs=8,
        written=7,
    )


def test_mhc_quote_closed_inside_a_field_is_reported_not_silently_dropped(tmp_path, record_property):
    # `"Muslims" are …` would become `Muslims are …` (quotes lost) in csv's lenient mode
    raw = _mhc(tmp_path / "raw", {2: '"Muslims" are the problem'})
    refused_then_counted(
        "mhc",
        raw,
        tmp_path / "out",
        record_property,
        file="hatecheck_cases_final_dutch.csv",
        line=3,
        reason="malformed CSV (',' expected after '\"'; a stray quote?)",
        inputs=8,
        written=7,
    )


def test_multi3hate_caption_quote_left_open_at_the_end_is_reported_as_unclosed(tmp_path, record_property):
    """Multi3Hate captions may span lines, so only the quote open at the end of the file is an error."""
    raw = layouts.multi3hate(tmp_path / "raw")
    path = raw / "captions" / "en.csv"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[6].startswith("25,") and len(lines) == 7
    lines[6] = lines[6].rsplit(",", 1)[0] + ',"top text 25 <sep> bottom text'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # the caption row is skipped, and so the annotation of meme 25 has no English caption: 31 inputs
    refused_then_counted(
        "multi3hate",
        raw,
        tmp_path / "out",
        record_property,
        file="captions/en.csv",
        line=7,
        reason="unclosed quote: a quoted field opened on line 7 runs to the end of the file",
        inputs=31,
        written=29,
    )

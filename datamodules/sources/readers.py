"""Strict, line-aware readers for the raw annotation files (CSV and JSON lines).

Published files come with small variations (a UTF-8 BOM, spaces in headers, `Meme ID` vs
`meme_id`), which are accepted; bytes that are not UTF-8, rows with the wrong number of fields and
malformed JSON are reported with the physical line they start on, so the user can open the file
there. A problem in one row never hides the rows after it.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_UNDECODABLE = re.compile("[\udc80-\udcff]")
NON_UTF8 = "non-UTF-8 bytes (the file must be UTF-8 encoded)"

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class FileProblem(ValueError):
    """A problem with a whole file (unreadable header, missing column …): none of its rows can be used."""


@dataclass
class Row:
    """One input: its first physical line, and either its values or what is wrong with it."""

    line: int
    values: dict[str, Any] | None
    problem: str | None = None


def normalize_column(name: str) -> str:
    """`Meme ID`, ` meme_id ` and `MEME  ID` name the same column."""
    return re.sub(r"[\s_]+", " ", name.replace("\ufeff", "").strip()).casefold()


def _decode(data: bytes) -> str:
    """UTF-8 (BOM tolerated); undecodable bytes survive as surrogates so the row holding them is found."""
    return data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")


def read_csv(path: Path, required: list[str], optional: list[str] = ()) -> Iterator[Row]:
    """Rows of a CSV keyed by the requested column names (matched loosely); other columns keep their header.

    Raises FileProblem before the first row when the file is empty, its header is not UTF-8 or a
    required column is missing.
    """
    text = _decode(path.read_bytes())
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        while header is not None and not any(cell.strip() for cell in header):
            header = next(reader, None)
    except csv.Error as error:
        raise FileProblem(f"unreadable CSV header ({error})") from error
    if header is None:
        raise FileProblem("empty file: no header row")
    if any(_UNDECODABLE.search(cell) for cell in header):
        raise FileProblem(f"header line has {NON_UTF8}")
    wanted = {normalize_column(name): name for name in [*required, *optional]}
    keys: list[str] = []
    for position, cell in enumerate(header):
        key = wanted.get(normalize_column(cell), cell.strip())
        if key in keys:
            if normalize_column(cell) in wanted:
                raise FileProblem(f"column {cell.strip()!r} appears twice in the header")
            key = f"{key}#{position}"  # an unused column (e.g. unnamed pandas index columns) may repeat
        keys.append(key)
    missing = [name for name in required if name not in keys]
    if missing:
        found = ", ".join(cell.strip() for cell in header)
        raise FileProblem(f"missing required column(s) {', '.join(repr(m) for m in missing)} (header has: {found})")
    return _rows(reader, keys)


def _rows(reader: Any, keys: list[str]) -> Iterator[Row]:
    previous = reader.line_num
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            line, previous = previous + 1, reader.line_num
            yield Row(line, None, f"malformed CSV ({error})")
            continue
        line, previous = previous + 1, reader.line_num
        if not any(cell.strip() for cell in cells):
            continue  # blank line: not an input
        if any(_UNDECODABLE.search(cell) for cell in cells):
            yield Row(line, None, NON_UTF8)
        elif len(cells) != len(keys):
            yield Row(line, None, f"row has {len(cells)} fields but the header has {len(keys)}")
        else:
            yield Row(line, dict(zip(keys, cells)))


def read_jsonl(path: Path) -> Iterator[Row]:
    """One Row per non-blank line: a JSON object, or the reason it is not one."""
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        raw = raw.rstrip(b"\r")
        if number == 1:
            raw = raw.removeprefix(b"\xef\xbb\xbf")
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            yield Row(number, None, f"{NON_UTF8}: byte {raw[error.start]:#04x} at column {error.start + 1}")
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            yield Row(number, None, f"malformed JSON ({error.msg} at column {error.colno})")
            continue
        if not isinstance(value, dict):
            yield Row(number, None, f"expected a JSON object, got {type(value).__name__}")
            continue
        yield Row(number, value)


def clean_id(value: Any) -> str | None:
    """An id as text: numbers lose leading zeros and a float's `.0` (`01235`, `1235.0` → `1235`); blank → None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    if not text:
        return None
    if re.fullmatch(r"\d+(\.0+)?", text):
        return str(int(text.split(".")[0]))
    return text

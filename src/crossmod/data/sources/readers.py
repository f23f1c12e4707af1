"""Strict, line-aware readers for the raw annotation files (CSV and JSON lines).

Published files come with small variations (a UTF-8 BOM, spaces in headers, `Meme ID` vs
`meme_id`), which are accepted; bytes that are not UTF-8, rows with the wrong number of fields and
malformed JSON are reported with the physical line they start on, so the user can open the file
there. A problem in one row never hides the rows after it: for files whose texts never span lines
(`single_line=True`), each physical line is parsed on its own, so a stray quote costs its own row
only and is reported with the lines it would have merged. A quote still open at the end of the
file is reported as such, and JSON strings holding a lone surrogate (`"\ud800"`, which
`json.loads` accepts but UTF-8 cannot store) are reported with their field.
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
_SURROGATE = re.compile("[\ud800-\udfff]")
_LINE_BREAK = re.compile("[\r\n]")
NON_UTF8 = "non-UTF-8 bytes (the file must be UTF-8 encoded)"
UNEXPECTED_EOF = "unexpected end of data"  # csv's message (strict mode) for a quote left open at the end

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


def read_csv(path: Path, required: list[str], optional: list[str] = (), single_line: bool = False) -> Iterator[Row]:
    """Rows of a CSV keyed by the requested column names (matched loosely); other columns keep their header.

    `single_line`: no field of this file may hold a line break (texts that never span lines), so
    a row covering several physical lines is a stray quote, reported with its line span.
    Raises FileProblem before the first row when the file is empty, its header is not UTF-8 or a
    required column is missing.
    """
    lines = list(io.StringIO(_decode(path.read_bytes()), newline=""))  # physical lines as csv counts them
    reader = csv.reader(lines)
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
    if single_line:
        return _single_line_rows(lines, reader.line_num, keys)
    return _rows(reader, lines, keys)


def _rows(reader: Any, lines: list[str], keys: list[str]) -> Iterator[Row]:
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
        if previous == len(lines) and _open_at_end(lines[line - 1 :]):
            yield Row(line, None, f"unclosed quote: a quoted field opened on line {line} runs to the end of the file (line {len(lines)})")
        else:
            yield from _checked(line, cells, keys)


def _single_line_rows(lines: list[str], header_lines: int, keys: list[str]) -> Iterator[Row]:
    """Each physical line is one row; a line whose quotes do not close on it is reported, not merged."""
    for index in range(header_lines, len(lines)):
        line = index + 1
        try:
            cells = next(csv.reader([lines[index]], strict=True), [])
        except csv.Error as error:
            if not str(error).startswith(UNEXPECTED_EOF):
                yield Row(line, None, f"malformed CSV ({error}; a stray quote?)")
                continue
            yield Row(line, None, _stray_quote(lines, index, keys))
            continue
        yield from _checked(line, cells, keys)


def _stray_quote(lines: list[str], index: int, keys: list[str]) -> str:
    """Describe the rows a quote opened on `lines[index]` would merge (as a plain CSV reader would)."""
    reader = csv.reader(lines[index:])
    cells = next(reader)
    last = index + reader.line_num
    if last == len(lines) and _open_at_end(lines[index:]):
        return f"unclosed quote: a quoted field opened on line {index + 1} runs to the end of the file (line {last})"
    position = next((i for i, cell in enumerate(cells) if _LINE_BREAK.search(cell)), len(cells) - 1)
    field = keys[position] if position < len(keys) else f"#{position + 1}"
    return (
        f"stray quote: field {field!r} opened on line {index + 1} holds line breaks up to line {last}, "
        f"so lines {index + 1}-{last} would merge into one row; texts in this file never span lines"
    )


def _open_at_end(lines: list[str]) -> bool:
    """True when the text ends inside a quoted field (which csv's default, lenient mode accepts silently)."""
    try:
        for _ in csv.reader(lines, strict=True):
            pass
    except csv.Error as error:
        return str(error).startswith(UNEXPECTED_EOF)
    return False


def _checked(line: int, cells: list[str], keys: list[str]) -> Iterator[Row]:
    if not any(cell.strip() for cell in cells):
        return  # blank line: not an input
    if any(_UNDECODABLE.search(cell) for cell in cells):
        yield Row(line, None, NON_UTF8)
    elif nul := next(((key, cell.index("\0")) for key, cell in zip(keys, cells) if "\0" in cell), None):
        yield Row(line, None, f"field {nul[0]!r} holds a NUL character at character {nul[1] + 1} (not text a caption holds)")
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
        except RecursionError:
            yield Row(number, None, "malformed JSON (nested too deeply)")
            continue
        if not isinstance(value, dict):
            yield Row(number, None, f"expected a JSON object, got {type(value).__name__}")
            continue
        surrogate = lone_surrogate(value)
        yield Row(number, None, surrogate) if surrogate else Row(number, value)


def lone_surrogate(value: Any) -> str | None:
    """Where a parsed JSON value holds a lone surrogate (`"\ud800"`): it is not Unicode text and cannot be written as UTF-8."""
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                found = _SURROGATE.search(key)
                if found:
                    return f"a field name holds a lone surrogate \\u{ord(found.group()):04x} (not valid Unicode text)"
                pending.append((f"{where}.{key}" if where else key, child))
        elif isinstance(item, list):
            pending.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
        elif isinstance(item, str):
            if "\0" in item:
                return f"field {where!r} holds a NUL character at character {item.index(chr(0)) + 1} (not text a caption holds)"
            found = _SURROGATE.search(item)
            if found:
                return (
                    f"field {where!r} holds a lone surrogate \\u{ord(found.group()):04x} at character {found.start() + 1}"
                    " (a JSON escape that is not valid Unicode text; it cannot be stored as UTF-8)"
                )
    return None


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

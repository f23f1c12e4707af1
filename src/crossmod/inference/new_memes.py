"""What `crossmod predict` reads and writes around the scoring (src/crossmod/inference/scoring.py): new memes from images, JSONL or shards
(read and checked by `crossmod.data.predict_inputs`), captions read off images, and the predictions file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from crossmod.data.cache_files import write_file
from crossmod.data.predict_inputs import InputError, Inputs, read_inputs

__all__ = ["InputError", "Inputs", "read_captions", "read_inputs", "write_predictions"]


def read_captions(records: list[dict[str, Any]], reader: Any) -> int:
    """Fill the text of every meme that has an image but no text with the caption OCR reads off it
    (`ocr_text` too, for the predictions file); returns how many were read."""
    count = 0
    for record in records:
        if not str(record.get("text") or "").strip() and record.get("image") is not None:
            record["text"] = record["ocr_text"] = reader.read(record["image"], str(record.get("id", "a meme")))
            count += 1
    return count


# A CSV cell a spreadsheet would run as a formula (OWASP's CSV injection list): an id like `=HYPERLINK(…)` from someone
# else's memes is written with a leading `'`, which spreadsheets show as text; the JSONL output keeps every id verbatim.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    return f"'{value}" if isinstance(value, str) and value.startswith(FORMULA_START) else value


def write_predictions(rows: list[dict[str, Any]], path: Path) -> Path:
    """UTF-8 CSV or JSONL, encoded in full before the file is replaced: a failure leaves no half file."""
    if path.suffix == ".csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["id"])
        writer.writeheader()
        writer.writerows({key: spreadsheet_safe(value) for key, value in row.items()} for row in rows)
        text = buffer.getvalue()
    else:
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return write_file(path, text.encode("utf-8"), "predictions file", user_folder=True)  # an exclusive temporary name

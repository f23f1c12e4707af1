"""What every conversion attack does: run the conversion twice, once to be refused, once to count the skip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crossmod.data.sources.base import RawDataError
from tests.bad_input.tally import check_counts
from tests.data.sources.helpers import convert, source


def replace_line(path: Path, line: int, text: str | bytes) -> None:
    """Overwrite physical line `line` (1-based) of a file with raw text or bytes."""
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = text if isinstance(text, bytes) else text.encode("utf-8")
    path.write_bytes(b"\n".join(lines))


def json_line(**fields: Any) -> str:
    return json.dumps(fields)


def refused_then_counted(
    dataset: str,
    raw: Path,
    out: Path,
    record_property: Any,
    *,
    file: str,
    line: int | None,
    reason: str,
    inputs: int,
    written: int,
    **options: Any,
) -> dict[str, Any]:
    """on_error=raise names file, line and reason and writes nothing; on_error=skip counts the input.

    `record_property` is the test's pytest fixture of that name (the suite's tally reads it)."""
    with pytest.raises(RawDataError) as caught:
        convert(source(dataset, raw, **options), out / "raise")
    message = str(caught.value)
    where = str(raw / file) + (f", line {line}:" if line else ":")
    assert message.startswith(where), message
    assert reason in message, message
    assert not (out / "raise").exists()
    manifest = convert(source(dataset, raw, on_error="skip", **options), out / "skip")
    check_counts(manifest, inputs, written, record_property)
    expected = file if line is None else f"{file}:{line}"
    assert any(s["input"] == expected and reason in s["reason"] for s in manifest["skipped"]), manifest["skipped"]
    return manifest


def shard_bytes(directory: Path) -> bytes:
    """Every byte the conversion wrote into shards (to show what never got in)."""
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.tar")))

"""Items 6 and 9 on the predict side: one bad meme never stops or empties a prediction run.

`predict.py` reads its inputs with the conversion's checks: an unreadable image, a latin-1 JSONL
line, a 100-megapixel image or an id with a lone surrogate is an error naming the file (and line),
or with `on_error=skip` a counted skip while every other meme is still scored and written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from crossmod.data.predict_inputs import InputError, read_inputs
from crossmod.data.sample import Sample
from crossmod.data.shards import write_shards
from crossmod.inference.new_memes import write_predictions
from tests.conftest import ROOT, scaled
from tests.data.sources import layouts
from tests.zygote import run_python


def _folder(tmp_path: Path, bad_name: str, bad: bytes) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    for name in ("a.png", "c.jpg"):
        (folder / name).write_bytes(layouts.image_bytes(len(name), "PNG" if name.endswith("png") else "JPEG"))
    (folder / bad_name).write_bytes(bad)
    return folder


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"not a png at all" * 8, "corrupt or truncated image"),
        (b"just text, named .png", "not a JPEG, PNG or WebP"),
        (b"", "image file is empty"),
        (layouts.bomb_png(10000, 10000), "decompression bomb refused"),  # 100 megapixels
    ],
    ids=["unidentifiable", "not an image", "empty", "100 megapixels"],
)
def test_predict_folder_with_one_bad_image_names_it_or_counts_it(bad, reason, tmp_path):
    folder = _folder(tmp_path, "b.png", bad)
    with pytest.raises(InputError, match=rf"b\.png: cannot read this meme \(.*{reason}"):
        read_inputs(folder)
    read = read_inputs(folder, on_error="skip")
    assert [r["id"] for r in read] == ["a", "c"] and read.read == 3
    assert [(Path(s.input).name, reason in s.reason) for s in read.skipped] == [("b.png", True)]


def test_an_id_read_twice_is_named_or_counted(tmp_path):
    lines = ['{"id": "m1", "text": "a"}', '{"id": "m2", "text": "b"}', '{"id": "m1", "text": "c"}']
    (tmp_path / "memes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"input 3, id 'm1': cannot read this meme \(the id of input 1 again"):
        read_inputs(tmp_path / "memes.jsonl")
    read = read_inputs(tmp_path / "memes.jsonl", on_error="skip")
    assert [r["text"] for r in read] == ["a", "b"] and read.read == 3 and "input 1 again" in read.skipped[0].reason


def test_predict_latin1_jsonl_names_each_line(tmp_path):
    (tmp_path / "memes.jsonl").write_bytes(
        '{"id": 1, "text": "fine"}\n{"id": 2, "text": "café"}\n{"id": 3, "text": "ok"}\n'.replace("café", "caf\xe9").encode("latin-1")
    )
    with pytest.raises(InputError, match=r"memes\.jsonl:2: cannot read this meme \(non-UTF-8 bytes .*byte 0xe9 at column 23"):
        read_inputs(tmp_path / "memes.jsonl")
    read = read_inputs(tmp_path / "memes.jsonl", on_error="skip")
    assert [r["id"] for r in read] == ["1", "3"] and [s.input for s in read.skipped] == [f"{tmp_path / 'memes.jsonl'}:2"]


def test_predict_id_with_a_lone_surrogate_loses_no_other_prediction(tmp_path):
    lines = ['{"id": "m1", "text": "a"}', '{"id": "m2\\ud800", "text": "b"}', '{"id": "m3", "text": "c"}']
    (tmp_path / "memes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"memes\.jsonl:2: .*field 'id' holds a lone surrogate \\ud800"):
        read_inputs(tmp_path / "memes.jsonl")
    read = read_inputs(tmp_path / "memes.jsonl", on_error="skip")
    for suffix in (".jsonl", ".csv"):
        out = write_predictions([{"id": r["id"], "US_probability": 0.5} for r in read], tmp_path / f"preds{suffix}")
        text = out.read_text(encoding="utf-8")
        assert "m1" in text and "m3" in text and "m2" not in text
    assert len(read.skipped) == 1 and read.read == 3


def test_predict_shards_with_a_corrupt_image_are_checked_again(tmp_path):
    """Shards may be downloaded: an image that passes the signature check but does not decode is caught."""
    good, broken = layouts.image_bytes(5, "PNG"), layouts.image_bytes(6, "PNG")[:40]
    samples = [
        Sample(id=f"s{i}", group=f"s{i}", lang="en", text="t", image=image, labels={"y": 0}, split="test")
        for i, image in enumerate([good, broken, good])
    ]
    directory = tmp_path / "shards"
    write_shards(samples, directory, dataset="toy", heads={"y": {"kind": "binary"}}, params={})
    with pytest.raises(InputError, match=r"sample s1: cannot read this meme \(corrupt or truncated image"):
        read_inputs(directory)
    read = read_inputs(directory, on_error="skip")
    assert [r["id"] for r in read] == ["s0", "s2"] and read.read == 3


def test_predict_cli_names_the_bad_line_without_a_traceback(tmp_path):
    """Inputs are read before the model is loaded, and a bad one is one line on stderr, exit code 1."""
    (tmp_path / "memes.jsonl").write_bytes(b'{"id": 1, "text": "caf\xe9"}\n')
    (tmp_path / "none").mkdir()  # passes predict.py's up-front check (an exported folder has its card) but holds no model
    (tmp_path / "none" / "culture_card.json").write_text("{}")
    result = run_python(
        [sys.executable, str(ROOT / "predict.py"), f"adapters={tmp_path / 'none'}", f"inputs={tmp_path / 'memes.jsonl'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=scaled(300),
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert f"{tmp_path / 'memes.jsonl'}:1: cannot read this meme (non-UTF-8 bytes" in result.stderr
    assert "Traceback" not in result.stderr and not json.dumps(result.stdout).count("Error executing job")


def test_ids_a_spreadsheet_would_run_are_written_as_text_in_csv(tmp_path):
    rows = [
        {"id": '=HYPERLINK("http://x","y")', "US_probability": 0.5},
        {"id": "-2+3", "US_probability": 0.25},
        {"id": "m1", "US_probability": 1.0},
    ]
    text = write_predictions(rows, tmp_path / "p.csv").read_text()
    assert "\n\"'=HYPERLINK" in text and "\n'-2+3," in text and "\nm1," in text
    jsonl = write_predictions(rows, tmp_path / "p.jsonl").read_text()  # JSONL keeps ids verbatim (no spreadsheet opens it)
    assert '"id": "=HYPERLINK' in jsonl

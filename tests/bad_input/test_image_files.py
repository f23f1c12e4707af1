"""Item 10: an image file is sized and sniffed before it is read, under a configurable limit.

The attack is a 2 GiB file named `.png` (sparse: it costs no disk). Conversion and predict must
refuse it without reading it: the peak RSS of the process that meets it is measured against the
same process on the same layout without it. A FIFO named `.png` must not hang the run either.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from crossmod.data.sources.images import MAX_IMAGE_BYTES
from tests.bad_input.conversion_attacks import refused_then_counted
from tests.conftest import ROOT, scaled
from tests.data.sources import layouts
from tests.data.sources.helpers import source

GIB = 1024**3
CASES = {
    "non-image, default limit": (
        b"not an image at all",
        MAX_IMAGE_BYTES,
        f"image file is {2 * GIB} bytes, above the limit of {MAX_IMAGE_BYTES}",
    ),
    "PNG signature, default limit": (b"\x89PNG\r\n\x1a\n", MAX_IMAGE_BYTES, "above the limit"),  # a real signature does not lift it
    "non-image, limit above its size": (b"not an image at all", 3 * GIB, "image is not a JPEG, PNG or WebP file"),  # the signature stops it
}
# One process converts a clean layout first (imports and buffers warm), then each attacked layout
# (conversion in skip mode, then predict's read of the image folder), noting peak RSS after each.
PROBE = """
import json, resource, sys
from pathlib import Path
from crossmod.data.predict_inputs import read_inputs
from tests.data.sources.helpers import convert, source
def run(raw, out, limit):
    manifest = convert(source("hateful_memes", raw, on_error="skip", max_image_bytes=limit), out)
    predicted = read_inputs(raw / "img", on_error="skip", max_image_bytes=limit)
    return {
        "inputs": manifest["inputs_read"], "written": manifest["samples_written"], "skipped": manifest["skipped"],
        "predict_read": predicted.read, "predict_skipped": [vars(s) for s in predicted.skipped],
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
results = {}
for arg in sys.argv[1:]:
    name, raw, limit = arg.split("|")
    results[name] = run(Path(raw), Path(raw).with_name(Path(raw).name + "-shards"), int(limit))
print(json.dumps(results))
"""


def _sparse(path: Path, head: bytes, size: int) -> None:
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)
    assert path.stat().st_size == size and path.stat().st_blocks * 512 < 1024**2  # really sparse: no disk used


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("big_files")
    args = [f"baseline|{layouts.hateful_memes(root / 'baseline')}|{MAX_IMAGE_BYTES}"]
    for index, (name, (head, limit, _)) in enumerate(CASES.items()):
        raw = layouts.hateful_memes(root / f"case{index}")
        _sparse(raw / "img" / "01002.png", head, 2 * GIB)
        args.append(f"{name}|{raw}|{limit}")
    result = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=scaled(300))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES))
def test_a_2gib_file_named_png_is_refused_without_being_read(case, probed):
    reason = CASES[case][2]
    baseline, attacked = probed["baseline"], probed[case]
    assert baseline["written"] == 10 and baseline["predict_read"] == 10 and not baseline["skipped"]
    assert attacked["inputs"] == 10 and attacked["written"] == 9
    assert [s["input"] for s in attacked["skipped"]] == ["train.jsonl:2"] and reason in attacked["skipped"][0]["reason"]
    assert attacked["predict_read"] == 10 and reason in attacked["predict_skipped"][0]["reason"]
    growth = attacked["peak_rss"] - baseline["peak_rss"]
    print(f"peak RSS: after the clean layout {baseline['peak_rss'] / 2**20:.0f} MiB, after {case!r} {attacked['peak_rss'] / 2**20:.0f} MiB")
    assert growth < 64 * 1024**2, f"peak RSS grew by {growth / 2**20:.0f} MiB: the 2 GiB file was read"


def _noisy_png(size: int) -> bytes:
    buffer = io.BytesIO()
    Image.effect_noise((size, size), 60).convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def test_max_image_bytes_is_a_source_parameter_and_part_of_the_cache_key(tmp_path, record_property):
    raw = layouts.hateful_memes(tmp_path / "raw")
    big = _noisy_png(64)
    (raw / "img" / "01003.png").write_bytes(big)
    assert len(big) > 4096 > max(p.stat().st_size for p in (raw / "img").iterdir() if p.name != "01003.png")
    reason = f"image file is {len(big)} bytes, above the limit of 4096 (max_image_bytes)"
    refused_then_counted(
        "hateful_memes",
        raw,
        tmp_path / "out",
        record_property,
        file="train.jsonl",
        line=3,
        reason=reason,
        inputs=10,
        written=9,
        max_image_bytes=4096,
    )
    assert source("hateful_memes", raw, max_image_bytes=4096).params() != source("hateful_memes", raw).params()
    with pytest.raises(ValueError, match="max_image_bytes must be a positive number of bytes"):
        source("hateful_memes", raw, max_image_bytes=0)


def test_a_fifo_named_png_does_not_hang_conversion_or_predict(tmp_path, record_property):
    raw = layouts.toxictags(tmp_path / "raw")
    (raw / "images" / "tt5.jpg").unlink()
    os.mkfifo(raw / "images" / "tt5.jpg")
    script = (
        "import sys; from pathlib import Path; from crossmod.data.predict_inputs import read_inputs;"
        "r = read_inputs(Path(sys.argv[1]), on_error='skip'); print(r.read, r.skipped[0].reason)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(raw / "images")], cwd=ROOT, capture_output=True, text=True, timeout=scaled(120)
    )
    assert result.returncode == 0 and result.stdout.startswith("8 not a regular file"), result.stderr[-2000:]
    refused_then_counted(
        "toxictags",
        raw,
        tmp_path / "out",
        record_property,
        file="toxictags.jsonl",
        line=6,
        reason="not a regular file",
        inputs=8,
        written=7,
    )

"""Item 3: paths inside data files (image references, shard names) never lead out of their root.

Each attack puts a real, valid image (or shard) outside the root and points a data file at it: by
`..`, by an absolute path, or through a symlink. The run must refuse it (naming file and line) or
count it as skipped, and the outside bytes must never reach the shards or the predictions.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from crossmod.data.memes import MemeDataModule
from crossmod.data.paths import OutsideRoot, resolve_within
from crossmod.data.predict_inputs import InputError, read_inputs
from crossmod.data.sample import Sample
from crossmod.data.shards import read_manifest, read_samples, verify_shards, write_shards
from tests.bad_input.conversion_attacks import json_line, refused_then_counted, replace_line, shard_bytes
from tests.bad_input.tally import check_counts
from tests.data.sources import layouts
from tests.data.sources.helpers import convert, source


@pytest.fixture
def secret(tmp_path) -> tuple[Path, bytes]:
    """A valid PNG outside every root: if it is ever read, its bytes show up in the output."""
    path = tmp_path / "outside" / "secret.png"
    path.parent.mkdir()
    data = layouts.image_bytes(999, "PNG", size=31)
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize(
    ("reference", "reason"),
    [
        ("../x.png", "leaves"),
        ("img/../../x.png", "leaves"),
        ("..", "leaves"),
        ("/etc/passwd", "is absolute"),
        ("\\\\server\\share\\x.png", "is absolute"),
        ("C:\\Windows\\x.png", "is absolute"),
        ("", "empty"),
        ("img/\0.png", "NUL"),
        (".", "names the folder"),
    ],
)
def test_resolve_within_refuses_every_way_out(reference, reason, tmp_path):
    with pytest.raises(OutsideRoot, match=reason):
        resolve_within(tmp_path, reference)


def test_resolve_within_keeps_dotdot_that_stays_inside_and_refuses_symlinks_out(tmp_path):
    (tmp_path / "root" / "img").mkdir(parents=True)
    root = tmp_path / "root"
    assert resolve_within(root, "img/../img/a.png") == root / "img" / "a.png"
    assert resolve_within(root, "img\\a.png") == root / "img" / "a.png"
    (root / "inner").symlink_to(root / "img")  # a symlink that stays inside is fine
    assert resolve_within(root, "inner/a.png") == root / "inner" / "a.png"
    (root / "out").symlink_to(tmp_path)
    with pytest.raises(OutsideRoot, match="symlink"):
        resolve_within(root, "out/a.png")


# ------------------------------------------------------------------------------------ converters
def test_hateful_memes_img_with_dotdot_is_refused(tmp_path, secret, record_property):
    raw = layouts.hateful_memes(tmp_path / "raw")
    replace_line(raw / "train.jsonl", 2, json_line(id=1002, img="../outside/secret.png", label=0, text="t"))
    manifest = refused_then_counted(
        "hateful_memes", raw, tmp_path / "out", record_property, file="train.jsonl", line=2, reason="leaves", inputs=10, written=9
    )
    assert secret[1] not in shard_bytes(tmp_path / "out" / "skip") and manifest["skipped"][0]["input"] == "train.jsonl:2"


def test_hateful_memes_absolute_img_is_refused(tmp_path, secret, record_property):
    raw = layouts.hateful_memes(tmp_path / "raw")
    replace_line(raw / "train.jsonl", 3, json_line(id=1003, img=str(secret[0]), label=1, text="t"))
    refused_then_counted(
        "hateful_memes", raw, tmp_path / "out", record_property, file="train.jsonl", line=3, reason="is absolute", inputs=10, written=9
    )
    assert secret[1] not in shard_bytes(tmp_path / "out" / "skip")


def test_hateful_memes_image_symlinked_outside_is_refused(tmp_path, secret, record_property):
    raw = layouts.hateful_memes(tmp_path / "raw")
    (raw / "img" / "01004.png").unlink()
    (raw / "img" / "01004.png").symlink_to(secret[0])
    refused_then_counted(
        "hateful_memes", raw, tmp_path / "out", record_property, file="train.jsonl", line=4, reason="symlink", inputs=10, written=9
    )
    assert secret[1] not in shard_bytes(tmp_path / "out" / "skip")


def test_hateful_memes_image_found_by_id_through_a_symlink_is_refused(tmp_path, secret, record_property):
    """No `img` field: the image is looked up by id in img/, where a symlink leads out."""
    raw = layouts.hateful_memes(tmp_path / "raw")
    replace_line(raw / "train.jsonl", 5, json_line(id=1005, label=1, text="t"))
    (raw / "img" / "01005.png").unlink()
    (raw / "img" / "01005.png").symlink_to(secret[0])
    refused_then_counted(
        "hateful_memes", raw, tmp_path / "out", record_property, file="train.jsonl", line=5, reason="symlink", inputs=10, written=9
    )


def test_hateful_memes_dotdot_inside_the_root_still_works(tmp_path, record_property):
    raw = layouts.hateful_memes(tmp_path / "raw")
    replace_line(raw / "train.jsonl", 1, json_line(id=1001, img="img/../img/01001.png", label=0, text="t"))
    check_counts(convert(source("hateful_memes", raw), tmp_path / "out"), 10, 10, record_property)


def test_toxictags_image_with_dotdot_is_refused(tmp_path, secret, record_property):
    raw = layouts.toxictags(tmp_path / "raw")
    line = json_line(id="tt3", image="../outside/secret.png", title="t", label="normal", split="train")
    replace_line(raw / "toxictags.jsonl", 4, line)
    refused_then_counted(
        "toxictags", raw, tmp_path / "out", record_property, file="toxictags.jsonl", line=4, reason="leaves", inputs=8, written=7
    )
    assert secret[1] not in shard_bytes(tmp_path / "out" / "skip")


def test_memebridge_image_in_a_folder_symlinked_outside_is_refused(tmp_path, secret, record_property):
    raw = layouts.memebridge(tmp_path / "raw")
    (raw / "linked").symlink_to(secret[0].parent, target_is_directory=True)
    replace_line(raw / "memebridge.jsonl", 2, json_line(id=1, image="linked/secret.png", text="t", split="train"))
    refused_then_counted(
        "memebridge", raw, tmp_path / "out", record_property, file="memebridge.jsonl", line=2, reason="symlink", inputs=8, written=7
    )
    assert secret[1] not in shard_bytes(tmp_path / "out" / "skip")


def test_multi3hate_template_name_climbing_out_is_refused(tmp_path, record_property):
    raw = layouts.multi3hate(tmp_path / "raw")
    outside = tmp_path / "outside"  # raw/memes/en/../../../outside
    outside.mkdir()
    (outside / "13.jpg").write_bytes(secret_jpg := layouts.image_bytes(777, size=33))
    rows = (raw / "captions" / "en.csv").read_text().splitlines()
    assert rows[2].startswith("13,Condescending-Wonka,")
    rows[2] = rows[2].replace("Condescending-Wonka", "../../../outside")
    (raw / "captions" / "en.csv").write_text("\n".join(rows) + "\n")
    refused_then_counted(
        "multi3hate", raw, tmp_path / "out", record_property, file="captions/en.csv", line=3, reason="leaves", inputs=30, written=29
    )
    assert secret_jpg not in shard_bytes(tmp_path / "out" / "skip")


# ------------------------------------------------------------------------------------ manifests
def _shards(tmp_path: Path) -> Path:
    samples = [
        Sample(id=f"s{i}", group=f"s{i}", lang="en", text=f"text {i}", image=None, labels={"y": i % 2}, split="test") for i in range(4)
    ]
    directory = tmp_path / "shards"
    write_shards(samples, directory, dataset="toy", heads={"y": {"kind": "binary"}}, params={}, maxcount=2)
    return directory


def _rename_shard(directory: Path, name: str) -> None:
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["shards"][0]["name"] = name
    (directory / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_manifest_shard_name_outside_its_folder_is_refused_by_every_reader(kind, tmp_path):
    directory = _shards(tmp_path)
    first = directory / "test-000000.tar"
    elsewhere = tmp_path / "elsewhere.tar"
    shutil.copy(first, elsewhere)  # a readable shard: refusing it is the path check, not a read error
    if kind == "dotdot":
        _rename_shard(directory, "../elsewhere.tar")
    elif kind == "absolute":
        _rename_shard(directory, str(elsewhere))
    else:
        first.unlink()
        first.symlink_to(elsewhere)
    reason = {"dotdot": "plain file names|leaves", "absolute": "plain file names|is absolute", "symlink": "symlink"}[kind]
    for read in (
        read_manifest,
        verify_shards,
        read_samples,
        lambda d: MemeDataModule(heads={"y": {"kind": "binary"}}, shard_dir=str(d), verify=False).setup("test"),
        lambda d: read_inputs(d),
    ):
        with pytest.raises(ValueError, match=reason) as caught:
            read(directory)
        assert "manifest.json: shard 0" in str(caught.value)


# ------------------------------------------------------------------------------------ predict
@pytest.mark.parametrize("reference", ["../outside/secret.png", "ABSOLUTE", "/etc/passwd"])
def test_predict_jsonl_image_outside_its_folder_is_refused(reference, tmp_path, secret):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "ok.png").write_bytes(layouts.image_bytes(1, "PNG"))
    reference = str(secret[0]) if reference == "ABSOLUTE" else reference
    lines = [json_line(id="ok", text="fine", image="ok.png"), json_line(id="bad", text="attack", image=reference)]
    (inputs / "memes.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"memes.jsonl:2: cannot read this meme \('image' path .*(leaves|is absolute)"):
        read_inputs(inputs / "memes.jsonl")
    read = read_inputs(inputs / "memes.jsonl", on_error="skip")
    assert [r["id"] for r in read] == ["ok"] and [s.input for s in read.skipped] == [f"{inputs / 'memes.jsonl'}:2"]
    assert read.read == 2 and all(r["image"] != secret[1] for r in read)


def test_predict_folder_with_a_symlink_out_is_refused(tmp_path, secret):
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "a.png").write_bytes(layouts.image_bytes(1, "PNG"))
    os.symlink(secret[0], folder / "b.png")
    with pytest.raises(InputError, match="b.png: cannot read this meme .*symlink"):
        read_inputs(folder)
    read = read_inputs(folder, on_error="skip")
    assert [r["id"] for r in read] == ["a"] and len(read.skipped) == 1 and read.read == 2

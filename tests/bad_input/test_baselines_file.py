"""A run folder's baselines.json is data from whoever shared the folder: evaluate and the fold writer read it only
through `crossmod.results.baselines.read`, which refuses a link out of the run, an oversized file, and any structure or
number crossmod does not write, by name, before a report is built from it."""

from __future__ import annotations

import json
import os

import pytest

from crossmod.results.baselines import FILENAME, BaselinesFileError, read

GOOD = {
    "memes": {"train": 10, "val": 3, "test": 4},
    "rows": {"majority": {"name": "majority class", "rule": "r", "test": {"US": {"auroc": 0.5, "acc": 0.75}, "mean": {"auroc": 0.5}}}},
}


def _write(folder, data) -> None:
    (folder / FILENAME).write_text(json.dumps(data) if not isinstance(data, str) else data)


def test_the_file_crossmod_writes_is_read(tmp_path):
    _write(tmp_path, GOOD)
    assert read(tmp_path) == GOOD
    rounded = {**GOOD, "rows": {"tfidf": {"name": "t", "rule": "r", "test": {"US": {"auroc": 1.0000001192092896}}}}}
    _write(tmp_path, rounded)  # float32 AUROC of a perfect ranking, as torchmetrics gives it
    assert read(tmp_path) == rounded
    assert read(tmp_path / "elsewhere") is None  # a run without baselines has none


@pytest.mark.parametrize(
    ("case", "data", "named"),
    [
        ("not JSON", "{", "not JSON"),
        ("a list", [1, 2], "needs the objects"),
        ("a count that is text", {**GOOD, "memes": {"test": "4"}}, "non-negative integer"),
        ("a score above 1", {**GOOD, "rows": {"tfidf": {"name": "t", "rule": "r", "test": {"US": {"auroc": 1.001}}}}}, r"in \[0, 1\]"),
        ("NaN", '{"memes": {}, "rows": {"tfidf": {"name": "t", "rule": "r", "test": {"US": {"auroc": NaN}}}}}', r"in \[0, 1\]"),
        ("a row without its rule", {**GOOD, "rows": {"tfidf": {"name": "t", "test": {}}}}, "name and a rule"),
        ("a head that is a number", {**GOOD, "rows": {"tfidf": {"name": "t", "rule": "r", "test": {"US": 0.9}}}}, "head → metric"),
        ("a languages note that is not words", {**GOOD, "languages": {"note": ["x"]}}, "languages must be an object"),
        ("an endless languages note", {**GOOD, "languages": {"note": "x" * 5000}}, "at most 1000 characters"),
    ],
)
def test_a_malformed_file_is_refused_by_name(tmp_path, case, data, named):
    _write(tmp_path, data)
    with pytest.raises(BaselinesFileError, match=named) as refused:
        read(tmp_path)
    assert FILENAME in str(refused.value), case


def test_a_link_out_of_the_run_is_not_followed(tmp_path):
    outside = tmp_path / "private.json"
    outside.write_text(json.dumps(GOOD))  # readable, well-formed: still not this run's file
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(outside, run / FILENAME)
    with pytest.raises(BaselinesFileError, match="symbolic link"):
        read(run)


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path):
    (tmp_path / FILENAME).write_bytes(b" " * ((4 << 20) + 1))
    with pytest.raises(BaselinesFileError, match="more than any baselines file"):
        read(tmp_path)

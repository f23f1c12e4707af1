"""The console a newcomer reads: each log record once, no advertisement, no harmless library warnings."""

from __future__ import annotations

from tests.conftest import SMALL_DATA


def test_a_run_prints_each_record_once_without_advertisements_or_harmless_warnings(train_run):
    result = train_run("debug=fdr", *SMALL_DATA)
    output = result.stdout + result.stderr
    assert output.count("GPU available: False") == 1  # Lightning's handler and Hydra's printed every record twice
    assert output.count("Seed set to") == 1
    assert "litlogger" not in output.lower() and "💡" not in output
    assert ".with_length() only sets" not in output and "has `__len__` defined" not in output and "LeafSpec" not in output
    assert "Selection: dataset_val" in output and "mean" in output  # the table and its rule are what remains

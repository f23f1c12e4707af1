"""The suite's count: attacks tried, attacks handled (a clear error or a counted skip: the test passed),
and conversions checked for inputs = written + skipped (tests call `check_counts`). The hooks are
imported by this folder's conftest; the count is printed at the end of a run as one
`bad-input suite:` line."""

from __future__ import annotations

from typing import Any

import pytest

_TALLY = {"tried": 0, "handled": 0, "conversions": 0}


def check_counts(manifest: dict[str, Any], inputs: int, written: int, record_property: Any) -> None:
    """inputs read = written + skipped, against the attack's own input count; tallied for the summary line.

    `record_property` is pytest's fixture of that name (the tally reads it from the test report)."""
    assert manifest["inputs_read"] == inputs, manifest["skipped"]
    assert manifest["samples_written"] == written, manifest["skipped"]
    assert manifest["inputs_read"] == manifest["samples_written"] + len(manifest["skipped"])
    record_property("conversion_counted", True)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" or "bad_input/" not in report.nodeid.replace("\\", "/"):
        return
    _TALLY["tried"] += 1
    _TALLY["handled"] += int(report.passed)
    _TALLY["conversions"] += int(report.passed and dict(report.user_properties).get("conversion_counted", False))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _TALLY["tried"]:
        terminalreporter.write_line(
            f"bad-input suite: {_TALLY['tried']} attacks tried, {_TALLY['handled']} handled as a clear error or counted skip, "
            f"{_TALLY['conversions']} conversions checked for inputs = written + skipped"
        )

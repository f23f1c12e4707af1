"""A rank whose loop stops moving writes its rank, place and stacks once (src/crossmod/training/callbacks/stall_report.py)."""

from __future__ import annotations

import io
import threading
import time
from types import SimpleNamespace

import pytest

from crossmod.training.callbacks.stall_report import StallReport

NOTICE = "rank 1: no batch has finished"


def _trainer() -> SimpleNamespace:
    return SimpleNamespace(global_rank=1, current_epoch=2, global_step=7)


def waiting_in_a_collective(out: io.StringIO, reports: int, periods_after: int = 3, after_s: float = 0.3) -> None:
    """Stands for a rank blocked in a collective (the main thread waits without the GIL): until the watchdog has written
    `reports` notices (at most 60 s, a loaded machine), then `periods_after` more periods, time for any repeat."""
    deadline = time.monotonic() + 60
    while out.getvalue().count(NOTICE) < reports and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    threading.Event().wait(periods_after * after_s)


def test_a_stalled_loop_reports_its_rank_place_and_stack_once_per_stall():
    out = io.StringIO()
    report, trainer = StallReport(after_s=0.3, stream=out), _trainer()
    report.setup(trainer, None, "fit")
    try:
        report.on_train_batch_end(trainer, None, {}, {}, 3)
        waiting_in_a_collective(out, reports=1)  # three more periods: still one report
        text = out.getvalue()
        assert text.count(NOTICE) == 1, text
        assert "last: train epoch 2, global step 7" in text
        assert "waiting_in_a_collective" in text, "the blocked thread's stack is written"
        assert "crossmod-stall-report" not in text, "the watchdog does not report itself"
        report.on_validation_batch_end(trainer, None, {}, {}, 4)  # the loop moves again: armed anew
        waiting_in_a_collective(out, reports=2)
        assert out.getvalue().count(NOTICE) == 2 and "last: validation batch 4" in out.getvalue()
    finally:
        report.teardown(trainer, None, "fit")
    assert report._thread is None


def test_a_moving_loop_reports_nothing_and_teardown_stops_the_thread():
    out = io.StringIO()
    report, trainer = StallReport(after_s=1.0, stream=out), _trainer()
    report.setup(trainer, None, "fit")
    for step in range(12):  # 0.6 s of batches 0.05 s apart
        time.sleep(0.05)
        report.on_train_batch_end(trainer, None, {}, {}, step)
    report.teardown(trainer, None, "fit")
    assert out.getvalue() == ""
    assert not any(t.name == "crossmod-stall-report" for t in threading.enumerate())


def test_off_starts_no_thread_and_a_bad_value_is_refused_by_key():
    report = StallReport(after_s=None)
    report.setup(_trainer(), None, "fit")
    assert report._thread is None
    with pytest.raises(ValueError, match="callbacks.stall_report.after_s"):
        StallReport(after_s=0)

"""Progress where stdout is not a terminal (a SLURM output file, a pipe): plain log lines with step/total, rate and
ETA from rank 0 only, no Rich bar; a terminal keeps the Rich bar (src/crossmod/runtime/progress.py)."""

from __future__ import annotations

import io
import re

import pytest
from lightning.pytorch.callbacks import RichProgressBar

from crossmod.runtime.progress import LineProgress, console_progress
from tests.conftest import SMALL_DATA, scaled

LINE = re.compile(
    r"\[crossmod\.runtime\.progress\]\[INFO\] - (?P<label>train epoch \d+/\d+|validation epoch \d+/\d+|validation|test): "
    r"(?P<step>\d+)/(?P<total>\d+) \(\d+%\), [\d.]+ (?:it/s|s/it), (?P<when>ETA \d+:\d\d:\d\d, elapsed \d+:\d\d:\d\d|done in \d+:\d\d:\d\d)"
)
# A Rich bar: ANSI control sequences, carriage-return redraws, or its frame as written to a file
# (`Epoch 1/1 ━━━━━━ 5/5 0:00:01 • 0:00:00 2.43it/s`); the model summary's box table is not a bar.
RICH_BAR = re.compile(r"\x1b\[|\r|^(Sanity Checking|Epoch \d+/\d+|Validation|Testing|Predicting)\b.*•|━ *\d+/\d+ ", re.M)


class _Stdout(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty, kind", [(True, RichProgressBar), (False, LineProgress)])
def test_auto_mode_follows_whether_stdout_is_a_terminal(monkeypatch, tty, kind):
    monkeypatch.setattr("sys.stdout", _Stdout(tty))
    assert type(console_progress()) is kind
    assert type(console_progress(mode="lines")) is LineProgress and type(console_progress(mode="bar")) is RichProgressBar
    with pytest.raises(ValueError, match="auto, bar or lines"):
        console_progress(mode="plain")


def _progress(stdout: str) -> list[re.Match]:
    return [m for m in map(LINE.search, stdout.splitlines()) if m]


def test_a_piped_run_logs_plain_progress_lines_with_rate_and_eta(train_run):
    result = train_run(
        *SMALL_DATA, "debug=limit", "print_table=false", "callbacks.progress_bar.every_n_steps=2", env={"CROSSMOD_RUN_ID": "p"}
    )
    lines = _progress(result.stdout)
    assert any(m["when"].startswith("ETA") and m["label"] == "train epoch 1/2" for m in lines), result.stdout[-3000:]
    done = [m["label"] for m in lines if m["when"].startswith("done")]
    # one closing line per loop: each epoch's training and validation, then the selected weights' validation and test
    assert done == ["train epoch 1/2", "validation epoch 1/2", "train epoch 2/2", "validation epoch 2/2", "validation", "test"]
    assert all(int(m["step"]) <= int(m["total"]) for m in lines)
    assert not RICH_BAR.search(result.stdout + result.stderr), "a Rich bar reached a pipe"
    # the lines are log records: the run's train.log has them too
    log = (train_run.log_dir / "synthetic_concat" / "runs" / "p" / "train.log").read_text()
    assert "train epoch 2/2: 5/5 (100%)" in log


def test_two_ranks_log_each_progress_line_once(train_run):
    result = train_run(
        "trainer=ddp_cpu", *SMALL_DATA, "debug=limit", "trainer.max_epochs=1", "print_table=false", "test=false", timeout=scaled(600)
    )
    done = [m["label"] for m in _progress(result.stdout) if m["when"].startswith("done")]
    assert done == ["train epoch 1/1", "validation epoch 1/1", "validation"], result.stdout[-3000:]

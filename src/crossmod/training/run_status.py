"""`<run>/status.json`: whether a run is running, finished, interrupted or failed, so a job that stopped never looks
like one that succeeded (a scheduler's exit code is often all that is kept, and a folder holds no exit code).

Rank 0 writes it: `running` when the run starts (host, pid, command), then exactly one of `finished`, `interrupted`
(the signal, the checkpoint it saved and the command that resumes it) or `failed` (the error). A run killed without a
chance to say so (SIGKILL, a node lost) keeps `running` with the pid and host that can be checked.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_only

from crossmod.data.shards import write_json_atomic

STATES = ("running", "finished", "interrupted", "failed")


def command_line() -> str:
    """The command as the user typed it: `crossmod <job>` or `python <script>` (relative to the working directory)."""
    invoked = os.environ.get("CROSSMOD_INVOKED_AS")  # set by the front door (crossmod.cli): `crossmod train`, `python train.py`
    start = shlex.split(invoked) if invoked else ["python", os.path.relpath(sys.argv[0]) if sys.argv[0] else "train.py"]
    return shlex.join([*start, *sys.argv[1:]])


class RunStatus:
    """Writes the run's status file (rank 0 only; other ranks' calls do nothing)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / "status.json"
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def write(self, state: str, **facts: Any) -> None:
        if state not in STATES:
            raise ValueError(f"run state {state!r} is not one of {STATES}")
        if rank_zero_only.rank != 0:
            return
        payload = {
            "state": state,
            "started": self.started,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "command": command_line(),
            **facts,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, payload)

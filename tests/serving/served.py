"""A `crossmod serve` process on loopback for the serving tests and bench/serve.py: started on a free port, waited for
(bounded), talked to over real HTTP, stopped with SIGTERM."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """`crossmod serve adapters=[…] <overrides>` in a subprocess; `url` once ready."""

    def __init__(self, folders: list[Path], *overrides: str, ready_s: float = 180.0, env: dict[str, str] | None = None, wait: bool = True) -> None:
        """`wait=False`: return once started (several servers start at once), then `ready()`."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "crossmod", "serve", f"adapters=[{','.join(map(str, folders))}]", f"port={self.port}", *overrides]
        environment = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})}
        self.process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []  # read as it is written: a full pipe would block the server's logging
        self.reader = threading.Thread(target=lambda: self.lines.extend(iter(self.process.stdout.readline, "")), daemon=True)
        self.reader.start()
        self.deadline = time.monotonic() + ready_s
        if wait:
            self.ready()

    def ready(self) -> Served:
        """Wait (until the start's deadline) for `/readyz` to answer 200."""
        while time.monotonic() < self.deadline:
            if self.process.poll() is not None:
                self.reader.join(timeout=10)
                raise AssertionError(f"crossmod serve exited with {self.process.returncode}:\n{self.output[-6000:]}")
            try:
                if self.get("/readyz")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.3)
        self.process.kill()
        self.process.wait()
        self.reader.join(timeout=10)
        raise AssertionError(f"crossmod serve was not ready in time:\n{self.output[-6000:]}")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, dict[str, str], Any]:
        request = urllib.request.Request(self.url + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, head, raw = response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            status, head, raw = error.code, dict(error.headers), error.read()
        try:
            return status, {k.lower(): v for k, v in head.items()}, json.loads(raw)
        except ValueError:
            return status, {k.lower(): v for k, v in head.items()}, raw.decode(errors="replace")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
        return self.request("GET", path, headers=headers, timeout=5)

    def classify(self, memes: list[dict[str, Any]] | dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
        body = memes if isinstance(memes, dict) else {"memes": memes}
        return self.request("POST", "/v1/classify", json.dumps(body).encode(), {"content-type": "application/json", **(headers or {})})

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, timeout: float = 90) -> tuple[int, str]:
        """SIGTERM, then the exit code and everything it printed."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self.reader.join(timeout=10)
            raise AssertionError(f"crossmod serve did not stop within {timeout:.0f} s of SIGTERM:\n{self.output[-6000:]}") from None
        self.reader.join(timeout=10)
        return self.process.returncode, self.output


def as_memes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sample dicts as the API's memes (images base64)."""
    return [
        {"id": r["id"], "text": r["text"], "lang": r.get("lang", "en"), **({"image": base64.b64encode(r["image"]).decode()} if r.get("image") else {})}
        for r in records
    ]

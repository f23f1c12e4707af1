"""`crossmod serve`'s HTTP server: LitServe around `CultureAPI`, with crossmod's door (src/crossmod/serving/guard.py).

Routes: `POST /v1/classify` (LitServe's dynamic batches), `GET /v1/models` (the served cultures and their cards),
`GET /healthz` (the HTTP process is alive), `GET /readyz` (every inference worker has loaded its cultures; LitServe's
own health check), `GET /openapi.json` and `/docs` (FastAPI's schema, from the request models).

SIGTERM drains: the listening socket closes (new connections are refused), each HTTP process finishes the requests it
holds (uvicorn's graceful shutdown, up to `drain_s`), then LitServe stops its workers, and the process exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import litserve as ls
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from crossmod.serving.api import CultureAPI
from crossmod.serving.guard import Guard
from crossmod.serving.memes import field_errors

log = logging.getLogger("crossmod.serve")


class CultureServer(ls.LitServer):
    """LitServer that drains on SIGTERM. LitServe's own shutdown stops the workers first (its `_perform_graceful_shutdown`
    closes the request transport before the HTTP processes), which would fail the requests in flight; here the HTTP
    processes finish first. It reaches into two LitServe internals, pinned in constraints.txt and covered by a test:
    `_start_server` (the HTTP processes and the listening sockets) and `_shutdown_event`."""

    def __init__(self, *args: Any, drain_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uvicorn_graceful_timeout = drain_s
        self.http_processes: dict[int, Any] = {}
        self.listening: list[Any] = []
        self.draining = threading.Event()
        self.owner = os.getpid()

    def _start_server(
        self, port: Any, num_uvicorn_servers: int, log_level: str, sockets: list[Any], uvicorn_worker_type: str, **kwargs: Any
    ) -> dict[int, Any]:
        self.listening = list(sockets)
        self.http_processes = super()._start_server(port, num_uvicorn_servers, log_level, sockets, uvicorn_worker_type, **kwargs)
        return self.http_processes

    def on_sigterm(self, signum: int, frame: Any) -> None:
        """Start draining (in a thread: the main thread is inside a Manager call the handler must not reenter). A process
        forked from this one after the handler was set (LitServe's Manager) ends as SIGTERM's default would end it."""
        if os.getpid() != self.owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if not self.draining.is_set():
            self.draining.set()
            threading.Thread(target=self._drain, name="crossmod-drain", daemon=True).start()

    def _drain(self) -> None:
        print("[serve] SIGTERM: refusing new connections, answering the requests in flight", flush=True)
        for process in self.http_processes.values():
            if process.is_alive() and process.pid:
                os.kill(process.pid, signal.SIGTERM)  # uvicorn's graceful shutdown: in-flight requests are answered
        time.sleep(0.5)  # each HTTP process stops accepting first (uvicorn checks its exit flag every 0.1 s)
        for sock in self.listening:
            # LitServe's Manager process was forked with a copy of the listening socket, so closing the copies one
            # knows leaves the kernel queueing new connections nobody accepts; shutting the socket itself down
            # refuses them (ECONNREFUSED) at once, for every process holding it
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for process in self.http_processes.values():
            process.join(timeout=self.uvicorn_graceful_timeout + 5)
        self.http_processes.clear()
        self._shutdown_event.set()


def cards(folders: list[str]) -> list[dict[str, Any]]:
    """What `GET /v1/models` lists: each culture folder's card, as data (read and checked as loading reads it)."""
    from crossmod.artifacts.culture_folders import read_card

    shown = (
        "culture",
        "kind",
        "format",
        "family",
        "base_model",
        "experiment",
        "run",
        "metrics",
        "baselines",
        "calibration",
        "policy",
        "label_map",
        "heads",
        "trained_on",
        "selection",
    )
    return [{key: card.get(key) for key in shown} for card in (read_card(Path(folder) / "culture_card.json") for folder in folders)]


def build(
    api: CultureAPI,
    models: list[dict[str, Any]],
    token: str | None,
    limits: dict[str, Any],
    accelerator: str = "auto",
    drain_s: float = 30.0,
    request_timeout_s: float = 30.0,
) -> CultureServer:
    """The server (not started): LitServe's routes, crossmod's door and routes, field errors that name the field."""
    server = CultureServer(
        api,
        accelerator=accelerator,
        devices=1,
        workers_per_device=1,
        timeout=request_timeout_s,
        healthcheck_path="/readyz",
        info_path="/v1/info",
        middlewares=[(Guard, {"token": token, "max_body_bytes": limits["max_body_bytes"], "max_queue": limits["max_queue"]})],
        drain_s=drain_s,
    )
    app = server.app

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: this HTTP process answers."""
        return {"status": "ok"}

    @app.get("/v1/models")
    async def served_models() -> dict[str, Any]:
        """The served cultures and their cards (metrics, baselines, calibration, policy, what trained them)."""
        return {"cultures": models}

    @app.exception_handler(RequestValidationError)
    async def bad_fields(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": field_errors(list(error.errors()))}, status_code=422)

    return server


def run(server: CultureServer, host: str, port: int) -> None:
    """Serve until SIGTERM (or Ctrl-C); returns once drained."""
    signal.signal(signal.SIGTERM, server.on_sigterm)
    server.run(host=host, port=port, num_api_servers=1, generate_client_file=False, log_level="warning")

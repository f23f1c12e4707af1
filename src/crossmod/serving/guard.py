"""The door of every HTTP process of `crossmod serve`: one ASGI middleware that, before a request reaches LitServe,
- gives it a request id (the client's `X-Request-ID` when it is a short token, else a fresh one), echoed back;
- checks the bearer token, when the server has one, in constant time (`hmac.compare_digest`); health probes pass;
- refuses a body over `max_body_bytes`: at once by its Content-Length, or as soon as the bytes read exceed it;
- reads a `multipart/form-data` upload of one meme as the JSON body it stands for (the same field checks follow);
- refuses new classify requests with 503 and `Retry-After` while `max_queue` are already in flight (a bounded queue:
  memory never grows with the load);
- writes one JSON log line when the request ends: id, method, path, status, milliseconds, bytes. Never a caption, an
  image or the token.
Pure ASGI (no `BaseHTTPMiddleware`), so a slow client's body is read by its own task and stalls no one else.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

log = logging.getLogger("crossmod.serve.requests")
OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # probes answer without the token
QUEUED_PATHS = frozenset({"/v1/classify"})
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class TooLarge(Exception):
    """The body grew past the limit while it was read."""


class BadMultipart(ValueError):
    """A multipart body that is no form of one meme."""


class Guard:
    def __init__(
        self, app: ASGIApp, *, token: str | None = None, max_body_bytes: int = 16 * 1024 * 1024, max_queue: int = 64, retry_after_s: int = 1
    ) -> None:
        self.app, self.token, self.max_body_bytes, self.max_queue, self.retry_after_s = app, token, max_body_bytes, max_queue, retry_after_s
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        given = headers.get("x-request-id", "")
        request_id = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        started, path = time.perf_counter(), scope.get("path", "")
        state = {"status": 0, "bytes_in": 0}

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        queued = path in QUEUED_PATHS
        try:
            refusal = self._refusal(path, headers)
            if refusal is not None:
                await _reply(send_with_id, *refusal)
                return
            if queued and self.in_flight >= self.max_queue:
                await _reply(
                    send_with_id,
                    503,
                    f"the server holds {self.in_flight} requests, its limit (max_queue): retry later",
                    {"retry-after": str(self.retry_after_s)},
                )
                return
            if queued:
                self.in_flight += 1

            async def bounded_receive() -> Message:
                message = await receive()
                state["bytes_in"] += len(message.get("body", b""))
                if state["bytes_in"] > self.max_body_bytes:
                    raise TooLarge
                return message

            try:
                if queued and headers.get("content-type", "").startswith("multipart/form-data"):
                    scope, bounded_receive = await _as_json(scope, bounded_receive, headers["content-type"])
                await self.app(scope, bounded_receive, send_with_id)
            except BadMultipart as error:
                await _reply(send_with_id, 422, [{"loc": ["body"], "msg": str(error), "type": "multipart"}])
            except TooLarge:
                if not state["status"]:
                    await _reply(
                        send_with_id, 413, f"the body exceeds the server's limit of {self.max_body_bytes:,} bytes (max_body_bytes)"
                    )
            finally:
                if queued:
                    self.in_flight -= 1
        finally:
            log.info(
                json.dumps(
                    {
                        "request_id": request_id,
                        "method": scope.get("method"),
                        "path": path,
                        "status": state["status"],
                        "ms": round(1000 * (time.perf_counter() - started), 2),
                        "bytes_in": state["bytes_in"],
                    }
                )
            )

    def _refusal(self, path: str, headers: dict[str, str]) -> tuple[int, str, dict[str, str]] | None:
        """401 without the server's token, 413 for a declared body over the limit, else None."""
        if self.token is not None and path not in OPEN_PATHS:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
                return 401, "this server needs its bearer token: Authorization: Bearer <token>", {"www-authenticate": "Bearer"}
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                return 400, "Content-Length is not a number", {}
            if int(declared) > self.max_body_bytes:
                return (
                    413,
                    f"the body of {int(declared):,} bytes exceeds the server's limit of {self.max_body_bytes:,} (max_body_bytes)",
                    {},
                )
        return None


async def _as_json(scope: Scope, receive: Callable[[], Awaitable[Message]], content_type: str) -> tuple[Scope, Callable[[], Awaitable[Message]]]:
    """A multipart upload (read whole, within the body limit) as the JSON body of one meme (`memes.from_multipart`)."""
    from crossmod.serving.memes import from_multipart

    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    try:
        body = json.dumps(from_multipart(content_type, b"".join(chunks))).encode()
    except ValueError as error:
        raise BadMultipart(str(error)) from None
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"content-type", b"content-length")]
    scope = {**scope, "headers": [*headers, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()  # a disconnect, if the client goes
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return scope, replay


async def _reply(send: Callable[[Message], Awaitable[None]], status: int, detail: Any, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body})

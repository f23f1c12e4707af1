"""Shards and manifests on remote storage, read as byte streams that survive a dropped connection.

A dataset location is a local folder or a URL of one: `https://host/ds-<fingerprint>` (and every other
scheme WebDataset's `gopen` opens itself: http, https, gs, sftp, ftps, scp, ais, hf), an fsspec URL
(`s3://…`, `gcs://…`, `az://…`, with `s3fs` / `gcsfs` / `adlfs` installed), or a `pipe:` command with
`{name}` where the file name goes (`pipe:aws s3 cp s3://bucket/ds-<fingerprint>/{name} -`). Files are
named by the manifest (`manifest.json`, `train-000000.tar`, …); those names are data from a shared
file, so a remote location takes only plain shard names (letters, digits, `.`, `_`, `-`), and a
`pipe:` command gets them shell-quoted.

`RemoteStream` reads one file front to back. A failed read or a stream that ends before the size the
manifest records is retried: the file is opened again after a backoff (1, 2, 4 … seconds) and the
bytes already delivered are skipped, so the reader above sees one uninterrupted stream, no sample
twice and none lost; after the last attempt the error names the URL, the byte and the cause.
`download` writes a verified copy for `data.cache_dir`.

HTTP(S) is read with the standard library, under two rules a shared URL cannot bend: a redirect is
followed only within the host (and port) of the URL given, never to another host (an internal address,
a metadata service): such a redirect is refused naming both URLs, and the fix is to give the final URL;
and a client error (404, 403 …) is reported at once with its status, never retried. A manifest is read
whole only up to `MAX_MANIFEST_BYTES`; a dropped connection is retried like a shard's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urljoin, urlparse

from crossmod.data.cache_files import atomic_file, refuse_links

log = logging.getLogger(__name__)

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
RETRIES = 5  # attempts after the first
BACKOFF_S = 1.0  # first wait; doubles each attempt
CHUNK = 1 << 20
PROGRESS_EVERY = 20
PROGRESS = {"files": 0, "bytes": 0, "seconds": 0.0}  # this process's remote reading so far
MAX_MANIFEST_BYTES = 128 << 20  # far above any real manifest (a million groups' folds is tens of MB)
HTTP_TIMEOUT_S = 60.0


class RemoteReadError(OSError):
    """A remote file that could not be read whole; the message names the URL, the byte and the cause."""


class PermanentRemoteError(RemoteReadError):
    """A failure that reading again cannot mend (a 404, a redirect to another host): reported at once."""


class _SameHostRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to the same host and port (http may become https, never the reverse)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        old, new = urlparse(req.full_url), urlparse(urljoin(req.full_url, newurl))
        ports = {"http": 80, "https": 443}
        same = old.hostname == new.hostname and (old.port or ports.get(old.scheme)) == (new.port or ports.get(new.scheme))
        if not same or (old.scheme, new.scheme) == ("https", "http"):
            raise PermanentRemoteError(
                f"{req.full_url}: redirected to another host ({new.geturl()}); crossmod follows redirects only within the "
                "host it was given: use the final URL as the location if you trust it"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_HTTP = urllib.request.build_opener(_SameHostRedirects)


class _HttpBody:
    """An HTTP response read up to its Content-Length: a connection closed early raises (and is retried) instead of
    looking like the end of the file (http.client's `read(n)` returns b"" then)."""

    def __init__(self, response: Any) -> None:
        self.response = response

    def read(self, n: int = -1) -> bytes:
        chunk = self.response.read(None if n < 0 else n)
        if not chunk and n != 0 and self.response.length:
            raise ConnectionError(f"the connection closed with {self.response.length} bytes of the response outstanding")
        return chunk

    def close(self) -> None:
        self.response.close()


def open_http(url: str) -> BinaryIO:
    """A binary stream of an http(s) URL; a client error (4xx but 408/429) is permanent, named with its status."""
    try:
        return _HttpBody(_HTTP.open(url, timeout=HTTP_TIMEOUT_S))  # type: ignore[return-value]
    except urllib.error.HTTPError as error:
        if 300 <= error.code < 400:  # urllib refused the redirect itself (to file://, ftp:// …): nothing to retry
            target = error.headers.get("Location", "?") if error.headers else "?"
            raise PermanentRemoteError(
                f"{url}: redirected to {target}, a scheme crossmod's HTTP reader does not follow; not followed: use the "
                "final URL as the location if you trust it"
            ) from None
        if 400 <= error.code < 500 and error.code not in (408, 429):
            raise PermanentRemoteError(f"{url}: HTTP {error.code} {error.reason}: check the dataset location") from None
        raise


def is_remote(location: str | os.PathLike[str]) -> bool:
    """A URL (`scheme://…`) or a `pipe:` command, rather than a local path."""
    text = str(location)
    return text.startswith("pipe:") or re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text) is not None and not text.startswith("file://")


def file_url(location: str, name: str) -> str:
    """The URL of file `name` in the remote dataset `location` (a shard or manifest name from a manifest)."""
    if not SAFE_NAME.fullmatch(name):
        raise ValueError(
            f"{location}: file name {name!r} is not a plain name (letters, digits, '.', '_', '-'); refused for a remote location"
        )
    if location.startswith("pipe:"):
        if "{name}" not in location:
            raise ValueError(
                f"pipe: location {location!r} needs '{{name}}' where each file's name goes, e.g. 'pipe:aws s3 cp s3://b/ds/{{name}} -'"
            )
        return location.replace("{name}", shlex.quote(name))
    return location.rstrip("/") + "/" + name


def open_remote(url: str) -> BinaryIO:
    """A binary stream of `url`: WebDataset's own handlers for the schemes it knows, fsspec for the others."""
    from webdataset.gopen import gopen, gopen_schemes

    scheme = "pipe" if url.startswith("pipe:") else urlparse(url).scheme
    if scheme in ("http", "https"):
        return open_http(url)
    if scheme in gopen_schemes:
        return gopen(url, "rb")
    import fsspec

    try:
        return fsspec.open(url, "rb").open()
    except (ImportError, ValueError) as error:
        raise RemoteReadError(f"{url}: no reader for {scheme}:// ({error}); install the fsspec backend (e.g. s3fs, gcsfs)") from None


class RemoteStream:
    """`read(n)` over a remote file, reopened and resumed at the same byte after a failure."""

    def __init__(
        self,
        url: str,
        size: int | None = None,
        retries: int = RETRIES,
        backoff: float = BACKOFF_S,
        opener: Callable[[str], BinaryIO] = open_remote,
    ) -> None:
        self.url, self.size, self.retries, self.backoff, self.opener = url, size, retries, backoff, opener
        self.position, self.attempts = 0, 0
        self.started = time.perf_counter()
        self._stream: BinaryIO | None = None

    def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes (all the rest for -1); fewer only at the end of the file."""
        parts: list[bytes] = []
        wanted = n
        while wanted != 0:
            chunk = self._read_once(CHUNK if wanted < 0 else wanted)
            if not chunk:
                break
            parts.append(chunk)
            self.position += len(chunk)
            if wanted > 0:
                wanted -= len(chunk)
        return b"".join(parts)

    def _read_once(self, n: int) -> bytes:
        while True:
            try:
                if self._stream is None:
                    self._open()
                chunk = self._stream.read(n)  # type: ignore[union-attr]
                if chunk or self.size is None or self.position >= self.size:
                    return chunk
                cause = f"the connection ended at byte {self.position} of {self.size}"
            except PermanentRemoteError:
                self.close()
                raise
            except Exception as error:  # noqa: BLE001 - every transport error is retried, then reported with its cause
                cause = f"{type(error).__name__}: {error}"
            self._retry(cause)

    def _open(self) -> None:
        stream = self.opener(self.url)
        skipped = 0
        while skipped < self.position:  # resume: the bytes already delivered are read past, not delivered again
            chunk = stream.read(min(CHUNK, self.position - skipped))
            if not chunk:
                stream.close()
                raise RemoteReadError(f"{self.url}: ended at byte {skipped} on reopening, before byte {self.position}")
            skipped += len(chunk)
        self._stream = stream

    def _retry(self, cause: str) -> None:
        self.close()
        self.attempts += 1
        if self.attempts > self.retries:
            raise RemoteReadError(f"{self.url}: read failed at byte {self.position} after {self.attempts} attempts ({cause})")
        wait = self.backoff * 2 ** (self.attempts - 1)
        log.warning(
            "%s: %s; retrying from byte %d in %.1f s (attempt %d of %d)",
            self.url,
            cause,
            self.position,
            wait,
            self.attempts + 1,
            self.retries + 1,
        )
        time.sleep(wait)

    def close(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
            except Exception:  # noqa: BLE001 - a failed transport's close (e.g. curl's exit status) is what _retry reports
                pass
            self._stream = None

    def report(self) -> None:
        """Progress of this process's remote reading: a line for the first file, then every `PROGRESS_EVERY`
        (each file at DEBUG); retries are always reported as they happen."""
        seconds = time.perf_counter() - self.started
        PROGRESS.update(files=PROGRESS["files"] + 1, bytes=PROGRESS["bytes"] + self.position, seconds=PROGRESS["seconds"] + seconds)
        log.debug("read %s: %d bytes in %.2f s", self.url, self.position, seconds)
        if PROGRESS["files"] == 1 or PROGRESS["files"] % PROGRESS_EVERY == 0:
            log.info(
                "remote shards read by this process: %d files, %.1f MB, %.1f MB/s (latest %s)",
                PROGRESS["files"],
                PROGRESS["bytes"] / 1e6,
                PROGRESS["bytes"] / 1e6 / max(PROGRESS["seconds"], 1e-9),
                self.url,
            )


def fetch(url: str, retries: int | None = None, backoff: float | None = None, limit: int | None = None) -> bytes:
    """The whole file at `url` (a manifest): read with the same retries as a shard, refused past `limit` bytes
    (`MAX_MANIFEST_BYTES`) and when empty (what a failed transfer leaves)."""
    limit = MAX_MANIFEST_BYTES if limit is None else limit
    stream = RemoteStream(url, retries=RETRIES if retries is None else retries, backoff=BACKOFF_S if backoff is None else backoff)
    parts: list[bytes] = []
    try:
        while chunk := stream.read(min(CHUNK, limit + 1 - stream.position)):
            parts.append(chunk)
            if stream.position > limit:
                raise PermanentRemoteError(
                    f"{url}: more than {limit:,} bytes, the bound for a manifest (src/crossmod/data/remote.py MAX_MANIFEST_BYTES); "
                    "check the location points at a crossmod dataset"
                )
    finally:
        stream.close()
    if not parts:
        raise RemoteReadError(f"{url}: empty (the server sent nothing); check the dataset location")
    return b"".join(parts)


def download(url: str, target: Path, size: int | None, sha256: str, retries: int = RETRIES, backoff: float = BACKOFF_S) -> Path:
    """Copy `url` to `target` through a temporary file, checked against the manifest's size and sha256
    before it takes its name: a cache never holds a partial or corrupt shard under a shard's name. The
    temporary file is created exclusively (src/crossmod/data/cache_files.py): a link planted in the cache is never followed."""
    stream = RemoteStream(url, size, retries, backoff)
    digest = hashlib.sha256()
    try:
        with atomic_file(target, "remote shard cache") as out:
            while chunk := stream.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
            stream.report()
            if size is not None and stream.position != size:
                raise RemoteReadError(f"{url}: {stream.position} bytes where the manifest records {size}")
            if digest.hexdigest() != sha256:
                raise RemoteReadError(f"{url}: does not match its manifest checksum (corrupt on the server or in transit)")
    finally:
        stream.close()
    return target


def cached_copy(item: dict[str, Any], cache_dir: Path) -> Path:
    """The verified local copy of a remote shard item in `cache_dir`, downloaded once; a cached file of the
    wrong size or checksum is replaced, never read. Checked here, before any sample is read from it."""
    from crossmod.data.shards import sha256_file  # shards imports this module

    target = cache_dir / item["name"]
    refuse_links(target, "remote shard cache")
    if target.is_file() and target.stat().st_size == item.get("bytes", target.stat().st_size) and sha256_file(target) == item["sha256"]:
        return target
    if target.exists():
        log.warning("%s: cached copy differs from the manifest (size or checksum); downloading it again", target)
        target.unlink()
    return download(item["url"], target, item.get("bytes"), item["sha256"], item.get("retries", RETRIES), item.get("backoff", BACKOFF_S))

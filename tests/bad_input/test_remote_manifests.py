"""A remote dataset's manifest from a server that fails or misbehaves: a clear error naming the URL
(404, refused connection, a manifest over the size bound, a redirect to another host) or a bounded
retry that recovers (a connection dropped halfway), never "invalid JSON" from what the failure left."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import crossmod.data.remote as remote
from crossmod.data.remote import RemoteReadError
from crossmod.data.shards import read_manifest
from tests.fixtures.shard_server import serve
from tests.fixtures.small import small_synthetic


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return small_synthetic(tmp_path_factory.mktemp("served"), num_groups=6, samples_per_shard=20)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_S", 0.01)
    monkeypatch.setattr(remote, "RETRIES", 2)


def test_a_missing_manifest_is_a_404_naming_the_url_and_not_retried(dataset):
    directory, _ = dataset
    with serve(directory.parent) as (base, faults):
        url = f"{base}/no-such-dataset"
        with pytest.raises(RemoteReadError, match=rf"{url}/manifest.json: .*404"):
            read_manifest(url)
        assert faults.requests["manifest.json"] == 0  # the handler counts files it found; nothing was served


def test_a_refused_connection_names_the_url_after_a_bounded_retry(dataset):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}/ds"
    with pytest.raises(RemoteReadError, match=rf"{url}/manifest.json: read failed at byte 0 after 3 attempts .*(refused|Errno)"):
        read_manifest(url)


def test_a_manifest_dropped_halfway_is_read_again_whole(dataset):
    directory, manifest = dataset
    with serve(directory.parent) as (base, faults):
        faults.drop_after["manifest.json"] = (200, 1)
        assert read_manifest(f"{base}/{directory.name}")["fingerprint"] == manifest["fingerprint"]
        assert faults.requests["manifest.json"] == 2


def test_a_manifest_over_the_size_bound_is_refused(dataset, monkeypatch):
    directory, _ = dataset
    monkeypatch.setattr(remote, "MAX_MANIFEST_BYTES", 1000)
    with serve(directory.parent) as (base, _faults):
        url = f"{base}/{directory.name}/manifest.json"
        with pytest.raises(RemoteReadError, match=rf"{url}: more than 1,000 bytes, the bound for a manifest"):
            read_manifest(f"{base}/{directory.name}")


@contextmanager
def redirecting_to(target: str) -> Iterator[str]:
    """A server whose every path answers 302 to the same path under `target`."""

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_to_another_host_is_refused(dataset):
    directory, _ = dataset
    with serve(directory.parent) as (internal, faults):
        internal_host = internal.replace("127.0.0.1", "localhost")  # another host name: what the redirect may not reach
        with redirecting_to(internal_host) as public:
            with pytest.raises(RemoteReadError, match=rf"{public}/{directory.name}/manifest.json: redirected to another host"):
                read_manifest(f"{public}/{directory.name}")
        assert faults.requests["manifest.json"] == 0


def test_a_redirect_to_a_local_file_is_refused_at_once(dataset, caplog):
    """urllib itself refuses a redirect to file:// (an HTTPError carrying the 302): permanent, never retried."""
    directory, _ = dataset
    with redirecting_to(f"file://{directory.parent}") as public:
        url = f"{public}/{directory.name}/manifest.json"
        with pytest.raises(RemoteReadError, match=rf"{url}: redirected to file://.*not followed"):
            read_manifest(f"{public}/{directory.name}")
    assert "retrying" not in caplog.text

"""Conversion is idempotent and interruption-safe: reruns give byte-identical shards and manifests."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import time

import pytest

from crossmod.data.shards import sha256_file
from tests.conftest import ROOT
from tests.data.sources import layouts
from tests.data.sources.helpers import convert, source


def digests(directory) -> dict[str, str]:
    return {path.name: sha256_file(path) for path in sorted(directory.iterdir())}


def dead_pid() -> int:
    """The id of a process that has exited: what a killed conversion leaves in its `.partial-<pid>` name."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize("dataset", ["multi3hate", "toxictags"])
def test_rerun_and_run_after_a_kill_give_byte_identical_shards(dataset, tmp_path):
    raw = layouts.BUILDERS[dataset](tmp_path / "raw")
    first = tmp_path / "a" / "shards"
    convert(source(dataset, raw), first)
    reference = digests(first)
    assert len(reference) > 2  # several shards and the manifest
    with tarfile.open(first / "all-000000.tar" if dataset == "multi3hate" else first / "train-000000.tar") as tar:
        assert {member.mtime for member in tar} == {0}  # no clock in the bytes

    convert(source(dataset, raw), first)  # idempotent in place
    assert digests(first) == reference

    second = tmp_path / "b" / "shards"
    leftover = second.with_name(f"shards.partial-{dead_pid()}")
    leftover.mkdir(parents=True)
    (leftover / "train-000000.tar").write_bytes(b"half a shard")
    convert(source(dataset, raw), second)
    assert not leftover.exists()  # the killed run's debris is gone
    assert digests(second) == reference


SLOW_CONVERSION = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tests.data.sources.helpers import convert, source

    src = source("toxictags", Path(sys.argv[1]))
    records = src.records
    def slowly():
        for record in records():
            time.sleep(0.3)
            yield record
    src.records = slowly
    convert(src, Path(sys.argv[2]), maxcount=2)
    """
)


def test_a_really_killed_conversion_is_redone_identically(tmp_path):
    raw = layouts.toxictags(tmp_path / "raw")
    reference_dir = tmp_path / "reference" / "shards"
    convert(source("toxictags", raw), reference_dir, maxcount=2)
    out = tmp_path / "out" / "shards"
    process = subprocess.Popen(
        [sys.executable, "-c", SLOW_CONVERSION, str(raw), str(out)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    partial = out.with_name(f"shards.partial-{process.pid}")
    deadline = time.time() + 60
    while not (partial.is_dir() and list(partial.glob("*.tar"))) and time.time() < deadline:
        time.sleep(0.05)
    process.kill()
    process.wait()
    assert partial.is_dir() and not out.exists()  # killed mid-way: only the partial directory
    convert(source("toxictags", raw), out, maxcount=2)
    assert not partial.exists()
    assert digests(out) == digests(reference_dir)

"""A process's peak resident set size from the kernel's own mark (Linux): reset it after the imports a
comparison shares, then read how high the process went."""

from __future__ import annotations

from pathlib import Path


def status_bytes(field: str) -> int:
    """A size from /proc/self/status (Linux), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS mark (VmHWM; `clear_refs` 5, Linux ≥ 4.0) and return the resident size now."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_bytes("VmRSS")


def peak_rss() -> int:
    return status_bytes("VmHWM")

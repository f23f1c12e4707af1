"""Cache entries are signed with a key only their writer's user holds, so a planted entry is never read as ours.

A cache entry is named by a digest of its input (the image's bytes and settings), and checked against a checksum of its
own content. Neither stops someone who can write in a shared cache folder: they can put the features or OCR text of one
image under another image's name and recompute any checksum they can read the code of. An HMAC over the entry's name
and content, with a secret outside the cache, binds the entry to the input it was computed from; an entry without a
valid one (planted, swapped, or written before entries were signed) is treated as missing: computed again, counted, and
replaced.

The key is one file per user, `$CROSSMOD_CACHE_KEY_FILE` or `~/.config/crossmod/cache_key` (mode 0600), created on
first use. Ranks of a job on several machines read the same file where the home folder is shared; a team that shares a
cache may share the key file (and so trusts each other's entries).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
from functools import cache
from pathlib import Path

from crossmod.data.cache_files import refuse_links

KEY_BYTES = 32


def key_file() -> Path:
    configured = os.environ.get("CROSSMOD_CACHE_KEY_FILE")
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CONFIG_HOME") or "~/.config").expanduser() / "crossmod" / "cache_key"


@cache
def _secret(path: Path) -> bytes:
    refuse_links(path, "cache key file")  # the file and its folder: a planted link would hand us someone else's key
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, staging = tempfile.mkstemp(prefix=".cache_key.", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(KEY_BYTES) + "\n")
            try:
                os.link(staging, path)  # the first process to publish wins; the others read its key
            except FileExistsError:
                pass
        finally:
            os.unlink(staging)
    refuse_links(path, "cache key file")  # planted between the check above and the link
    text = path.read_text(encoding="ascii", errors="replace").strip()
    if len(text) < 2 * KEY_BYTES or any(c not in "0123456789abcdef" for c in text):
        raise ValueError(f"{path}: not a crossmod cache key ({2 * KEY_BYTES} hex digits); delete it and a new one is made")
    return bytes.fromhex(text)


def entry_mac(*parts: str | bytes) -> str:
    """HMAC-SHA256 of the parts (names and content of one entry) under this user's cache key."""
    message = b"\0".join(part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part for part in parts)
    return hmac.new(_secret(key_file()), message, hashlib.sha256).hexdigest()


def mac_matches(expected: object, *parts: str | bytes) -> bool:
    return isinstance(expected, str) and hmac.compare_digest(expected, entry_mac(*parts))

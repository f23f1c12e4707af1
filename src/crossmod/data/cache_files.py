"""Every file and folder crossmod writes into a cache goes through here, because a cache may be shared.

Anyone who can write in a cache folder (a group's `data.cache_dir`, a shared `~/.cache`) can plant a
symlink where a writer is about to open a predictable name, and a writer that follows it overwrites a
file outside the cache. So:
- a temporary file is created exclusively (`tempfile.mkstemp`: a fresh random name, O_CREAT|O_EXCL)
  in the target's own folder; a temporary folder is made inside a fresh private folder
  (`tempfile.mkdtemp`, mode 0700), so nothing planted is ever opened;
- a target, or the folder it goes in, that is a symlink is refused, naming it and the fix;
- the finished file or folder takes its name with `os.replace`, which replaces a name, never what a
  link points at; appends (the OCR cache's log) open with O_NOFOLLOW.
Finished files get the permissions a plain `open` would give them (the umask's), not mkstemp's 0600.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_UMASK = os.umask(0o022)
os.umask(_UMASK)


class LinkedCachePath(OSError):
    """A cache target or folder that is a symlink; the message names it, where it points and the fix."""


def refuse_links(target: Path, what: str) -> None:
    """Refuse `target` or its folder when either is a symlink (checked before anything is opened)."""
    for path in (target.parent, target):
        if path.is_symlink():
            raise LinkedCachePath(
                f"{path}: the {what} is a symbolic link (to {os.readlink(path)}); crossmod never writes or reads a cache "
                f"through a link: remove the link, or set the cache location to the real folder"
            )


@contextmanager
def atomic_file(target: Path, what: str, user_folder: bool = False) -> Iterator[BinaryIO]:
    """A binary handle on an exclusively created temporary file beside `target`; renamed to `target` on success,
    removed on failure, so the target's name never holds half a file. `user_folder`: the folder is one the user
    chose (a dataset or run folder, which may be their own link), so links are not refused; the temporary name
    is still exclusive and the rename still replaces a name, not a link's target."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not user_folder:
        refuse_links(target, what)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_file(target: Path, data: bytes, what: str, user_folder: bool = False) -> Path:
    """`data` as the whole of `target`, written through `atomic_file`."""
    with atomic_file(target, what, user_folder) as handle:
        handle.write(data)
    return Path(target)


@contextmanager
def atomic_dir(target: Path, what: str) -> Iterator[Path]:
    """A folder path (not yet created) inside a fresh private folder beside `target`: fill it, and on success
    it replaces `target` (an existing folder there is removed first); on failure it is removed."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(target, what)
    private = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-{os.getpid()}-", dir=target.parent))
    try:
        staging = private / f"{target.name}.partial"
        yield staging
        refuse_links(target, what)
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(private, ignore_errors=True)


def exclusive_dir(path: Path, what: str) -> Path:
    """Create `path` afresh and exclusively (`os.mkdir` fails on anything there): whatever a dead run left at the
    name is removed first without following a link, so a predictable staging name cannot be redirected."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(path.parent / "_", what)  # the folder it goes in
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.mkdir()
    return path


def append_line(target: Path, line: str, what: str) -> None:
    """Append one line to a log-like cache (created if missing), durably; a symlink at `target` is refused."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    refuse_links(target, what)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as error:  # ELOOP: a link planted after the check above
        raise LinkedCachePath(f"{target}: the {what} cannot be opened without following a link ({error}); remove it") from None
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        handle.write(line if line.endswith("\n") else line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


@contextmanager
def exclusive(target: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on `target` (a lock file, created if missing) while the block runs: writers of one folder
    from several processes take turns. Opened with O_NOFOLLOW and never truncated, so a link planted at its name is
    refused and no file it points at is touched; the lock goes with the process, so a killed writer never leaves it."""
    import fcntl

    target = Path(target)
    refuse_links(target, what)
    try:
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666 & ~_UMASK)
    except OSError as error:  # ELOOP: a link planted after the check above
        raise LinkedCachePath(f"{target}: the {what} cannot be opened without following a link ({error}); remove it") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def save_weights(tensors: dict, target: Path | str, metadata: dict[str, str] | None = None) -> Path:
    """`safetensors.torch.save_file`, then the permissions a plain `open` gives (the umask's): safetensors writes 0600
    whatever the umask, so a teammate could not read an export or checkpoint copied to shared storage. Every
    safetensors file crossmod writes goes through here (tests/bad_input/test_file_permissions.py scans for others)."""
    from safetensors.torch import save_file

    save_file(tensors, str(target), metadata=metadata)
    os.chmod(target, 0o666 & ~_UMASK)
    return Path(target)


def shared_permissions(folder: Path) -> None:
    """Give every file under `folder` the umask's permissions: libraries that save through safetensors
    (`save_pretrained` of Transformers and PEFT) write 0600 whatever the umask. Links are left alone."""
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~_UMASK)

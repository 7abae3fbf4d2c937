"""Reading a file of a directory being ingested, without following links (I-INGEST).

Between the scan that listed a directory and the worker that reads a file, anything may have been swapped:
the file for a symlink to `/etc/passwd`, a folder on its path for a symlink elsewhere, the file for a FIFO
that would block the only worker forever. So every component is opened relative to the directory with
`O_NOFOLLOW` (folders with `O_DIRECTORY`), the file with `O_NONBLOCK` (a FIFO opens at once instead of
waiting for a writer), and the opened descriptor must be a regular file (`fstat`, after the open: what is
checked is what is read). A regular file with another name (a hard link: `st_nlink` > 1) is refused like a
symlink, since it may be a file from outside the directory. Its size is bounded before a byte is read."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import PurePosixPath

from .extraction import ExtractionError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)


def read_regular_file(root: str, relative: str, max_bytes: int) -> bytes:
    """The bytes of `root/relative`, opened component by component without following a link: a link (a
    hard link included), FIFO, device or directory is `not_a_file`, a missing file `not_found`, one over
    `max_bytes` `too_large` (before reading)."""
    parts = PurePosixPath(relative).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or PurePosixPath(relative).is_absolute():
        raise ExtractionError("not_a_file")
    fd = _open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC, None)
    try:
        for part in parts[:-1]:
            inner = _open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, fd)
            os.close(fd)
            fd = inner
        file_fd = _open(parts[-1], os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _NOCTTY | _CLOEXEC, fd)
    finally:
        os.close(fd)
    try:
        return _read_bounded(file_fd, max_bytes)
    finally:
        os.close(file_fd)


def _open(name: str, flags: int, dir_fd: int | None) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise ExtractionError("not_found") from None
    except OSError as exc:
        # ELOOP: a symlink where O_NOFOLLOW forbids one; ENOTDIR: a file (or link) where a folder was.
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            raise ExtractionError("not_a_file") from None
        raise ExtractionError("not_found") from None


def _read_bounded(fd: int, max_bytes: int) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        raise ExtractionError("not_a_file")  # a hard link may be a file from outside the directory
    if info.st_size > max_bytes:
        raise ExtractionError("too_large")
    os.set_blocking(fd, True)  # a regular file: reads never wait for a writer
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:  # grown since fstat
            raise ExtractionError("too_large")
        chunks.append(chunk)

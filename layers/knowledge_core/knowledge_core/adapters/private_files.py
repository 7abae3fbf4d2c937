"""Files only their owner can read (G-LOCAL): the embedded state, index and caches hold every
tenant's documents, the ledgers and the token secret, so they are 0600 in a 0700 directory whatever the
umask. The mode is given at creation (a umask can only remove bits, never add them), and an existing file
or directory with wider bits is narrowed when it is opened again."""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIRECTORY_MODE = 0o700
OWNER_BITS = 0o700  # what a tree keeps of each mode: its owner's read, write and execute
# SQLite creates these beside a database with the database file's own mode; older ones are narrowed here.
SQLITE_SIDECARS = ("-wal", "-shm", "-journal")


def private_path(path: str | Path, *, directory: bool = False) -> Path:
    """Create `path` (an empty file, or a directory with its parents) readable by its owner only, or narrow
    an existing one to that. A SQLite database's sidecars that exist are narrowed with it. `:memory:` and
    `file:` URIs are not paths and are returned as they are."""
    target = Path(path)
    if not names_a_file(path):
        return target
    if directory:
        target.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
        _narrow(target, DIRECTORY_MODE)
        return target
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE))
    except FileExistsError:
        _narrow(target, FILE_MODE)
    except OSError:  # no such directory, not writable: the caller's open reports it in its own words
        return target
    for suffix in SQLITE_SIDECARS:
        sidecar = target.with_name(target.name + suffix)
        if sidecar.exists():
            _narrow(sidecar, FILE_MODE)
    return target


def private_tree(root: str | Path) -> Path:
    """`root` and everything under it narrowed to its owner: group and other bits dropped from every
    directory and file (files 0600, directories 0700; a built program keeps its owner's execute bit).
    Symlinks are left alone and not followed; a missing `root` is left missing."""
    root = Path(root)
    if not root.exists():
        return root
    _narrow(root, OWNER_BITS)
    for directory, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            _narrow(Path(directory) / name, OWNER_BITS)
    return root


def names_a_file(path: str | Path) -> bool:
    """Whether a SQLite database name is a file path: `:memory:` is not, nor is a `file:` URI (whatever
    it opens, it is no path to create, narrow or put files beside)."""
    return not (str(path) == ":memory:" or str(path).startswith("file:"))


def _narrow(path: Path, mode: int) -> None:
    """Drop group and other bits; a symlink's target is not ours to change (lstat, no follow)."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return
    if stat.S_IMODE(info.st_mode) & ~mode:
        os.chmod(path, stat.S_IMODE(info.st_mode) & mode)

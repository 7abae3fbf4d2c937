"""The SQLite library every embedded store of this process uses.

`pysqlite3` (PyPI `pysqlite3-binary`, the project's `embedded` extra: the standard library's `sqlite3`
module built against a current SQLite, 3.51 today) when it is installed and newer than the library Python
links, else the standard library's `sqlite3`. Both speak the same DB-API with the same exceptions' names, so
the code is one. What the newer library buys, measured on the scale corpus (bench/fts_floor_bench.py, one
process, interleaved): the FTS5 top-k by `bm25()` — the floor of every embedded search — in 0.74-0.82x the
time of Debian's 3.40 (whose build also omits SQLite's lookaside allocator), with the same rows and scores.
Its build keeps temporary tables in memory (SQLITE_TEMP_STORE=3): a re-index's `kept_vectors` too.

Every connection of a process to one of our files must come from this module: two copies of SQLite in one
process each keep their own POSIX locks, and closing a file in one drops the locks the other holds on it
(SQLite's "How To Corrupt An SQLite Database File", multiple copies of SQLite in one application). Files
written by either library are read by the other (the file format and FTS5's are unchanged between them).
`KB_SQLITE_LIBRARY=stdlib` (read at import) keeps the standard library's: for a comparison, or should the
newer one misbehave.
"""

from __future__ import annotations

import os
import sqlite3 as _stdlib
from typing import TYPE_CHECKING

LIBRARY_ENV = "KB_SQLITE_LIBRARY"  # "stdlib": the standard library's, whatever else is installed


def _choose() -> object:
    if os.environ.get(LIBRARY_ENV, "").strip().lower() == "stdlib":
        return _stdlib
    try:
        from pysqlite3 import dbapi2 as newer  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # not installed (it is a Linux x86-64 wheel): the standard library
        return _stdlib
    return newer if newer.sqlite_version_info >= _stdlib.sqlite_version_info else _stdlib


if TYPE_CHECKING:  # one API: typed as the standard library's module
    import sqlite3 as sqlite3
else:
    sqlite3 = _choose()

__all__ = ["sqlite3"]

"""The ranking function of the embedded full-text index: `kb_bm25` (kb_rank.c) where it can be built and
loaded, else FTS5's own `bm25()` — the same scores to the bit (tests/unit/test_sqlite_rank.py).

`kb_bm25` is bm25() with each row's token count remembered per connection instead of read from FTS5's
%_docsize table for every matching row, which is most of the full-text top-k's time
(bench/fts_floor_bench.py). It is a SQLite loadable extension, built once per user with the system's C
compiler (`cc`, else `gcc`) against SQLite's extension header (Debian: `libsqlite3-dev`) into
`$KB_CACHE_DIR` (else `$XDG_CACHE_HOME`, `~/.cache`)`/agent-knowledge/sqlite/<hash of the source>/`
(0700), and loaded into each connection of the search index. It needs the SQLite of adapters/sqlite/driver.py
to load extensions (`pysqlite3` does; Debian's standard library build does not). Without a compiler, the
header or that SQLite — or with `KB_SQLITE_RANK=bm25` — the index ranks with `bm25()`; one log line says why.
Before a process uses it, the extension must load and score a sample exactly as `bm25()` does.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from ...observability import logger
from .driver import sqlite3

FUNCTION = "kb_bm25"
BUILTIN = "bm25"
RANK_ENV = "KB_SQLITE_RANK"  # "bm25": FTS5's own function, whatever can be built
LIBRARY = "kbrank.so"  # its entry point, sqlite3_kbrank_init, is what SQLite derives from this name
COMPILE_TIMEOUT_S = 120


def cache_root() -> Path:
    base = os.environ.get("KB_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-knowledge" / "sqlite"


def _source() -> bytes:
    return resources.files(__package__).joinpath("kb_rank.c").read_bytes()


def _compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def _build(target: Path, source: bytes, compiler: str) -> str | None:
    """Compile `source` into `target` (atomically: another process may build it at the same time); None,
    else why not."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "kb_rank.c"
        src.write_bytes(source)
        out = Path(tmp) / LIBRARY
        try:
            done = subprocess.run(
                [compiler, "-O2", "-fPIC", "-shared", "-o", str(out), str(src), "-lm"],
                capture_output=True,
                text=True,
                timeout=COMPILE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{Path(compiler).name} did not run ({type(exc).__name__})"
        if done.returncode != 0:
            missing_header = "sqlite3ext.h" in done.stderr
            return (
                "SQLite's extension header is missing (libsqlite3-dev)"
                if missing_header
                else (f"{Path(compiler).name} failed (exit {done.returncode})")
            )
        out.chmod(0o700)  # whatever the umask: a library others may write is never loaded (_not_private)
        os.replace(out, target)
    return None


def library() -> Path | None:
    """The built extension (built now when missing) once it ranks a sample as bm25() does, or None."""
    return _choice()[0]


@functools.cache
def _choice() -> tuple[Path | None, str]:
    """The extension, or None with why not (said once in the log)."""
    if os.environ.get(RANK_ENV, "").strip().lower() == BUILTIN:
        return None, f"{RANK_ENV}=bm25"
    source = _source()
    target = cache_root() / hashlib.sha256(source).hexdigest()[:16] / LIBRARY
    why = None
    if not hasattr(sqlite3.Connection, "enable_load_extension"):  # nothing to build for
        why = "this Python's SQLite module cannot load extensions"
    elif not target.is_file():
        compiler = _compiler()
        why = _build(target, source, compiler) if compiler else "no C compiler (cc or gcc) on PATH"
    why = why or _not_private(target) or _refused(target)
    if why is None:
        return target, FUNCTION
    logger.info("full-text ranking by FTS5's bm25(): %s", why)
    return None, why


def described() -> str:
    """The ranking function for a banner: `kb_bm25`, or `bm25()` and why."""
    path, why = _choice()
    return FUNCTION if path is not None else f"bm25(): {why}"


def _not_private(path: Path) -> str | None:
    """Why a built library may not be loaded: only one this user owns in a directory no one else may write."""
    for item in (path.parent, path):
        st = item.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return f"{item} is not this user's alone (owner or group/other write permission)"
    return None


def function() -> str:
    """The ranking function every connection of the search index has: kb_bm25 where it loads, else bm25."""
    return FUNCTION if library() is not None else BUILTIN


def install(conn: sqlite3.Connection) -> None:
    """Load the extension into a new connection of the search index (nothing without one; an error here,
    after `library()` loaded it into a test connection, is not expected and not hidden)."""
    path = library()
    if path is not None:
        _load(conn, path)


def _load(conn: sqlite3.Connection, path: Path) -> None:
    conn.enable_load_extension(True)
    try:
        conn.load_extension(str(path))
    finally:
        conn.enable_load_extension(False)


_SAMPLE = [
    ("alpha beta", "beta gamma gamma"),
    ("beta", "alpha alpha delta"),
    ("gamma", "beta beta beta alpha"),
]


def _refused(path: Path) -> str | None:
    """Why `path` cannot stand in for bm25() in this process (None: it loads and scores a sample alike)."""
    conn = sqlite3.connect(":memory:")
    try:
        _load(conn, path)
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(a, b)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", _SAMPLE)
        scores = [
            conn.execute(
                f"SELECT rowid, {f}(t, 2.0, 1.0) FROM t WHERE t MATCH 'alpha OR gamma' ORDER BY rowid"
            ).fetchall()
            for f in (BUILTIN, FUNCTION)
        ]
        return None if scores[0] == scores[1] else f"{path} scores unlike bm25()"
    except sqlite3.Error as exc:  # built for another SQLite, a damaged file, no FTS5
        return f"{path} not loaded ({type(exc).__name__})"
    finally:
        conn.close()

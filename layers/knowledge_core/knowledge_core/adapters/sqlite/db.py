"""The one way the embedded adapters use SQLite: a file in WAL mode, one connection per thread, a busy
timeout, `BEGIN IMMEDIATE` for every read-modify-write, forward-only schema migrations, and storage
faults mapped to one typed error.

Several processes may share a file (two `kb serve` on one `--state`, or `kb serve`'s worker processes):
SQLite's own locking serialises their write transactions; readers never block writers in WAL mode."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ...domain.errors import SourceFailure
from ..private_files import names_a_file, private_path
from .driver import sqlite3

BUSY_TIMEOUT_S = 10.0
# Primary result codes of a storage fault that is not the statement's: the file busy or locked past the
# busy timeout, an I/O error, a full disk, a file that cannot be opened, a WAL locking protocol error. A
# write that meets one is a transient `SourceFailure` (an ingestion job waits and retries it without
# counting an attempt); anything else (no such table, a constraint, SQL) is a bug and propagates as is.
_STORAGE_FAULT_CODES = frozenset(
    {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL}
    | {sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL}
)

Migration = Callable[[sqlite3.Connection], None]


def storage_failure(exc: sqlite3.Error) -> SourceFailure | None:
    """The typed failure of a storage fault (`_STORAGE_FAULT_CODES`, extended codes by their primary
    one), None for any other database error. Names only SQLite's result code, never the statement."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None or code & 0xFF not in _STORAGE_FAULT_CODES:
        return None
    return SourceFailure("unavailable", f"sqlite could not take the write ({exc.sqlite_errorname})")


@contextmanager
def write_faults() -> Iterator[None]:
    """A write the file could not take (`storage_failure`) is raised as its SourceFailure."""
    try:
        yield
    except sqlite3.Error as exc:
        failure = storage_failure(exc)
        if failure is None:
            raise
        raise failure from exc


def statements(conn: sqlite3.Connection, script: str) -> None:
    """Run `;`-separated DDL inside the current transaction (`executescript` would commit it first)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


class SchemaError(RuntimeError):
    """The file is not ours or is newer than this code: a one-line message that names it and what to do."""


class SqliteDatabase:
    """One SQLite file. `application_id` marks it as ours; `user_version` is its schema version, moved
    forward by `migrations[i]` (schema i -> i+1) inside one transaction each."""

    def __init__(
        self,
        path: str | Path,
        *,
        application_id: int | None = None,
        migrations: Sequence[Migration] = (),
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        on_connect: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self.path = str(private_path(path))  # 0600 before SQLite creates it with the umask's mode (M6)
        self._busy_timeout_s = busy_timeout_s
        self._on_connect = on_connect  # each new connection, before its first use (the index's ranking)
        self._local = threading.local()
        self._application_id = application_id
        self._migrations = list(migrations)
        if application_id is not None:  # without one, the owner keeps its own schema (the search index)
            self._migrate()

    @property
    def on_disk(self) -> bool:
        """Whether `path` is a file path, beside which files may be kept (the saved dense graphs): not
        `:memory:`, nor a `file:` URI."""
        return names_a_file(self.path)

    @property
    def schema_version(self) -> int:
        return len(self._migrations)

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
            if self._on_connect is not None:
                self._on_connect(conn)
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: `BEGIN IMMEDIATE` takes the write lock up front (no upgrade deadlocks);
        COMMIT on success, ROLLBACK on any exception."""
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also when COMMIT itself failed (busy, full, I/O): SQLite may keep the transaction open, and
            # the connection's next BEGIN would fail on it.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement inside sees the same committed state."""
        conn = self.connection()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # --- schema -------------------------------------------------------------------------------------
    def _migrate(self) -> None:
        """Check and migrate on a plain connection first: a file that is not ours is left byte for byte
        as it was (not even switched to WAL)."""
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout_s, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_and_migrate(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise SchemaError(f"{self.path} cannot be opened as a SQLite database ({exc})") from None
        finally:
            conn.close()

    def _check_and_migrate(self, conn: sqlite3.Connection) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if app_id != self._application_id and (app_id != 0 or tables):
            raise SchemaError(
                f"{self.path} is not a file of this service (application_id {app_id}): "
                "move it away or point --state at another directory"
            )
        if version > self.schema_version:
            raise SchemaError(
                f"{self.path} has schema version {version}, newer than this kb "
                f"({self.schema_version}): upgrade agent-knowledge-service or use another --state"
            )
        for step in self._migrations[version:]:
            step(conn)
        conn.execute(f"PRAGMA application_id = {self._application_id}")
        conn.execute(f"PRAGMA user_version = {self.schema_version}")

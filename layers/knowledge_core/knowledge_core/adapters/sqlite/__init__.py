"""The embedded adapters on SQLite files: state (`state.sqlite3`: one module per port family — registry,
sessions and runs in `state`, then `turns`, `ledger`, `jobs`, over `store`'s schema and base class) and
search (`search`: FTS5 + the exact dense scan), both on `db`'s connection handling."""

from __future__ import annotations

from pathlib import Path

from ...ports import StateStores
from .db import BUSY_TIMEOUT_S, SchemaError, SqliteDatabase
from .jobs import SqliteJobStore
from .ledger import SqliteLedger
from .search import SqliteFtsBackend
from .state import SqliteState
from .store import open_state_database
from .turns import SqliteTurnStore

__all__ = [
    "SchemaError",
    "SqliteDatabase",
    "SqliteFtsBackend",
    "SqliteJobStore",
    "SqliteLedger",
    "SqliteState",
    "SqliteTurnStore",
    "open_state_database",
    "sqlite_stores",
]


def sqlite_stores(path: str | Path, *, busy_timeout_s: float = BUSY_TIMEOUT_S) -> StateStores:
    db = open_state_database(path, busy_timeout_s)
    state = SqliteState(db)
    return StateStores(
        registry=state,
        sessions=state,
        runs=state,
        turns=SqliteTurnStore(db),
        ledger=SqliteLedger(db),
        jobs=SqliteJobStore(db),
    )

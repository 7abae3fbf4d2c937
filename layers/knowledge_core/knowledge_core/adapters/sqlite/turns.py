"""Embedded state on SQLite: turn records (A-TURN idempotency)."""

from __future__ import annotations

import json
from typing import Any

from ...ports import (
    TurnRecord,
    TurnStore,
)
from .driver import sqlite3
from .store import (
    SqliteStore,
)


class SqliteTurnStore(SqliteStore, TurnStore):
    _COLUMNS = "key, request_hash, state, claim, claimed_at, expires_at, run_id, response, principal"

    @staticmethod
    def _record(row: tuple[Any, ...]) -> TurnRecord:
        key, request_hash, state, claim, claimed_at, expires_at, run_id, response, principal = row
        return TurnRecord(
            key=key,
            request_hash=request_hash,
            state=state,
            claim=claim,
            claimed_at=claimed_at,
            expires_at=expires_at,
            run_id=run_id,
            response=json.loads(response) if response is not None else None,
            principal=principal,
        )

    def _live(self, conn: sqlite3.Connection, key: str, now: float) -> TurnRecord | None:
        row = conn.execute(f"SELECT {self._COLUMNS} FROM turns WHERE key = ?", (key,)).fetchone()
        if row is None or row[5] <= now:  # an expired record counts as absent
            return None
        return self._record(row)

    def claim_turn(
        self, key: str, request_hash: str, claim: str, now: float, expires_at: int, *, principal: str | None
    ) -> TurnRecord | None:
        with self._write() as conn:
            existing = self._live(conn, key, now)
            if existing is not None:
                return existing
            conn.execute(
                f"INSERT OR REPLACE INTO turns ({self._COLUMNS}) "
                "VALUES (?, ?, 'pending', ?, ?, ?, NULL, NULL, ?)",
                (key, request_hash, claim, now, expires_at, principal),
            )
        return None

    def get_turn(self, key: str, now: float) -> TurnRecord | None:
        with self._read() as conn:
            return self._live(conn, key, now)

    def _while_held(self, key: str, claim: str, sql: str, values: tuple[Any, ...] = ()) -> bool:
        """`sql` (an UPDATE or DELETE of the turn) only while it is still pending and held by `claim`."""
        with self._write() as conn:
            return (
                conn.execute(
                    f"{sql} WHERE key = ? AND state = 'pending' AND claim = ?", (*values, key, claim)
                ).rowcount
                > 0
            )

    def set_turn_run(self, key: str, claim: str, run_id: str) -> bool:
        return self._while_held(key, claim, "UPDATE turns SET run_id = ?", (run_id,))

    def complete_turn(self, key: str, claim: str, response: dict[str, Any]) -> bool:
        blob = json.dumps(response, ensure_ascii=False, separators=(",", ":"))
        return self._while_held(key, claim, "UPDATE turns SET state = 'done', response = ?", (blob,))

    def release_turn(self, key: str, claim: str) -> None:
        self._while_held(key, claim, "DELETE FROM turns")

    def take_over_turn(self, key: str, old_claim: str, new_claim: str, now: float) -> bool:
        return self._while_held(
            key, old_claim, "UPDATE turns SET claim = ?, claimed_at = ?", (new_claim, now)
        )

"""Embedded state on SQLite: the budget ledger of agent invocation trees (R-BUDGET)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...domain.budget import (
    ChainLink,
    Citation,
    CitationDraft,
    CitationMark,
    LedgerEntry,
    Limits,
    chain_mismatch,
    charged,
    effective_chain,
    plan_citations,
    retrieval_refusal,
    with_chars,
)
from ...domain.errors import BudgetExceeded, ProtocolError
from ...ports import (
    BudgetLedger,
    ChainSnapshot,
)
from .driver import sqlite3
from .store import (
    LEDGER_TTL_SECONDS,
    SqliteStore,
    _agents,
    _placeholders,
)


class SqliteLedger(SqliteStore, BudgetLedger):
    """R-BUDGET on the state file: each phase of a tool call is one write transaction that re-reads what
    it checks, so the snapshot a caller holds is only a hint here (exact under any concurrency)."""

    _ENTRY = (
        "invocation_id, agent, parent, max_retrievals, max_queries, max_chars, retrievals, chars, "
        "per_source, deadline, seq"
    )

    @staticmethod
    def _entry(row: tuple[Any, ...]) -> tuple[LedgerEntry, int]:
        inv, agent, parent, mr, mq, mc, r, c, per_source, deadline, seq = row
        entry = LedgerEntry(inv, agent, parent, Limits(mr, mq, mc), r, c, json.loads(per_source), deadline)
        return entry, seq

    def _snapshot(
        self,
        conn: sqlite3.Connection,
        root_id: str,
        chain_ids: Sequence[str],
        agent_keys: Sequence[str] = (),
        fingerprints: Sequence[str] | None = None,
    ) -> ChainSnapshot:
        """The chain's entries; the root tree's citations (only `fingerprints`' when given)."""
        rows = conn.execute(
            f"SELECT {self._ENTRY} FROM ledger_entries WHERE root_id = ? "
            f"AND invocation_id IN ({_placeholders(chain_ids)})",
            (root_id, *chain_ids),
        ).fetchall()
        entries: dict[str, LedgerEntry] = {}
        seq = 0
        for row in rows:
            entry, entry_seq = self._entry(row)
            entries[entry.invocation_id] = entry
            if entry.invocation_id == root_id:
                seq = entry_seq
        cited: dict[str, CitationMark] = {}
        if fingerprints is None or fingerprints:
            only = "" if fingerprints is None else f" AND fingerprint IN ({_placeholders(fingerprints)})"
            cited = {
                fp: CitationMark(cid, chars)
                for fp, cid, chars in conn.execute(
                    "SELECT fingerprint, citation_id, length(content) FROM ledger_citations WHERE root_id = ?"
                    + only,
                    (root_id, *(fingerprints or ())),
                )
            }
        return ChainSnapshot(root_id, tuple(chain_ids), entries, seq, cited, _agents(conn, agent_keys))

    def open_chain(
        self, root_id: str, invocation_ids: list[str], agent_keys: Sequence[str] = ()
    ) -> ChainSnapshot:
        # Not one snapshot: every write phase below re-reads what it checks, so this read is only the
        # caller's view (for its plan, deadlines and events), and its statements need no transaction.
        # No citations: `record_citations` reads the drafts' own inside its write; reading every citation of
        # the tree here would grow with it on every call.
        with self._read() as conn:
            return self._snapshot(conn, root_id, invocation_ids, agent_keys, fingerprints=())

    def charge_retrievals(
        self, snapshot: ChainSnapshot, links: list[ChainLink], source_keys: list[str], now: float
    ) -> ChainSnapshot:
        root_id = snapshot.root_id
        ids = [link.invocation_id for link in links]
        with self._write() as conn:
            current = self._snapshot(conn, root_id, ids, fingerprints=())
            mismatch = chain_mismatch(links, current.entries)
            if mismatch:
                raise ProtocolError(mismatch)
            chain = effective_chain(links, current.entries)
            refusal = retrieval_refusal(chain, source_keys)
            if refusal:
                raise BudgetExceeded(refusal)
            after = [charged(entry, source_keys) for entry in chain]
            conn.executemany(
                "INSERT INTO ledger_entries VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (root_id, invocation_id) DO UPDATE SET "
                "retrievals = excluded.retrievals, per_source = excluded.per_source",
                [
                    (
                        root_id,
                        entry.invocation_id,
                        entry.agent,
                        entry.parent,
                        depth,
                        entry.limits.max_retrievals,
                        entry.limits.max_queries_per_source,
                        entry.limits.max_context_chars,
                        entry.retrievals,
                        entry.chars,
                        json.dumps(entry.per_source, sort_keys=True),
                        entry.deadline,
                        0,
                        int(now) + LEDGER_TTL_SECONDS,
                    )
                    for depth, entry in enumerate(after)
                ],
            )
        return ChainSnapshot(
            root_id, tuple(ids), {e.invocation_id: e for e in after}, current.seq, snapshot.cited
        )

    def record_citations(
        self, snapshot: ChainSnapshot, drafts: list[CitationDraft], now: float
    ) -> tuple[list[Citation | None], ChainSnapshot]:
        if not drafts:
            return [], snapshot
        root_id = snapshot.root_id
        fingerprints = list(dict.fromkeys(d.fingerprint for d in drafts))
        with self._write() as conn:
            current = self._snapshot(conn, root_id, snapshot.chain_ids, fingerprints=fingerprints)
            plan = plan_citations(current.chain(), current.seq, current.cited, drafts)
            if plan.created:
                ids = list(snapshot.chain_ids)
                conn.execute(
                    "UPDATE ledger_entries SET chars = chars + ?, "
                    "seq = CASE WHEN invocation_id = ? THEN ? ELSE seq END "
                    f"WHERE root_id = ? AND invocation_id IN ({_placeholders(ids)})",
                    (plan.chars, root_id, plan.seq, root_id, *ids),
                )
                conn.executemany(
                    "INSERT INTO ledger_citations VALUES (?,?,?,?,?,?,?,?,?,?)",
                    [
                        (
                            root_id,
                            citation.fingerprint,
                            citation.citation_id,
                            draft.knowledge,
                            draft.doc_id,
                            citation.content,
                            draft.retrieval_id,
                            draft.invocation_id,
                            now,
                            int(now) + LEDGER_TTL_SECONDS,
                        )
                        for citation, draft in plan.created
                    ],
                )
        entries = {e.invocation_id: with_chars(e, plan.chars) for e in current.chain()}
        cited = current.cited | {
            c.fingerprint: CitationMark(c.citation_id, len(c.content)) for c, _ in plan.created
        }
        return plan.citations, ChainSnapshot(root_id, snapshot.chain_ids, entries, plan.seq, cited)

    def entry(self, root_id: str, invocation_id: str) -> LedgerEntry | None:
        with self._read() as conn:
            return self._snapshot(conn, root_id, [invocation_id], fingerprints=()).entries.get(invocation_id)

    def tree(self, root_id: str) -> list[LedgerEntry]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {self._ENTRY} FROM ledger_entries WHERE root_id = ? ORDER BY depth, invocation_id",
                (root_id,),
            ).fetchall()
        return [self._entry(row)[0] for row in rows]

    def citations(self, root_id: str) -> list[Citation]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT citation_id, fingerprint, knowledge, content, retrieval_id FROM ledger_citations "
                "WHERE root_id = ? ORDER BY created_at, citation_id",
                (root_id,),
            ).fetchall()
        return [
            Citation(cid, fp, knowledge, content, rid, created=False)
            for cid, fp, knowledge, content, rid in rows
        ]

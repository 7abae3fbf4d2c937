"""Metadata filters on the embedded backend (SPEC §8): the indexed side table of document metadata and the
compiler of a filter to SQL over it.

`document_metadata` holds one row per scalar value (`kind` s = string, n = number, b = boolean as 0/1) and
one per list member (`kind` l), indexed by (source, key, kind, value), so a condition is an index range.
`matching_documents` compiles a filter to one SELECT of the doc ids of a source's documents that match:
set algebra over those rows (andAll = INTERSECT, orAll = UNION, notEquals / notIn = the source's documents
EXCEPT the positive condition), which the candidate query uses as `doc_id IN (…)` — SQLite builds the set
once, so the filter restricts candidates inside the query, before ranking. Values always go as bound
parameters; only this module's own fragments are SQL text."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...domain.filters import (
    NEGATIONS,
    RANGES,
    Condition,
    Filter,
    Group,
    Nothing,
    Scalar,
)
from ...ports import Vector
from ..embedding import VectorMatrix
from .candidates import Restriction
from .dense_cache import source_version
from .driver import sqlite3

if TYPE_CHECKING:
    import numpy as np

    from .dense_index import DenseIndex

METADATA_SCHEMA = """
CREATE TABLE IF NOT EXISTS document_metadata (
  source_key TEXT NOT NULL, doc_id TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL,
  text_value TEXT, num_value REAL
);
CREATE INDEX IF NOT EXISTS document_metadata_text ON document_metadata (source_key, key, kind, text_value);
CREATE INDEX IF NOT EXISTS document_metadata_num ON document_metadata (source_key, key, kind, num_value);
CREATE INDEX IF NOT EXISTS document_metadata_doc ON document_metadata (source_key, doc_id, key);
"""
_RANGE_SQL = {"greaterThan": ">", "greaterThanOrEquals": ">=", "lessThan": "<", "lessThanOrEquals": "<="}
_ROWS = "SELECT doc_id FROM document_metadata WHERE source_key = ? AND "
_UNIVERSE = "SELECT doc_id FROM documents WHERE source_key = ?"

Sql = tuple[str, list[Any]]


# --- storage ---------------------------------------------------------------------------------------


def metadata_rows(metadata: Mapping[str, Any] | None) -> list[tuple[str, str, str | None, float | None]]:
    """(key, kind, text_value, num_value) rows of a document's metadata."""
    rows: list[tuple[str, str, str | None, float | None]] = []
    for key, value in (metadata or {}).items():
        if isinstance(value, list):
            rows += [(key, "l", member, None) for member in value]
        elif isinstance(value, bool):
            rows.append((key, "b", None, 1.0 if value else 0.0))
        elif isinstance(value, str):
            rows.append((key, "s", value, None))
        else:
            rows.append((key, "n", None, float(value)))
    return rows


def write_metadata(
    conn: sqlite3.Connection, source_key: str, doc_id: str, metadata: Mapping[str, Any] | None
) -> None:
    """Replace the document's metadata rows (inside the caller's transaction, with its document row)."""
    delete_metadata(conn, source_key, doc_id)
    conn.executemany(
        "INSERT INTO document_metadata VALUES (?,?,?,?,?,?)",
        [(source_key, doc_id, *row) for row in metadata_rows(metadata)],
    )


def delete_metadata(conn: sqlite3.Connection, source_key: str, doc_id: str) -> None:
    conn.execute("DELETE FROM document_metadata WHERE source_key = ? AND doc_id = ?", (source_key, doc_id))


# --- the compiler -------------------------------------------------------------------------------------


def _typed(value: Scalar) -> tuple[str, str, Any]:
    """A scalar's kind, value column and stored value."""
    if isinstance(value, bool):
        return "b", "num_value", 1.0 if value else 0.0
    if isinstance(value, str):
        return "s", "text_value", value
    return "n", "num_value", float(value)


def _condition(c: Condition) -> Sql:
    """A positive condition on one document's metadata rows (`kind`, `text_value`, `num_value`)."""
    if c.operator == "equals":
        kind, column, value = _typed(c.value)  # type: ignore[arg-type]
        return f"key = ? AND kind = ? AND {column} = ?", [c.key, kind, value]
    if c.operator == "in":
        if not c.value:
            return "0", []
        typed = [_typed(v) for v in c.value]  # type: ignore[union-attr]
        alternatives = " OR ".join(f"(kind = ? AND {column} = ?)" for _, column, _ in typed)
        return f"key = ? AND ({alternatives})", [c.key, *(p for kind, _, v in typed for p in (kind, v))]
    if c.operator in RANGES:
        return f"key = ? AND kind = 'n' AND num_value {_RANGE_SQL[c.operator]} ?", [c.key, float(c.value)]  # type: ignore[arg-type]
    if c.operator == "startsWith":
        prefix = str(c.value)
        # The range uses the index; substr (characters, not bytes) decides.
        sql = "key = ? AND kind = 's' AND text_value >= ? AND substr(text_value, 1, ?) = ?"
        return sql, [c.key, prefix, len(prefix), prefix]
    if c.operator == "listContains":
        return "key = ? AND kind = 'l' AND text_value = ?", [c.key, c.value]
    if c.operator == "stringContains":
        return "key = ? AND kind IN ('s', 'l') AND instr(text_value, ?) > 0", [c.key, c.value]
    raise AssertionError(c.operator)


def _leaf(source_key: str, c: Condition) -> Sql:
    """The doc ids of the source whose value under `c.key` satisfies a positive condition."""
    sql, params = _condition(c)
    return f"{_ROWS}{sql}", [source_key, *params]


def matching_documents(source_key: str, node: Filter) -> Sql:
    """One SELECT of the doc ids of `source_key`'s documents that match `node` (SPEC §8: an absent key
    fails a condition, except notEquals / notIn, the source's documents minus the positive condition's)."""
    if isinstance(node, Nothing):
        return f"{_UNIVERSE} AND 0", [source_key]
    if isinstance(node, Group):
        parts = [matching_documents(source_key, f) for f in node.filters]
        joiner = " INTERSECT " if node.operator == "andAll" else " UNION "
        sql = joiner.join(f"SELECT doc_id FROM ({part})" for part, _ in parts)
        return sql, [p for _, params in parts for p in params]
    positive = NEGATIONS.get(node.operator)
    if positive is not None:
        sql, params = _leaf(source_key, Condition(positive, node.key, node.value))
        return f"{_UNIVERSE} EXCEPT SELECT doc_id FROM ({sql})", [source_key, *params]
    return _leaf(source_key, node)


def document_predicate(node: Filter, alias: str = "d") -> Sql:
    """The filter as a boolean SQL expression over one row `alias` of `documents` (correlated EXISTS on that
    document's metadata rows, by the (source, doc) index): cheap per document, for checking a bounded list
    of candidates, where `matching_documents` would build the whole admitted set."""
    if isinstance(node, Nothing):
        return "0", []
    if isinstance(node, Group):
        parts = [document_predicate(f, alias) for f in node.filters]
        joiner = " AND " if node.operator == "andAll" else " OR "
        return "(" + joiner.join(sql for sql, _ in parts) + ")", [p for _, params in parts for p in params]
    positive = NEGATIONS.get(node.operator)
    condition = Condition(positive, node.key, node.value) if positive is not None else node
    sql, params = _condition(condition)
    exists = (
        # INDEXED BY: one document's few rows, never a scan of every document's rows of that key and value.
        f"EXISTS (SELECT 1 FROM document_metadata m INDEXED BY document_metadata_doc "
        f"WHERE m.source_key = {alias}.source_key "
        f"AND m.doc_id = {alias}.doc_id AND {sql})"
    )
    return (f"NOT {exists}" if positive is not None else exists), params


def admitted_share(conn: sqlite3.Connection, source_key: str, node: Filter) -> float:
    """The share of the source's documents the filter admits (0 for an empty source): decides whether the
    search restricts its candidates to the admitted set (selective) or checks deeper candidates (broad)."""
    sql, params = matching_documents(source_key, node)
    admitted = conn.execute(f"SELECT count(*) FROM ({sql})", params).fetchone()[0]
    total = conn.execute("SELECT count(*) FROM documents WHERE source_key = ?", (source_key,)).fetchone()[0]
    return admitted / total if total else 0.0


def admitted_among(
    conn: sqlite3.Connection, source_key: str, doc_ids: Collection[str], node: Filter
) -> set[str]:
    """Which of these documents of the source the filter admits, in one statement (`document_predicate`)."""
    if not doc_ids:
        return set()
    predicate, params = document_predicate(node)
    marks = ",".join("?" * len(doc_ids))
    sql = f"SELECT d.doc_id FROM documents d WHERE d.source_key = ? AND d.doc_id IN ({marks}) AND {predicate}"
    return {doc_id for (doc_id,) in conn.execute(sql, (source_key, *doc_ids, *params))}


BROAD_SHARE = 0.1
"""From this share of a source's documents on, a filter is broad: the search checks deeper unfiltered
candidates against it instead of building its admitted set (bench/filter_bench.py measured both)."""


class AdmittedShares:
    """`admitted_share` per (source, the source's version, filter) for the searches of one database file: a
    source's version moves with every write of its documents and their metadata (`source_versions`), so an
    entry never outlives what it counted, and a search repeating a filter (an agent's `sourceFilters`) pays
    one primary-key read instead of counting the admitted set and the source. Bounded: least recently used
    out."""

    MAX_ENTRIES = 256

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, int, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def share(self, conn: sqlite3.Connection, source_key: str, node: Filter) -> float:
        # The filter's wire form, not the tree: `True == 1` in Python, never in a filter.
        key = (source_key, source_version(conn, source_key), json.dumps(node.wire()))
        with self._lock:
            if (cached := self._entries.get(key)) is not None:
                self._entries.move_to_end(key)
                return cached
        share = admitted_share(conn, source_key, node)
        with self._lock:
            self._entries[key] = share
            while len(self._entries) > self.MAX_ENTRIES:
                self._entries.popitem(last=False)
        return share


@dataclass(frozen=True)
class FilterPlan:
    """How one search applies its filter: `share` of the source's documents it admits decides."""

    node: Filter
    share: float

    @property
    def broad(self) -> bool:
        return self.share >= BROAD_SHARE

    @classmethod
    def of(
        cls, conn: sqlite3.Connection, source_key: str, node: Filter | None, shares: AdmittedShares
    ) -> FilterPlan | None:
        return None if node is None else cls(node, shares.share(conn, source_key, node))

    def deeper(self, limit: int) -> int:
        """How many unfiltered candidates hold `limit` admitted ones, at this share, with a margin."""
        return int(limit * 1.25 / max(self.share, BROAD_SHARE)) + 16


# --- the filter inside the candidate query and the dense scan ------------------------------------------

_PASSAGES_OF = "SELECT id FROM passage_rows WHERE source_key = ? AND doc_id IN ({documents})"
# Below this share of a source's passages, the dense scan multiplies only the admitted rows.
_GATHER_SHARE = 0.125
_COSINE_SCALE = 127.0 * 127.0  # int8 unit vectors are stored times 127 (adapters.embedding)


def filter_restriction(source_key: str, node: Filter) -> Restriction:
    """The candidate query's restriction (candidates.Restriction): only passages of the documents the
    filter admits, inside the FTS5 top-k — the top-k are the best matching passages, not a remainder."""
    sql, params = matching_documents(source_key, node)
    # `+rowid`: a membership test on each match, not an index constraint (SQLite would run the FTS5 query
    # once per admitted passage id: 28x slower than unfiltered with a broad filter at 10k passages).
    return Restriction(f"+passages.rowid IN ({_PASSAGES_OF.format(documents=sql)})", (source_key, *params))


def admitted_passages(conn: sqlite3.Connection, source_key: str, node: Filter) -> np.ndarray:
    """The sorted ids of the source's passages whose documents the filter admits (the dense stage's set)."""
    import numpy as np

    sql, params = matching_documents(source_key, node)
    rows = conn.execute(_PASSAGES_OF.format(documents=sql) + " ORDER BY id", (source_key, *params)).fetchall()
    return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))


def nearest_admitted(
    matrix: VectorMatrix, query: Vector, k: int, admitted: np.ndarray
) -> list[tuple[int, float]]:
    """`matrix.nearest` among the admitted passage ids only (sorted): a small set multiplies its own rows,
    a large one masks the full product — either way the nearest admitted passages, best first."""
    import numpy as np

    if query.model != matrix.model or not len(matrix) or k <= 0 or matrix.matrix.shape[1] != len(query.data):
        return []
    positions = np.searchsorted(matrix.ids, admitted)
    inside = positions < len(matrix.ids)
    positions, wanted = positions[inside], admitted[inside]
    positions = positions[matrix.ids[positions] == wanted]  # admitted passages with a vector of the model
    if not len(positions):
        return []
    q = np.frombuffer(query.data, dtype=np.int8).astype(np.float32)
    if len(positions) < _GATHER_SHARE * len(matrix.ids):
        sims = matrix.matrix[positions] @ q
    else:
        sims = (matrix.matrix @ q)[positions]
    k = min(k, len(sims))
    top = np.argpartition(-sims, k - 1)[:k]
    top = top[np.argsort(-sims[top], kind="stable")]
    return [(int(matrix.ids[positions[i]]), float(sims[i]) / _COSINE_SCALE) for i in top]


def admitted_vectors(conn: sqlite3.Connection, source_key: str, node: Filter, model: str) -> VectorMatrix:
    """The admitted passages' vectors of `model`, as an exact matrix (a selective filter on a source whose
    dense index is a graph: its few admitted passages are scanned exactly)."""
    sql, params = matching_documents(source_key, node)
    rows = conn.execute(
        "SELECT passage_id, vector FROM passage_vectors WHERE model = ? AND vector IS NOT NULL "
        f"AND passage_id IN ({_PASSAGES_OF.format(documents=sql)}) ORDER BY passage_id",
        (model, source_key, *params),
    ).fetchall()
    return VectorMatrix(model, [r[0] for r in rows], [r[1] for r in rows])


@dataclass(frozen=True)
class DenseScan:
    """How the dense stage looks for nearest passages under a filter (§8): unfiltered; selective (only
    the admitted passages are ranked: `admitted` ids of an exact matrix, or the admitted vectors as their own
    matrix); or broad (the index's nearest, their rows read only where `predicate` admits the document).
    `looks`: how many nearest passages each successive look asks for, until the stage has its documents."""

    index: DenseIndex
    looks: tuple[int, ...]
    admitted: np.ndarray | None = None
    predicate: str = ""
    params: tuple[Any, ...] = ()

    @classmethod
    def of(
        cls,
        conn: sqlite3.Connection,
        source_key: str,
        index: DenseIndex,
        plan: FilterPlan | None,
        k: int,
        deepest: int,
    ) -> DenseScan:
        if plan is None:
            return cls(index, _looks(k, min(len(index), deepest)))
        if plan.broad:  # as many as unfiltered first, then deeper by the admitted share, then the deepest
            predicate, params = document_predicate(plan.node)
            looks = _looks(k, plan.deeper(k), min(len(index), plan.deeper(deepest)))
            return cls(index, looks, None, predicate, tuple(params))
        if isinstance(index, VectorMatrix):
            admitted = admitted_passages(conn, source_key, plan.node)
            return cls(index, _looks(k, len(admitted)), admitted)
        own = admitted_vectors(conn, source_key, plan.node, index.model)
        return cls(own, _looks(k, len(own)))

    def nearest(self, query: Vector, k: int) -> list[tuple[int, float]]:
        if self.admitted is not None and isinstance(self.index, VectorMatrix):
            return nearest_admitted(self.index, query, k, self.admitted)
        return self.index.nearest(query, k)

    def rows_sql(self, sql: str) -> str:
        """The statement reading the nearest passages' rows, restricted to admitted documents when broad."""
        return f"{sql} AND {self.predicate}" if self.predicate else sql


def _looks(first: int, *deeper: int) -> tuple[int, ...]:
    """Increasing look sizes: `first`, then each deeper one that asks for more than the look before."""
    looks = [first]
    for k in deeper:
        if k > looks[-1]:
            looks.append(k)
    return tuple(looks)

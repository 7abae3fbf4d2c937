"""Embedded search backend: SQLite FTS5 on a local file, BM25 over passages rolled up to parent documents.

With an embedder, each passage also stores a vector of each model the embedder assigns it
(`passage_vectors`: the model for its script, or every covering model with cross-script embedding) and a
search fuses two candidate lists per source (domain.hybrid): BM25's and the dense stage's nearest passages
of the query vector's model. The dense index (an exact matrix up to 20k vectors, an HNSW graph above:
dense_index.py) is kept per process, source and model and follows the source's version (bumped in the same
transaction as every write of its passages), so several processes on one file stay consistent; graphs are
saved beside the file and never built in a request (dense_cache.py, dense_store.py)."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...domain.analyzer import index_terms, query_terms
from ...domain.errors import SourceFailure
from ...domain.fusion import Hit
from ...domain.models import Document, DocumentAcl, DocumentState, Viewer, stored_version
from ...domain.passages import (
    Passage,
    StoredPassage,
    document_passages,
    hit_source,
    indexed_text,
    page_starts_of,
    pages_of,
)
from ...domain.segments import fragmented
from ...ports import (
    EVIDENCE_DEPTH,
    DocumentInfo,
    Embedder,
    IndexState,
    QueryAnalysis,
    ScriptEvidence,
    SearchBackend,
    SourceQuery,
    SourceResult,
    Vector,
    across_other,
)
from ..embedding import EmbeddingTimeout, document_vectors, matching, matching_cosines, passage_text
from . import candidates, dense_index, rank
from .candidates import Restriction
from .db import BUSY_TIMEOUT_S, SqliteDatabase, statements, write_faults
from .dense_cache import DenseIndexes
from .dense_store import GraphStore
from .driver import sqlite3
from .filters import (
    METADATA_SCHEMA,
    AdmittedShares,
    DenseScan,
    FilterPlan,
    admitted_among,
    delete_metadata,
    filter_restriction,
    write_metadata,
)
from .fts_compaction import Compactor, segment_pages

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
  source_key TEXT NOT NULL, doc_id TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL,
  revision TEXT NOT NULL, status TEXT NOT NULL, acl TEXT NOT NULL, structured_source TEXT,
  updated_at REAL NOT NULL, PRIMARY KEY (source_key, doc_id)
);
CREATE TABLE IF NOT EXISTS passage_rows (
  id INTEGER PRIMARY KEY, source_key TEXT NOT NULL, doc_id TEXT NOT NULL, passage_no INTEGER NOT NULL,
  text TEXT NOT NULL, pages TEXT, heading TEXT
);
CREATE INDEX IF NOT EXISTS passage_rows_doc ON passage_rows (source_key, doc_id);
CREATE TABLE IF NOT EXISTS passage_vectors (
  passage_id INTEGER NOT NULL, model TEXT NOT NULL, vector BLOB, PRIMARY KEY (passage_id, model)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS source_versions (source_key TEXT PRIMARY KEY, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vector_fill (id INTEGER PRIMARY KEY CHECK (id = 1), pending INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS passages USING fts5(
  title_terms, body_terms, tokenize = 'unicode61 remove_diacritics 0'
);
"""
# Bumped whenever index analysis, layout or the splitter changes: an index written by an older one is rebuilt
# (re-split, re-analysed; vectors of unchanged passages kept) on open. 3: passage ids in per-source ranges
# (candidates.py); 4: structure-aware passages with heading paths.
ANALYZER_VERSION = 4
CJK_UNIGRAMS = False
_CANDIDATES_PER_DOC = 8
_DENSE_SQL = (
    "SELECT r.id, r.doc_id, d.acl FROM passage_rows r "
    "JOIN documents d ON d.source_key = r.source_key AND d.doc_id = r.doc_id "
    "WHERE d.status = 'ready' AND r.id IN ({marks})"
)
# One document's passage id span, by the (source_key, doc_id) index.
_SPAN_SQL = "SELECT min(id), max(id) FROM passage_rows WHERE source_key = ? AND doc_id = ?"
_NEIGHBOURS_SQL = (  # the passages numbered first + [lo, hi] of one document's revision, `first` its first id
    "WITH span AS (SELECT min(id) AS first FROM passage_rows WHERE source_key = ? AND doc_id = ?) "
    "SELECT r.passage_no, r.text, r.heading, r.pages FROM span CROSS JOIN passage_rows r "
    "JOIN documents d ON d.source_key = r.source_key AND d.doc_id = r.doc_id "
    "WHERE r.id BETWEEN span.first + ? AND span.first + ? AND r.source_key = ? AND r.doc_id = ? "
    "AND d.revision = ? AND d.status = 'ready' ORDER BY r.passage_no"
)
FILL_BATCH = 32  # passages embedded per transaction of `fill_vectors`: a stop is seen within one batch
_FILL_WINDOW = 256  # rows read at once and embedded shortest first (batches of like lengths pad little)
_MEMO_ROWS = 10_000  # candidate rows a thread keeps from its last search for citing (below)
_Memo = dict[tuple[str, str], tuple[list[tuple[Any, ...]], bool]]  # (source, match) -> rows, every match
_VECTORS_SQL = (
    "SELECT passage_id, model, vector FROM passage_vectors "
    "WHERE model IN ({models}) AND passage_id IN ({ids})"
)


def _match_expression(query: str) -> str | None:
    tokens = query_terms(query, CJK_UNIGRAMS)
    if not tokens:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)


def _hit(
    key: str,
    doc_id: str,
    passage: str,
    score: float,
    title: str,
    revision: str,
    acl: str,
    structured: str | None,
    pages: str | None,
    passage_no: int | None = None,
    metadata: str | None = None,
) -> Hit:
    """A hit of a stored passage; `acl`, `structured` and `metadata` are its document's stored JSON."""
    return Hit(
        key,
        doc_id,
        title,
        revision,
        score,
        passage,
        _source(_json(structured), pages),
        _stored_version(revision, acl, structured, metadata),
        passage_no,
    )


@functools.lru_cache(maxsize=4096)
def _stored_version(revision: str, acl: str, structured: str | None, metadata: str | None) -> str:
    """`stored_version` of a document from its stored columns, computed once per distinct value: a search
    builds a hit for each document of every list (BM25, each query vector's dense list, citing), and most
    documents recur across them and across searches (a pure function of its arguments, so never stale)."""
    return stored_version(revision, DocumentAcl.model_validate_json(acl), _json(structured), _json(metadata))


def _json(text: str | None) -> Any:
    return json.loads(text) if text else None


def _source(stored: dict[str, Any] | None, pages: str | None) -> dict[str, Any] | None:
    """A hit's structured source: its document's, with the page label of the passage's pages (JSON)."""
    return hit_source(stored, _json(pages))


# A chosen passage: doc_id, score, ACL JSON, passage id.
_Pick = tuple[str, float, str, int]


class PassageDocuments:
    """The document of each passage id the dense stage has met, kept in memory: a passage id belongs to
    one document for the life of the file (ids are never reused, candidates.py), so this never goes
    stale; what can change (status, ACL) is read with the rows. Bounded: emptied past `limit` ids (a
    source larger than that reads them again by primary key, as cheap as the rows it no longer reads)."""

    def __init__(self, limit: int = 50_000) -> None:  # ~8 MB at most
        self._doc_of: dict[int, str] = {}
        self._limit = limit

    def first_of_each(
        self, conn: sqlite3.Connection, nearest: Sequence[tuple[int, float]]
    ) -> list[tuple[int, float, str]]:
        """(passage id, cosine, doc_id) of each document's first passage in `nearest`, in its order; an id
        without a row (its document rewritten since the index was read) is left out, as its row would be."""
        doc_of = self._doc_of
        unknown = [i for i, _ in nearest if i not in doc_of]
        if unknown:
            if len(doc_of) + len(unknown) > self._limit:
                doc_of.clear()
            for start in range(0, len(unknown), _IDS_PER_STATEMENT):
                chunk = unknown[start : start + _IDS_PER_STATEMENT]
                marks = ",".join("?" * len(chunk))
                doc_of.update(
                    conn.execute(f"SELECT id, doc_id FROM passage_rows WHERE id IN ({marks})", chunk)
                )
        seen: set[str] = set()
        out = []
        for i, c in nearest:
            doc_id = doc_of.get(i)
            if doc_id is not None and doc_id not in seen:
                seen.add(doc_id)
                out.append((i, c, doc_id))
        return out


_IDS_PER_STATEMENT = 10_000  # under SQLite's bound on a statement's parameters (32,766)


def _bump(conn: sqlite3.Connection, source_key: str) -> None:
    """A write of the source's passages: cached dense matrices of it are stale (every process re-reads)."""
    conn.execute(
        "INSERT INTO source_versions VALUES (?, 1) "
        "ON CONFLICT(source_key) DO UPDATE SET version = version + 1",
        (source_key,),
    )


def _pick(
    rows: Iterable[tuple[Any, ...]], viewer: Viewer, want: int, min_score: float
) -> tuple[list[_Pick], bool]:
    """The best passage of each visible document among (doc_id, score, acl JSON, passage id) rows, best
    first, up to `want`, and whether that is complete (`want` reached, or a row fell below `min_score`).
    An ACL is parsed once per distinct stored JSON: documents of one tenant and group share it."""
    picks: list[_Pick] = []
    seen: set[str] = set()
    visible: dict[str, bool] = {}  # by ACL JSON
    for doc_id, score, acl, passage_id in rows:
        if score < min_score:
            return picks, True
        if doc_id in seen:
            continue
        seen.add(doc_id)
        if acl not in visible:
            visible[acl] = DocumentAcl.model_validate_json(acl).visible_to(viewer)
        if not visible[acl]:
            continue
        picks.append((doc_id, float(score), acl, passage_id))
        if len(picks) == want:
            return picks, True
    return picks, False


def _hits(conn: sqlite3.Connection, key: str, picks: list[_Pick]) -> list[tuple[Hit, int]]:
    """The picked passages as hits (with their passage ids), reading their text now; a passage whose
    document was rewritten, disabled or re-permissioned since the pick is dropped."""
    details = candidates.passage_details(conn, [p[3] for p in picks])
    out = []
    for doc_id, score, acl, passage_id in picks:
        found = details.get(passage_id)
        if found is None or found[4] != acl:
            continue
        text, pages, title, revision, _, structured, number, metadata = found
        hit = _hit(key, doc_id, text, score, title, revision, acl, structured, pages, number, metadata)
        out.append((hit, passage_id))
    return out


class SqliteFtsBackend(SearchBackend):
    live_hits = True  # one statement reads passages and their documents (status, ACL, revision)

    def __init__(
        self,
        path: str | Path,
        embedder: Embedder | None = None,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        slices: int | None = None,
        auto_compact: bool = True,
        embedding_seconds: float | None = None,
    ) -> None:
        """`slices`: how many id ranges of a large source one search reads at once (None: the CPUs this
        process may use, at most candidates.MAX_SLICES; 1: one statement). `auto_compact`: the full-text
        index is compacted once writes are quiet and at `warm` (False: only on `compact`).
        `embedding_seconds`: the deadline of one write's embedding (None: none); past it the write is
        refused (`rejected`, cause `embedding_timeout`) and nothing of it is stored."""
        # Its own schema: the tables below, analyzer version in user_version.
        # Each connection ranks by kb_bm25 where it can be built (rank.py: bm25() to the bit, faster).
        self._db = SqliteDatabase(path, busy_timeout_s=busy_timeout_s, on_connect=rank.install)
        self._sliced = candidates.SlicedCandidates(
            self._db, candidates.default_slices() if slices is None else slices
        )
        self._embedder = embedder
        self._embedding_seconds = embedding_seconds
        self._deferring = threading.local()  # `deferred_vectors`: this thread's writes store no vectors
        self._dense_indexes = DenseIndexes(self._db, GraphStore(self._db.path) if self._db.on_disk else None)
        self._compactor = Compactor(self._db) if self._db.on_disk else None  # few FTS5 segments
        self._auto_compact = auto_compact
        self._shares = AdmittedShares()  # how much of a source a filter admits, by source version
        # Per thread, the candidate rows of its last search by (source, match): citing reads the hits'
        # best passages from them when they provably hold them (passage_candidates).
        self._last_rows = threading.local()
        self._documents_of = PassageDocuments()
        with self._db.transaction() as conn:
            statements(conn, _SCHEMA)
            candidates.create_schema(conn)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(passage_rows)")}
            # (A file from before per-model vectors keeps its unused vector columns; `_embed_missing` fills
            # passage_vectors.)
            if "pages" not in columns:  # a file written before page-aware passages (PDF)
                conn.execute("ALTER TABLE passage_rows ADD COLUMN pages TEXT")
            if "heading" not in columns:  # a file written before heading paths
                conn.execute("ALTER TABLE passage_rows ADD COLUMN heading TEXT")
            self._migrate_metadata(conn)
            if conn.execute("PRAGMA user_version").fetchone()[0] != ANALYZER_VERSION:
                self._reindex(conn)
        if not self._pending_marker():  # pending: a background `fill_vectors` (kb serve's) embeds them
            self._embed_missing()

    def _conn(self) -> sqlite3.Connection:
        return self._db.connection()

    @staticmethod
    def _migrate_metadata(conn: sqlite3.Connection) -> None:
        """Metadata (§8): a JSON column of documents (read back) and the indexed side table filters run on;
        a file from before them gets both, its documents without metadata."""
        if "metadata" not in {row[1] for row in conn.execute("PRAGMA table_info(documents)")}:
            conn.execute("ALTER TABLE documents ADD COLUMN metadata TEXT")
        statements(conn, METADATA_SCHEMA)

    # --- search -----------------------------------------------------------------------------------
    def search(self, queries: list[SourceQuery], query: QueryAnalysis, viewer: Viewer) -> list[SourceResult]:
        match = _match_expression(query.lexical)
        self._last_rows.rows = {}
        return [self._search_one(q, match, viewer, query) for q in queries]

    def _remember(self, key: str, match: str, rows: list[tuple[Any, ...]], every_match: bool) -> None:
        """A search's candidate rows (best first) for `passage_candidates` in the same thread: every
        matching passage of ready documents (`every_match`), or the top rows of a first fetch."""
        if len(rows) <= _MEMO_ROWS:
            memo: _Memo = self._last_rows.__dict__.setdefault("rows", {})
            memo[(key, match)] = (rows, every_match)

    def _remembered(self, key: tuple[str, str], match: str, per_doc: int) -> list[tuple[Any, ...]] | None:
        """The document's best `per_doc` candidate rows when this thread's last search provably read them:
        it read every match, or at least `per_doc` of the document's passages are among its top rows (the
        top rows hold every passage scoring above their last, in the order one statement over the document
        gives: score, then passage id). None: not known, the index is asked."""
        memo = self._last_rows.__dict__.get("rows", {}).get((key[0], match))
        if memo is None:
            return None
        rows, every_match = memo
        mine = [r for r in rows if r[0] == key[1]]
        return mine[:per_doc] if every_match or len(mine) >= per_doc else None

    def _search_one(
        self, q: SourceQuery, match: str | None, viewer: Viewer, query: QueryAnalysis
    ) -> SourceResult:
        started = time.perf_counter()
        vectors = query.vectors
        result = SourceResult(key=q.key)
        if match is None and not vectors:
            return result
        conn = self._conn()
        deadline = started + q.timeout_s
        passage_ids: list[int] = []
        try:
            with candidates.until(conn, deadline):
                # §8: selective or broad, per source
                plan = FilterPlan.of(conn, q.key, q.filter, self._shares)
                if match is not None:
                    result.hits, passage_ids = self._lexical(conn, q, match, viewer, plan, deadline)
                if vectors and passage_ids:
                    stored = self._stored_vectors(conn, passage_ids, [v.model for v in vectors])
                    mine = [stored.get(i, {}) for i in passage_ids]
                    result.cosines, result.cosine_models = matching(vectors, mine)
                else:
                    result.cosines = [None] * len(result.hits)
                if vectors and q.dense_k:
                    # One scan per query vector (its own model's passages); a document keeps its best cosine.
                    found = {v.model: self._dense_rows(conn, q, v, viewer, plan) for v in vectors}
                    ranked = sorted(
                        ((hit, c, p, model) for model, rows in found.items() for hit, c, p in rows),
                        key=lambda row: -row[1],
                    )
                    result.dense = [(hit, c) for hit, c, _, _ in ranked]
                    result.dense_models = [model for *_, model in ranked]
                    if query.evidence is not None:
                        result.evidence = self._evidence(conn, q, query.evidence, viewer, plan, found)
                    if query.translated is not None and not result.hits:
                        passages = [p for _, _, p, _ in ranked]
                        result.dense_checks = self._checks(conn, query.translated, passages)
        except sqlite3.OperationalError as exc:
            kind = "timeout" if "interrupt" in str(exc) else "unavailable"
            return SourceResult(key=q.key, error=SourceFailure(kind))
        result.ms = (time.perf_counter() - started) * 1000
        return result

    def _restriction(self, q: SourceQuery) -> Restriction | None:
        """The document pre-filter (§8): only passages of documents `q.filter` admits are candidates,
        inside the FTS5 top-k (so the top-k are the best matching ones, never a post-filtered remainder)."""
        return filter_restriction(q.key, q.filter) if q.filter is not None else None

    def _broad_lexical(
        self,
        conn: sqlite3.Connection,
        q: SourceQuery,
        match: str,
        viewer: Viewer,
        extent: tuple[tuple[int, int], int],
        plan: FilterPlan,
        deadline: float | None,
    ) -> tuple[list[Hit], list[int]] | None:
        """A broad filter (§8): BM25's top rows of the whole source (as many as unfiltered, then deeper by the
        admitted share), kept where their document is admitted (one predicate over those few documents) —
        far cheaper than building a large admitted set, and the same answer as the restricted query whenever
        they hold the top_k (every better passage of an admitted document is among them). None when they do
        not: the restricted query decides."""
        limit = q.top_k * _CANDIDATES_PER_DOC + 16
        for depth in (limit, plan.deeper(limit)):
            rows = self._sliced.rows(conn, match, extent[0], depth, deadline=deadline, used=extent[1])
            admitted = admitted_among(conn, q.key, {str(r[0]) for r in rows}, plan.node)
            picks, complete = _pick([r for r in rows if r[0] in admitted], viewer, q.top_k, q.min_score)
            if complete or len(rows) < depth:
                hits = _hits(conn, q.key, picks)
                return [h for h, _ in hits], [i for _, i in hits]
        return None

    def _lexical(
        self,
        conn: sqlite3.Connection,
        q: SourceQuery,
        match: str,
        viewer: Viewer,
        plan: FilterPlan | None = None,
        deadline: float | None = None,
    ) -> tuple[list[Hit], list[int]]:
        """BM25's best `q.top_k` documents of the source scoring at least `q.min_score` (best passage each)
        and those passages' ids. FTS5's top rows of the source's id range are read once; when passages the
        viewer may not see, or more passages of documents already kept, exhaust them before top_k, one
        deeper fetch reads every match (no OFFSET pages re-running the query)."""
        extent = candidates.source_extent(conn, q.key)
        if extent is None:
            return [], []
        id_range, used = extent
        if plan is not None and plan.broad:
            found = self._broad_lexical(conn, q, match, viewer, extent, plan, deadline)
            if found is not None:
                return found
        restriction = self._restriction(q)
        limit = q.top_k * _CANDIDATES_PER_DOC + 16
        rows = self._sliced.rows(conn, match, id_range, limit, restriction, deadline, used)
        picks, complete = _pick(rows, viewer, q.top_k, q.min_score)
        every_match = False  # (fewer rows than asked may still be a cut: FTS5's top rows less unready ones)
        if not complete and len(rows) == limit:
            rows = self._sliced.rows(conn, match, id_range, None, restriction, deadline, used)
            picks, _ = _pick(rows, viewer, q.top_k, q.min_score)
            every_match = restriction is None  # (a filter's: every match of the documents it admits only)
        self._remember(q.key, match, rows, every_match)
        hits = _hits(conn, q.key, picks)
        return [h for h, _ in hits], [i for _, i in hits]

    @staticmethod
    def _stored_vectors(
        conn: sqlite3.Connection, passage_ids: list[int], models: list[str]
    ) -> dict[int, dict[str, Vector]]:
        """The stored vectors of `models` of the passages, by passage id and model."""
        sql = _VECTORS_SQL.format(models=",".join("?" * len(models)), ids=",".join("?" * len(passage_ids)))
        found: dict[int, dict[str, Vector]] = {}
        for passage_id, model, vector in conn.execute(sql, [*models, *passage_ids]):
            if vector is not None:
                found.setdefault(passage_id, {})[model] = Vector(model, vector)
        return found

    def _evidence(
        self,
        conn: sqlite3.Connection,
        q: SourceQuery,
        evidence: Vector,
        viewer: Viewer,
        plan: FilterPlan | None,
        found: dict[str, list[tuple[Hit, float, int]]],
    ) -> ScriptEvidence:
        """The multilingual model's view of the source (the mixed design's gate): its nearest passages of
        the question's own script (`evidence`'s id) and its best of the other (the dense stage of the query
        vector of the same bytes, in `found`), with their stored vectors."""
        own = self._dense_rows(conn, replace(q, dense_k=EVIDENCE_DEPTH), evidence, viewer, plan)
        other = across_other(evidence.model)
        best = found.get(other, [])[:1]
        stored = self._stored_vectors(conn, [p for *_, p in own + best], [evidence.model, other])
        mine = tuple((c, v) for _, c, p in own if (v := stored.get(p, {}).get(evidence.model)) is not None)
        theirs = next(((c, v) for _, c, p in best if (v := stored.get(p, {}).get(other)) is not None), None)
        return ScriptEvidence(own=mine, other=theirs)

    def _checks(self, conn: sqlite3.Connection, vector: Vector, passage_ids: list[int]) -> list[float | None]:
        """Per passage its cosine with `vector` (its stored vector of that model; None: none)."""
        if not passage_ids:
            return []
        stored = self._stored_vectors(conn, passage_ids, [vector.model])
        return matching_cosines([vector], [stored.get(i, {}) for i in passage_ids])

    def _dense_rows(
        self,
        conn: sqlite3.Connection,
        q: SourceQuery,
        vector: Vector,
        viewer: Viewer,
        plan: FilterPlan | None = None,
    ) -> list[tuple[Hit, float, int]]:
        """The dense stage: the documents (ready, visible to the viewer) of the source's passages nearest to
        `vector`, best passage per document, best first, at most the hybrid ranking's dense depth. §8: a
        selective filter ranks only the admitted passages; a broad one reads the rows of deeper nearest
        passages where their document is admitted (the others are skipped like unready ones)."""
        want = q.dense_k
        matrix = self._dense_indexes.index(conn, q.key, vector.model)
        k = want * _CANDIDATES_PER_DOC
        # Exact: the deeper look reads every vector (as before); HNSW: 16x deeper, a bound at 1M vectors.
        exact = len(matrix) <= dense_index.EXACT_MAX
        scan = DenseScan.of(conn, q.key, matrix, plan, k, len(matrix) if exact else k * 16)
        rows_sql = scan.rows_sql(_DENSE_SQL)
        picks: list[_Pick] = []
        for k in scan.looks:  # hidden or unready documents, or many passages of a few: look deeper
            # Each document's nearest passage only: status, ACL and a filter are the document's, so its
            # other passages would be read only to be passed over.
            nearest = self._documents_of.first_of_each(conn, scan.nearest(vector, k))
            marks = ",".join("?" * len(nearest))
            params = [*(i for i, _, _ in nearest), *scan.params]
            rows = {r[0]: r for r in conn.execute(rows_sql.format(marks=marks), params)} if nearest else {}
            ordered = ((r[1], c, r[2], i) for i, c, _ in nearest if (r := rows.get(i)) is not None)
            picks, complete = _pick(ordered, viewer, want, -float("inf"))
            if complete:
                break
        return [(hit, hit.score, pid) for hit, pid in _hits(conn, q.key, picks)]

    def passage_candidates(
        self, hits: Sequence[Hit], query: QueryAnalysis, per_doc: int, timeout_s: float
    ) -> dict[tuple[str, str], list[tuple[Hit, float | None]]]:
        match = _match_expression(query.lexical)
        if match is None or not hits:
            return {}
        conn = self._conn()
        try:
            with candidates.until(conn, time.perf_counter() + timeout_s):
                keys = list(dict.fromkeys((h.source_key, h.doc_id) for h in hits))
                rows: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
                for k in keys:
                    known = self._remembered(k, match, per_doc)  # most hits: their search read them already
                    if known is not None:
                        if known:
                            rows[k] = known
                        continue
                    # A document's passages hold consecutive ids (`_index`): its id span is its passages.
                    first, last = conn.execute(_SPAN_SQL, k).fetchone()
                    if first is not None:
                        rows[k] = candidates.candidate_rows(conn, match, (first, last), per_doc)
                details = candidates.passage_details(
                    conn, [r[3] for found_rows in rows.values() for r in found_rows]
                )
                stored = (
                    self._stored_vectors(conn, list(details), [v.model for v in query.vectors])
                    if query.vectors and details
                    else {}
                )
        except sqlite3.OperationalError as exc:
            raise SourceFailure("timeout" if "interrupt" in str(exc) else "unavailable") from None
        except sqlite3.Error:
            raise SourceFailure("unavailable") from None
        found: dict[tuple[str, str], list[tuple[Hit, float | None]]] = {}
        for hit in hits:
            # (passage id, BM25 score, details) of the hit's revision: a rewrite since is not cited
            kept = [
                (r[3], r[1], d)
                for r in rows.get((hit.source_key, hit.doc_id), [])
                if (d := details.get(r[3])) and d[3] == hit.revision
            ]
            cosines = matching_cosines(query.vectors, [stored.get(i, {}) for i, _, _ in kept])
            if kept:
                found[(hit.source_key, hit.doc_id)] = [
                    (
                        replace(
                            hit,
                            score=float(score),
                            passage=d[0],
                            structured_source=_source(_json(d[5]), d[1]),
                            passage_no=d[6],
                        ),
                        c,
                    )
                    for (_, score, d), c in zip(kept, cosines, strict=True)
                ]
        return found

    def neighbour_passages(
        self, hits: Sequence[Hit], radius: int
    ) -> dict[tuple[str, str], list[StoredPassage]]:
        """The rows numbered within `radius` of each hit's passage, of the hit's revision (a document's
        passages hold consecutive ids in their order, `_index`: a primary-key range per document)."""
        conn = self._conn()
        out: dict[tuple[str, str], list[StoredPassage]] = {}
        try:
            for hit in {(h.source_key, h.doc_id): h for h in hits}.values():
                if hit.passage_no is None:
                    continue
                doc = (hit.source_key, hit.doc_id)
                numbers = (max(0, hit.passage_no - radius), hit.passage_no + radius)
                rows = conn.execute(_NEIGHBOURS_SQL, (*doc, *numbers, *doc, hit.revision)).fetchall()
                if rows:
                    out[doc] = [
                        StoredPassage(n, text, heading or "", tuple(_json(pages) or ()))
                        for n, text, heading, pages in rows
                    ]
        except sqlite3.Error:
            raise SourceFailure("unavailable") from None
        return out

    # --- documents ------------------------------------------------------------------------------
    def _read(self, sql: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        """The rows of one read; a database error is the backend's typed `unavailable`."""
        try:
            return self._conn().execute(sql, params).fetchall()
        except sqlite3.Error:
            raise SourceFailure("unavailable") from None

    def get_document(self, source_key: str, doc_id: str) -> Document | None:
        return self.get_documents([(source_key, doc_id)]).get((source_key, doc_id))

    def _documents_rows(self, columns: str, keys: Sequence[tuple[str, str]]) -> list[tuple[Any, ...]]:
        """`columns` of the documents of (source_key, doc_id) keys, in one statement."""
        if not keys:
            return []
        values = ",".join("(?,?)" for _ in keys)
        return self._read(
            f"SELECT source_key, doc_id, {columns} FROM documents "
            f"WHERE (source_key, doc_id) IN (VALUES {values})",
            [part for key in keys for part in key],
        )

    def get_documents(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Document]:
        rows = self._documents_rows("title, body, status, acl, structured_source, metadata", keys)
        # Validated when they were written: rebuilt without re-checking (bodies are large).
        return {
            (source_key, doc_id): Document.model_construct(
                source_key=source_key,
                doc_id=doc_id,
                title=title,
                body=body,
                status=status,
                acl=DocumentAcl.model_validate_json(acl),
                structured_source=json.loads(structured) if structured else None,
                metadata=json.loads(metadata) if metadata else None,
            )
            for source_key, doc_id, title, body, status, acl, structured, metadata in rows
        }

    def document_states(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], DocumentState]:
        rows = self._documents_rows("status, acl, revision, structured_source, metadata", keys)
        return {
            (source_key, doc_id): DocumentState(
                source_key,
                doc_id,
                status,
                DocumentAcl.model_validate_json(acl),
                revision,
                _json(structured),
                _json(metadata),
            )
            for source_key, doc_id, status, acl, revision, structured, metadata in rows
        }

    @contextlib.contextmanager
    def deferred_vectors(self) -> Iterator[None]:
        self._deferring.on = True
        try:
            yield
        finally:
            self._deferring.on = False

    def vectors_pending(self) -> bool:
        if self._embedder is None:
            return False
        try:
            return self._pending_marker()
        except sqlite3.Error:
            return False

    def _pending_marker(self) -> bool:
        row = self._conn().execute("SELECT pending FROM vector_fill WHERE id = 1").fetchone()
        return bool(row and row[0])

    def put_documents(self, documents: list[Document]) -> None:
        # Vectors are computed before the write transaction: embedding is the slow part of ingestion.
        passages = [document_passages(d.body, d.title, d.structured_source) for d in documents]
        vectors: Sequence[Sequence[list[Vector]] | None] = [None] * len(passages)
        deferred = self._embedder is not None and getattr(self._deferring, "on", False)
        if self._embedder and not deferred:
            pairs = [(d.title, [p.indexed for p in ps]) for d, ps in zip(documents, passages, strict=True)]
            seconds = self._embedding_seconds
            try:
                vectors = document_vectors(
                    self._embedder, pairs, None if seconds is None else time.monotonic() + seconds
                )
            except EmbeddingTimeout:
                raise SourceFailure("rejected", "embedding deadline passed", "embedding_timeout") from None
        with write_faults(), self._db.transaction() as conn:
            if deferred:  # a generation: a fill finishing now clears only the one it saw
                conn.execute(
                    "INSERT INTO vector_fill VALUES (1, 1) "
                    "ON CONFLICT(id) DO UPDATE SET pending = pending + 1"
                )
            for doc, doc_passages, doc_vectors in zip(documents, passages, vectors, strict=True):
                self._delete(conn, doc.source_key, doc.doc_id)
                conn.execute(
                    "INSERT INTO documents (source_key, doc_id, title, body, revision, status, acl, "
                    "structured_source, updated_at, metadata) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        doc.source_key,
                        doc.doc_id,
                        doc.title,
                        doc.body,
                        doc.revision,
                        doc.status,
                        doc.acl.model_dump_json(),
                        json.dumps(doc.structured_source) if doc.structured_source else None,
                        time.time(),
                        json.dumps(doc.metadata) if doc.metadata else None,
                    ),
                )
                write_metadata(conn, doc.source_key, doc.doc_id, doc.metadata)
                pages = pages_of(doc_passages, page_starts_of(doc.structured_source))
                self._index(conn, doc.source_key, doc.doc_id, doc.title, doc_passages, doc_vectors, pages)
        self._written()

    def _written(self) -> None:
        """Passages were written (a new FTS5 segment): compact once writes are quiet, if fragmented."""
        if self._compactor is not None and self._auto_compact:
            self._compactor.written()

    def _index(
        self,
        conn: sqlite3.Connection,
        source_key: str,
        doc_id: str,
        title: str,
        passages: list[Passage],
        vectors: Sequence[list[Vector]] | None,
        pages: list[list[int]],
    ) -> None:
        """`vectors` None: not embedded yet (`_embed_missing` embeds them); else each passage's vectors."""
        title_terms = " ".join(index_terms(title, CJK_UNIGRAMS))
        _bump(conn, source_key)
        first_id = candidates.allocate_ids(conn, source_key, len(passages))
        for i, (passage, on_pages) in enumerate(zip(passages, pages, strict=True)):
            row_id = first_id + i
            # The cited text without its heading path; matching sees both.
            conn.execute(
                "INSERT INTO passage_rows (id, source_key, doc_id, passage_no, text, pages, heading) "
                "VALUES (?,?,?,?,?,?,?)",
                (
                    row_id,
                    source_key,
                    doc_id,
                    i,
                    passage.text,
                    json.dumps(on_pages) if on_pages else None,
                    passage.heading_path or None,
                ),
            )
            conn.execute(
                "INSERT INTO passages (rowid, title_terms, body_terms) VALUES (?,?,?)",
                (row_id, title_terms, " ".join(index_terms(passage.indexed, CJK_UNIGRAMS))),
            )
            if vectors is not None:
                conn.executemany(
                    "INSERT INTO passage_vectors VALUES (?,?,?)",
                    [(row_id, v.model, v.data) for v in vectors[i]],
                )

    def _reindex(self, conn: sqlite3.Connection) -> None:
        """Re-split and re-analyze every stored document (the analyzer or the splitter changed), inside the
        caller's transaction. Stored vectors of passages whose text and heading path are unchanged are kept
        (re-embedding a large index costs hours), moved to the passages' new ids."""
        conn.execute(
            "CREATE TEMP TABLE kept_vectors AS SELECT r.source_key, r.doc_id, r.passage_no, r.text, "
            "r.heading, v.model, v.vector FROM passage_rows r JOIN passage_vectors v ON v.passage_id = r.id"
        )
        conn.execute("DELETE FROM passages")
        conn.execute("DELETE FROM passage_vectors")
        conn.execute("DELETE FROM passage_rows")
        for source_key, doc_id, title, body, structured in conn.execute(
            "SELECT source_key, doc_id, title, body, structured_source FROM documents"
        ).fetchall():
            stored = json.loads(structured) if structured else None
            passages = document_passages(body, title, stored)
            pages = pages_of(passages, page_starts_of(stored))
            self._index(conn, source_key, doc_id, title, passages, None, pages)
        conn.execute(
            "INSERT INTO passage_vectors SELECT r.id, k.model, k.vector FROM kept_vectors k "
            "JOIN passage_rows r ON r.source_key = k.source_key AND r.doc_id = k.doc_id "
            "AND r.passage_no = k.passage_no AND r.text = k.text AND r.heading IS k.heading"
        )
        conn.execute("DROP TABLE temp.kept_vectors")
        conn.execute(f"PRAGMA user_version = {ANALYZER_VERSION}")

    def fill_vectors(self, stop: threading.Event | None = None) -> bool:
        if self._embedder is None:
            return True
        while True:
            row = self._conn().execute("SELECT pending FROM vector_fill WHERE id = 1").fetchone()
            generation = row[0] if row else 0
            if not self._embed_missing(_FILL_WINDOW, stop, FILL_BATCH):
                return False
            with self._db.transaction() as tx:  # unless a deferred write came meanwhile: then again
                cleared = tx.execute(
                    "UPDATE vector_fill SET pending = 0 WHERE id = 1 AND pending = ?", (generation,)
                ).rowcount
            if cleared or not generation:
                return True

    def _embed_missing(
        self, batch: int = 256, stop: threading.Event | None = None, step: int | None = None
    ) -> bool:
        """Give every passage a vector of each model the embedder assigns it (new models, cross-script
        embedding turned on, a file from before them, or passages stored with `deferred_vectors`);
        passages already embedded cost a scan. `batch` rows are read at a time and embedded `step` at a
        time (default: all at once), shortest first, each step written in its own transaction; False when
        `stop` was set before it was done."""
        if self._embedder is None:
            return True
        conn = self._conn()
        for model in self._embedder.models:
            last = 0
            while True:
                rows = conn.execute(
                    "SELECT r.id, d.title, r.text, r.source_key, r.heading "
                    "FROM passage_rows r JOIN documents d "
                    "ON d.source_key = r.source_key AND d.doc_id = r.doc_id "
                    "LEFT JOIN passage_vectors v ON v.passage_id = r.id AND v.model = ? "
                    "WHERE r.id > ? AND v.vector IS NULL ORDER BY r.id LIMIT ?",
                    (model, last, batch),
                ).fetchall()
                if not rows:
                    break
                last = rows[-1][0]
                texts = [passage_text(t, indexed_text(h, p)) for _, t, p, _, h in rows]
                mine = [
                    (r, t) for r, t in zip(rows, texts, strict=True) if model in self._embedder.models_for(t)
                ]
                mine.sort(key=lambda pair: len(pair[1]))
                size = step or max(1, len(mine))
                for start in range(0, len(mine), size):
                    if stop is not None and stop.is_set():
                        return False
                    self._store_vectors(model, mine[start : start + size])
        return True

    def _store_vectors(self, model: str, mine: list[tuple[Any, str]]) -> None:
        """Embed (row, text) pairs by `model` and store their vectors in one transaction."""
        assert self._embedder is not None
        vectors = self._embedder.embed_passages([t for _, t in mine], [model])
        with self._db.transaction() as tx:
            tx.executemany(
                "INSERT OR REPLACE INTO passage_vectors VALUES (?,?,?)",
                [(r[0], model, vs[0].data) for vs, (r, _) in zip(vectors, mine, strict=True) if vs],
            )
            for source_key in {r[3] for r, _ in mine}:
                _bump(tx, source_key)

    @staticmethod
    def _delete(conn: sqlite3.Connection, source_key: str, doc_id: str) -> int:
        _bump(conn, source_key)
        conn.execute(
            "DELETE FROM passages WHERE rowid IN "
            "(SELECT id FROM passage_rows WHERE source_key=? AND doc_id=?)",
            (source_key, doc_id),
        )
        conn.execute(
            "DELETE FROM passage_vectors WHERE passage_id IN "
            "(SELECT id FROM passage_rows WHERE source_key=? AND doc_id=?)",
            (source_key, doc_id),
        )
        conn.execute("DELETE FROM passage_rows WHERE source_key=? AND doc_id=?", (source_key, doc_id))
        delete_metadata(conn, source_key, doc_id)
        return conn.execute(
            "DELETE FROM documents WHERE source_key=? AND doc_id=?", (source_key, doc_id)
        ).rowcount

    def delete_document(self, source_key: str, doc_id: str) -> bool:
        with write_faults(), self._db.transaction() as conn:
            deleted = self._delete(conn, source_key, doc_id)
        self._written()
        return deleted > 0

    def set_document_status(self, source_key: str, doc_id: str, status: str) -> bool:
        with write_faults(), self._db.transaction() as conn:
            cur = conn.execute(
                "UPDATE documents SET status=?, updated_at=? WHERE source_key=? AND doc_id=?",
                (status, time.time(), source_key, doc_id),
            )
        return cur.rowcount > 0

    def untenanted_documents(self, source_key: str, limit: int = 10_000) -> list[str]:
        rows = (
            self._conn()
            .execute("SELECT doc_id, acl FROM documents WHERE source_key=? ORDER BY doc_id", (source_key,))
            .fetchall()
        )
        return [doc_id for doc_id, acl in rows if DocumentAcl.model_validate_json(acl).tenant is None][:limit]

    def list_documents(self, source_key: str, limit: int = 1000) -> list[DocumentInfo]:
        rows = self._read(
            "SELECT doc_id, title, revision, status, length(body), updated_at, "
            "json_extract(acl, '$.tenant'), metadata FROM documents "
            "WHERE source_key = ? ORDER BY doc_id LIMIT ?",
            (source_key, limit),
        )
        return [
            DocumentInfo(
                doc_id, title, revision, status, chars, updated, tenant, json.loads(meta) if meta else None
            )
            for doc_id, title, revision, status, chars, updated, tenant, meta in rows
        ]

    def document_ids(self, source_key: str, prefix: str = "") -> list[str]:
        rows = self._read(
            "SELECT doc_id FROM documents WHERE source_key = ? AND substr(doc_id, 1, ?) = ? ORDER BY doc_id",
            (source_key, len(prefix), prefix),
        )
        return [doc_id for (doc_id,) in rows]

    def metadata_keys(self, *, source_key: str | None = None, tenant: str | None = None) -> set[str]:
        where, params = ["documents.metadata IS NOT NULL"], []
        if source_key is not None:
            where.append("documents.source_key = ?")
            params.append(source_key)
        if tenant is not None:
            where.append("json_extract(documents.acl, '$.tenant') = ?")
            params.append(tenant)
        rows = self._read(
            "SELECT DISTINCT keys.key FROM documents, json_each(documents.metadata) AS keys WHERE "
            + " AND ".join(where),
            params,
        )
        return {key for (key,) in rows}

    def warm(self) -> None:
        if self._embedder is not None:  # without one no search has a query vector: no index to load
            self._dense_indexes.warm(self._embedder.models)
        if self._compactor is not None and self._auto_compact:
            self._compactor.check()

    def index_states(self) -> list[IndexState]:
        """The FTS5 index `passages`: its b-tree segments (one shard; a compaction leaves one segment).
        `merging` is this process's compactor: another process's (an ingestion worker's) is not seen, only
        its effect on the segments."""
        try:
            conn = self._conn()
            pages = segment_pages(conn) or []
            page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        except sqlite3.Error:
            raise SourceFailure("unavailable") from None
        return [
            IndexState(
                index="passages",
                shards=1,
                segments=len(pages),
                target_segments=1,
                size_bytes=sum(pages) * page_size,
                fragmented=fragmented(pages),
                merging=self._compactor is not None and self._compactor.busy,
            )
        ]

    def compact(self, force: bool = False) -> bool:
        """In this process's background compactor (an in-memory index is not compacted)."""
        if self._compactor is None:
            return False
        (state,) = self.index_states()
        if not state.due(force):
            return False
        self._compactor.check(force)
        return True

    def close(self, timeout_s: float = 4.0) -> None:
        if self._compactor is not None:  # a compaction under way stops after its slice
            self._compactor.close(min(timeout_s, 2.0))
        self._sliced.close()
        self._dense_indexes.close(timeout_s)

    def healthy(self, timeout_s: float = 1.0) -> bool:
        try:
            self._conn().execute("SELECT 1 FROM documents LIMIT 1").fetchall()
            return True
        except sqlite3.Error:
            return False

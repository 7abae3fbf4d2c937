"""A-SEARCH at scale (SQLite): the embedded search path stays bounded as the corpus grows — the top-k is taken
inside FTS5 before any join, the source is a rowid range FTS5 filters, hidden or repeated documents cost
one deeper fetch (never OFFSET pages), and an index of the old layout is rebuilt on open."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from knowledge_core.adapters.embedding import VectorMatrix
from knowledge_core.adapters.sqlite import candidates, dense_index
from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.adapters.sqlite.search import _SCHEMA, ANALYZER_VERSION, SqliteFtsBackend
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.ports import Embedder, QueryAnalysis, SourceQuery, Vector

from bench.scale_corpus import Corpus

VIEWER = Viewer(tenant="acme", subject="alice")


def _doc(source: str, doc_id: str, body: str, tenant: str = "acme", title: str = "t") -> Document:
    return Document(source_key=source, doc_id=doc_id, title=title, body=body, acl=DocumentAcl(tenant=tenant))


def _candidate_statements(backend: SqliteFtsBackend, source: str, text: str, top_k: int) -> tuple[list, int]:
    """The hits of one search and how many statements matched the full-text index."""
    seen: list[str] = []
    conn = backend._conn()
    conn.set_trace_callback(seen.append)
    try:
        [result] = backend.search([SourceQuery(source, top_k, 0.0)], QueryAnalysis(text), VIEWER)
    finally:
        conn.set_trace_callback(None)
    return result.hits, sum("MATCH" in s for s in seen)


def test_hidden_documents_cost_one_deeper_fetch_not_offset_pages(tmp_path: Path) -> None:
    """200 documents of another tenant outrank the one the viewer may see: the old path paged with OFFSET
    (9 statements here), the new one reads FTS5's top rows once, then every match once."""
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3")
    hidden = [_doc("s@1", f"h{i:03d}", "zebra zebra zebra", tenant="other") for i in range(200)]
    backend.put_documents([*hidden, _doc("s@1", "mine", "zebra and many other words of a longer passage")])
    hits, statements = _candidate_statements(backend, "s@1", "zebra", top_k=1)
    assert [h.doc_id for h in hits] == ["mine"]
    assert statements == 2


def test_source_is_filtered_inside_fts5(tmp_path: Path) -> None:
    """Better matches in another source of the same file neither crowd out nor slow down a small source:
    its answer comes from the first fetch."""
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3")
    backend.put_documents([_doc("big@1", f"b{i:03d}", "zebra zebra zebra") for i in range(300)])
    backend.put_documents([_doc("small@1", "s1", "zebra among other words in a longer passage")])
    hits, statements = _candidate_statements(backend, "small@1", "zebra", top_k=5)
    assert [h.doc_id for h in hits] == ["s1"]
    assert statements == 1
    assert _candidate_statements(backend, "absent@1", "zebra", top_k=5) == ([], 0)


def test_passage_ids_lie_in_their_source_range_and_are_never_reused(tmp_path: Path) -> None:
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3")
    backend.put_documents([_doc("a@1", "x", "one\n\ntwo"), _doc("b@1", "y", "three")])
    backend.put_documents([_doc("a@1", "x", "one\n\ntwo")])  # rewritten: a fresh id (one passage)
    conn = backend._conn()
    for source in ("a@1", "b@1"):
        low, high = candidates.source_range(conn, source) or (0, -1)
        ids = [r[0] for r in conn.execute("SELECT id FROM passage_rows WHERE source_key=?", (source,))]
        assert ids and all(low <= i <= high for i in ids)
    assert [
        r[0]
        for r in conn.execute(
            "SELECT id - (no << 32) FROM passage_rows JOIN source_ranges "
            "USING (source_key) WHERE source_key='a@1' ORDER BY id"
        )
    ] == [1]  # the first write had id 0 of the range


def test_candidate_plan_takes_the_top_k_inside_fts5_before_any_join(tmp_path: Path) -> None:
    """EXPLAIN QUERY PLAN: FTS5 answers the rank-ordered, rowid-bounded top-k in a materialized step; the
    rows and documents are then looked up by key, no table scan."""
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3")
    backend.put_documents([_doc("s@1", "d", "zebra")])
    steps = candidates.plan(backend._conn(), candidates.candidates_sql(), ('"zebra"', 0, 1 << 40, 10))
    assert any(s.startswith("MATERIALIZE top") for s in steps), steps
    assert any("VIRTUAL TABLE INDEX" in s for s in steps), steps
    assert any("SEARCH r USING INTEGER PRIMARY KEY" in s for s in steps), steps
    assert any(s.startswith("SEARCH d USING INDEX") for s in steps), steps
    assert not any(s.startswith("SCAN r") or s.startswith("SCAN d") for s in steps), steps


def test_candidates_equal_fts5_rank_order(tmp_path: Path) -> None:
    """The candidate statement scores with `bm25()` under SQLite's own ORDER BY ... LIMIT (cheaper per
    matching row than FTS5's `ORDER BY rank` cursor): the same passages, scores and order as FTS5's
    rank-ordered top-k with the same weights, ties by passage id, at every depth (the scale corpus)."""
    corpus = Corpus(2_000, seed=5)
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3")
    backend.put_documents(
        [_doc("s@1", d.doc_id, d.body, title=d.title) for d in corpus.documents()]
        + [_doc("other@1", "x", corpus.document(0).body)]  # another source's rows stay out of the range
    )
    conn = backend._conn()
    id_range = candidates.source_range(conn, "s@1")
    assert id_range is not None
    reference = (
        "SELECT passages.rowid, -passages.rank FROM passages WHERE passages MATCH ? "
        f"AND passages.rank MATCH 'bm25({candidates.BM25_WEIGHTS})' AND passages.rowid BETWEEN ? AND ? "
        "ORDER BY passages.rank LIMIT ?"
    )
    compared = 0
    for q in corpus.queries(40):
        match = " OR ".join(f'"{w}"' for w in q.text.split())
        for limit in (5, 40, None):
            rows = candidates.candidate_rows(conn, match, id_range, limit)
            expected = conn.execute(reference, (match, *id_range, -1 if limit is None else limit)).fetchall()
            assert [(r[3], pytest.approx(r[1])) for r in rows] == [(i, pytest.approx(s)) for i, s in expected]
            compared += len(rows)
    assert compared > 1_000


def test_restriction_applies_before_the_top_k(tmp_path: Path) -> None:
    """The document pre-filter hook: a restriction keeps only its documents, however many others rank
    higher."""
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3")
    backend.put_documents([_doc("s@1", f"d{i:02d}", "zebra " * (i + 1)) for i in range(40)])
    conn = backend._conn()
    restriction = candidates.Restriction(
        "passages.rowid IN (SELECT id FROM passage_rows WHERE source_key = ? AND doc_id IN (?, ?))",
        ("s@1", "d00", "d01"),
    )
    id_range = candidates.source_range(conn, "s@1")
    assert id_range is not None
    rows = candidates.candidate_rows(conn, '"zebra"', id_range, 3, restriction)
    assert [r[0] for r in rows] == ["d01", "d00"]


def test_old_layout_index_rebuilt_on_open_vectors_kept(tmp_path: Path) -> None:
    """A file of the previous layout (passage ids 1.., no source ranges, user_version 2) is re-indexed on
    open into source ranges; its stored vectors follow their passages (no re-embedding)."""
    path = tmp_path / "search.sqlite3"
    conn = sqlite3.connect(path)
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(
        "INSERT INTO documents VALUES ('s@1','d','Title','old zebra body','r','ready',?,NULL,0)",
        (DocumentAcl(tenant="acme").model_dump_json(),),
    )
    conn.execute(
        "INSERT INTO passage_rows (id, source_key, doc_id, passage_no, text, pages) "
        "VALUES (1,'s@1','d',0,'old zebra body',NULL)"
    )
    conn.execute("INSERT INTO passages (rowid, title_terms, body_terms) VALUES (1,'titl','old zebra bodi')")
    conn.execute("INSERT INTO passage_vectors VALUES (1,'m',?)", (bytes(range(8)),))
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    backend = SqliteFtsBackend(path)
    conn = backend._conn()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == ANALYZER_VERSION
    [(new_id,)] = conn.execute("SELECT id FROM passage_rows").fetchall()
    assert new_id >= 1 << candidates.SOURCE_BITS
    assert conn.execute("SELECT passage_id, vector FROM passage_vectors").fetchall() == [
        (new_id, bytes(range(8)))
    ]
    [result] = backend.search([SourceQuery("s@1", 5, 0.0)], QueryAnalysis("zebra"), VIEWER)
    assert [h.doc_id for h in result.hits] == ["d"]


# --- the dense stage ---------------------------------------------------------------------------------


class HashEmbedder(Embedder):
    """16-dim int8 vectors from a hash of the text: deterministic, distinct per passage."""

    models = ("syn",)

    def dimensions(self, model: str) -> int:
        return 16

    def _vector(self, text: str) -> Vector:
        digest = hashlib.sha256(text.encode()).digest()[:16]
        return Vector("syn", bytes(b % 200 if b % 200 < 128 else b % 200 + 56 for b in digest))

    def embed_query(self, text: str) -> Vector | None:
        return self._vector(text)

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        return [[self._vector(t)] for t in texts]


def test_hnsw_recall_at_10_against_exact() -> None:
    """The approximate index keeps recall@10 >= 0.98 against the exact scan on clustered int8 vectors (the
    scale corpus' geometry) at the depth the dense stage asks for, and its cosines are the exact ones."""
    corpus = Corpus(30_000, seed=3)
    vectors = np.concatenate([corpus.vectors_of(i) for i in range(len(corpus))])
    ids = np.arange(1000, 1000 + len(vectors), dtype=np.int64)
    hnsw = dense_index.HnswIndex("m", ids, vectors)
    exact = VectorMatrix("m", [int(i) for i in ids], [bytes(row) for row in vectors])
    recalls = []
    for q in corpus.queries(100):
        query = Vector("m", q.vector)
        # As the dense stage asks: 8 passages per wanted document, 50 documents.
        approximate, truth = hnsw.nearest(query, 400), exact.nearest(query, 400)
        recalls.append(len({i for i, _ in approximate[:10]} & {i for i, _ in truth[:10]}) / 10)
        exact_cosines = dict(truth)
        assert all(abs(c - exact_cosines[i]) < 1e-9 for i, c in approximate if i in exact_cosines)
    assert float(np.mean(recalls)) >= 0.98


def test_dense_stage_past_the_exact_bound_follows_writes_by_delta(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past EXACT_MAX vectors the dense stage is an HNSW graph; a write adds/removes its passages in the
    same graph (no rebuild) and the next search sees them."""
    monkeypatch.setattr(dense_index, "EXACT_MAX", 10)
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3", embedder=HashEmbedder())
    backend.put_documents([_doc("s@1", f"d{i:02d}", f"words of document {i}") for i in range(30)])
    target = HashEmbedder().embed_query("t\n\nwords of document 7")

    def dense_ids(text: str) -> list[str]:
        [result] = backend.search(
            [SourceQuery("s@1", 5, 0.0, dense_k=3)],
            QueryAnalysis(text, vectors=(HashEmbedder().embed_query(text) or target,)),
            VIEWER,
        )
        return [hit.doc_id for hit, _ in result.dense]

    first = dense_ids("unrelated")
    assert backend._dense_indexes.settle(60)  # the first search is exact, the graph built in the background
    graph = backend._dense_indexes.indexes[("s@1", "syn")][1]
    assert isinstance(graph, dense_index.HnswIndex) and len(graph) == 30
    backend.put_documents([_doc("s@1", "new", "a new passage")])
    backend.delete_document("s@1", first[0])
    assert dense_ids("t\n\na new passage")[0] == "new"
    assert backend._dense_indexes.indexes[("s@1", "syn")][1] is graph and len(graph) == 30
    assert first[0] not in dense_ids("unrelated")


def test_dense_stage_reads_the_row_of_each_documents_nearest_passage_only(tmp_path: Path) -> None:
    """Status, ACL and filters are a document's: the dense stage reads the rows of each document's nearest
    passage (6 documents of 12 passages: 6 ids, not 72), and answers as reading every row did — each
    document's best cosine, best first, hidden ones passed over, a rewritten one by its new passages."""
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3", embedder=HashEmbedder())
    body = "\n\n".join(f"## Part {p}\n\nParagraph {p} of this document." for p in range(12))  # 12 passages
    docs = [_doc("s@1", f"d{i}", f"{i} {body}", title=f"doc {i}") for i in range(5)]
    backend.put_documents([*docs, _doc("s@1", "hidden", f"h {body}", tenant="other")])
    query = HashEmbedder().embed_query("a query")
    assert query is not None
    conn = backend._conn()

    def dense(want: int) -> tuple[list[tuple[str, float]], list[str]]:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            [result] = backend.search(
                [SourceQuery("s@1", 5, 0.0, dense_k=want)], QueryAnalysis("", vectors=(query,)), VIEWER
            )
        finally:
            conn.set_trace_callback(None)
        return [(h.doc_id, c) for h, c in result.dense], [s for s in seen if "d.acl FROM passage_rows" in s]

    def expected() -> list[tuple[str, float]]:
        matrix = backend._dense_indexes.index(conn, "s@1", "syn")
        doc_of = dict(conn.execute("SELECT id, doc_id FROM passage_rows"))
        best: dict[str, float] = {}
        for i, c in matrix.nearest(query, len(matrix)):
            best.setdefault(doc_of[i], c)
        return [(d, c) for d, c in best.items() if d != "hidden"]

    assert conn.execute("SELECT count(*) FROM passage_rows WHERE doc_id = 'd1'").fetchone()[0] == 12
    found, statements = dense(10)
    assert found == expected() and len(found) == 5
    assert len(statements) == 1 and statements[0].count(",") < 6 + 3  # 6 ids in its IN list (and 3 columns)
    backend.put_documents([_doc("s@1", "d0", "A rewritten d0.\n\nIt has two passages now.")])
    found, _ = dense(10)
    assert found == expected() and "d0" in dict(found)
    assert dense(2)[0] == expected()[:2]


def test_usearch_loads_beside_onnxruntime() -> None:
    """The pinned usearch, imported before onnxruntime, does not crash its import (2.26 does)."""
    import subprocess
    import sys

    code = "import usearch.index, onnxruntime"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0

"""F-FILTER on the embedded backend: the SQL compiled from a filter selects exactly the documents the
reference semantics (`domain.filters.matches`) admits, on seeded random metadata × random filters."""

from __future__ import annotations

import random

import pytest
from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.adapters.sqlite.filters import METADATA_SCHEMA, matching_documents, write_metadata
from knowledge_core.domain.filters import COMPARISONS, matches, parse_filter

from tests.filter_cases import random_filter, random_metadata


@pytest.fixture(scope="module")
def corpus() -> tuple[sqlite3.Connection, dict[str, dict | None]]:
    rng = random.Random(25)
    conn = sqlite3.connect(":memory:")
    conn.executescript("CREATE TABLE documents (source_key TEXT, doc_id TEXT);" + METADATA_SCHEMA)
    metadata = {f"d{i}": random_metadata(rng) for i in range(300)}
    for doc_id, meta in metadata.items():
        conn.execute("INSERT INTO documents VALUES ('s@1', ?)", (doc_id,))
        write_metadata(conn, "s@1", doc_id, meta)
    # Another source's documents with the same metadata never leak into the first one's set.
    conn.execute("INSERT INTO documents VALUES ('other@1', 'd0')")
    write_metadata(conn, "other@1", "x", {"region": "eu"})
    return conn, metadata


def selected(conn: sqlite3.Connection, raw: dict) -> set[str]:
    sql, params = matching_documents("s@1", parse_filter(raw))
    return {doc_id for (doc_id,) in conn.execute(sql, params)}


def test_f_filter_sqlite_matches_the_oracle_on_random_filters(corpus) -> None:
    conn, metadata = corpus
    rng = random.Random(8)
    nonempty = 0
    for _ in range(400):
        raw = random_filter(rng)
        node = parse_filter(raw)
        expected = {d for d, m in metadata.items() if matches(m, node)}
        assert selected(conn, raw) == expected, raw
        nonempty += bool(expected) and len(expected) < len(metadata)
    assert nonempty > 100  # the cases discriminate: neither everything nor nothing


@pytest.mark.parametrize("op", COMPARISONS)
def test_f_filter_sqlite_every_operator_matches_the_oracle(corpus, op: str) -> None:
    conn, metadata = corpus
    rng = random.Random(op)
    from tests.filter_cases import random_condition

    seen = 0
    while seen < 40:
        raw = random_condition(rng)
        if op not in raw:
            continue
        seen += 1
        node = parse_filter(raw)
        assert selected(conn, raw) == {d for d, m in metadata.items() if matches(m, node)}, raw


def test_f_filter_sqlite_rewrite_replaces_metadata_rows(corpus) -> None:
    conn = sqlite3.connect(":memory:")
    conn.executescript("CREATE TABLE documents (source_key TEXT, doc_id TEXT);" + METADATA_SCHEMA)
    conn.execute("INSERT INTO documents VALUES ('s@1', 'a')")
    write_metadata(conn, "s@1", "a", {"region": "eu", "tags": ["x"]})
    write_metadata(conn, "s@1", "a", {"region": "us"})
    assert selected(conn, {"equals": {"key": "region", "value": "us"}}) == {"a"}
    assert selected(conn, {"listContains": {"key": "tags", "value": "x"}}) == set()


@pytest.mark.parametrize("share", [0.02, 0.5])
def test_f_filter_sqlite_dense_scan_ranks_admitted_passages_only(share: float) -> None:
    """Both ways of the filtered scan (a small admitted set multiplies its own rows, a large one masks the
    full product) give the nearest admitted passages, best first."""
    import numpy as np
    from knowledge_core.adapters.embedding import VectorMatrix
    from knowledge_core.adapters.sqlite.filters import nearest_admitted
    from knowledge_core.ports import Vector

    rng = np.random.default_rng(5)
    ids = list(range(10, 2010, 2))
    rows = rng.integers(-127, 128, (len(ids), 8)).astype(np.int8)
    matrix = VectorMatrix("m", ids, [r.tobytes() for r in rows])
    query = Vector("m", rng.integers(-127, 128, 8).astype(np.int8).tobytes())
    admitted = np.array(
        [*sorted(rng.choice(ids, int(share * len(ids)), replace=False)), 99_999], dtype=np.int64
    )
    got = nearest_admitted(matrix, query, 10, admitted)
    everything = matrix.nearest(query, len(ids))
    allowed = set(admitted.tolist())
    assert [i for i, _ in got] == [i for i, _ in everything if i in allowed][:10]
    assert nearest_admitted(matrix, Vector("other", query.data), 10, admitted) == []


def test_f_filter_sqlite_document_predicate_matches_the_oracle(corpus) -> None:
    """The per-document form (broad filters check candidates with it) admits what the set form admits."""
    from knowledge_core.adapters.sqlite.filters import admitted_among

    conn, metadata = corpus
    rng = random.Random(9)
    for _ in range(200):
        node = parse_filter(random_filter(rng))
        assert admitted_among(conn, "s@1", list(metadata), node) == {
            d for d, m in metadata.items() if matches(m, node)
        }


def test_f_filter_sqlite_broad_filter_falls_back_when_deeper_candidates_hold_too_few(tmp_path) -> None:
    """A broad filter whose admitted documents rank below many passages of the others: the deeper
    unfiltered rows hold none of them, so the restricted query answers — never fewer than exist."""
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Document, DocumentAcl, Viewer
    from knowledge_core.ports import QueryAnalysis, SourceQuery

    backend = SqliteFtsBackend(tmp_path / "kb.sqlite3")
    acl = DocumentAcl(tenant="t")
    # Paragraphs of ~500 characters stay one passage each: 17 x 40 strong passages above 3 weak ones.
    loud = "\n\n".join(" ".join(["valve"] * 20 + [f"w{i}x{j}" for j in range(60)]) for i in range(40))
    weak = " ".join(["valve"] + [f"filler{j}" for j in range(80)])
    docs = [Document(source_key="s@1", doc_id=f"o{i}", title="", body=loud, acl=acl) for i in range(17)]
    docs += [
        Document(source_key="s@1", doc_id=f"a{i}", title="", body=weak, acl=acl, metadata={"pick": True})
        for i in range(3)
    ]
    backend.put_documents(docs)
    node = parse_filter({"equals": {"key": "pick", "value": True}})  # 3 of 20 documents: broad (15 %)
    [result] = backend.search(
        [SourceQuery("s@1", 5, 0.0, filter=node)], QueryAnalysis("valve"), Viewer(tenant="t", subject="u")
    )
    assert sorted(h.doc_id for h in result.hits) == ["a0", "a1", "a2"]


@pytest.mark.parametrize(
    "raw", [{"equals": {"key": "g", "value": 3}}, {"lessThan": {"key": "g", "value": 5}}]
)
def test_f_filter_sqlite_dense_stage_on_the_hnsw_index(tmp_path, monkeypatch, raw) -> None:
    """Past EXACT_MAX vectors the dense index is a graph: a selective filter scans the admitted vectors
    exactly, a broad one keeps the graph's deeper nearest admitted passages — the nearest admitted ones."""
    import numpy as np
    from knowledge_core.adapters.sqlite import dense_index
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Document, DocumentAcl, Viewer
    from knowledge_core.ports import Embedder, QueryAnalysis, SourceQuery, Vector

    # usearch imported before onnxruntime makes onnxruntime's import segfault (this venv: usearch 2.26,
    # onnxruntime's wheel): load them in a serving process's order so later tests can still embed.
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(dense_index, "EXACT_MAX", 10)
    rng = np.random.default_rng(3)
    rows = {f"body {i}": rng.integers(-127, 128, 16).astype(np.int8).tobytes() for i in range(80)}

    class Table(Embedder):
        models = ("m",)

        def dimensions(self, model: str) -> int:
            return 16

        def embed_query(self, text: str) -> Vector | None:
            return None

        def embed_passages(self, texts, models=None):
            return [[Vector("m", rows[t])] for t in texts]

    backend = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=Table())
    acl = DocumentAcl(tenant="t")
    backend.put_documents(
        [
            Document(
                source_key="s@1", doc_id=f"d{i}", title="", body=f"body {i}", acl=acl, metadata={"g": i % 10}
            )
            for i in range(80)
        ]
    )
    query = Vector("m", rng.integers(-127, 128, 16).astype(np.int8).tobytes())
    node = parse_filter(raw)
    [result] = backend.search(
        [SourceQuery("s@1", 5, float("-inf"), dense_k=5, filter=node)],
        QueryAnalysis("zzz-no-term", "", (query,)),
        Viewer(tenant="t", subject="u"),
    )
    q = np.frombuffer(query.data, dtype=np.int8).astype(np.int32)
    cos = {i: int(np.frombuffer(rows[f"body {i}"], dtype=np.int8).astype(np.int32) @ q) for i in range(80)}
    admitted = [i for i in sorted(cos, key=lambda i: -cos[i]) if matches({"g": i % 10}, node)]
    assert [h.doc_id for h, _ in result.dense] == [f"d{i}" for i in admitted[:5]]

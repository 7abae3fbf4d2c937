"""F-FILTER on the embedded backend: the SQL compiled from a filter selects exactly the documents the
reference semantics (`domain.filters.matches`) admits, on seeded random metadata × random filters."""

from __future__ import annotations

import random
import sqlite3

import pytest
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

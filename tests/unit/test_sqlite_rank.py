"""A-SEARCH: the embedded full-text index ranks by `kb_bm25` (adapters/sqlite/kb_rank.c, built with the
system's C compiler), FTS5's bm25() with each row's token count remembered per connection — the same scores
to the bit, before and after writes, in every source range — and by bm25() itself where it cannot be built
or loaded (one log line says why)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite import candidates, rank
from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.ports import QueryAnalysis, SourceQuery

WORDS = [f"w{i}" for i in range(40)] + ["网关", "离线", "心跳"]
QUERIES = ['"w1"', '"w2" OR "w3"', '"w0" OR "w5" OR "w39" OR "网关"', '"离线" OR "w7"', '"w4" "w6"']


def _require_build() -> Path:
    path = rank.library()
    if path is None:
        message = "kb_bm25 needs a C compiler and SQLite's extension header (scripts/build_deps.sh)"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(autouse=True)
def fresh_choice() -> Iterator[None]:
    rank._choice.cache_clear()
    yield
    rank._choice.cache_clear()


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _scores(conn: sqlite3.Connection, function: str, match: str) -> list[tuple[int, float]]:
    return conn.execute(
        f"SELECT rowid, {function}(passages, 2.0, 1.0) AS r FROM passages WHERE passages MATCH ? "
        "ORDER BY r, rowid",
        (match,),
    ).fetchall()


def test_kb_bm25_scores_every_row_as_bm25_does_before_and_after_writes() -> None:
    path = _require_build()
    assert rank.described() == rank.FUNCTION
    conn = sqlite3.connect(":memory:")
    rank._load(conn, path)
    conn.execute("CREATE VIRTUAL TABLE passages USING fts5(title_terms, body_terms)")
    rng = random.Random(23)

    def insert(first: int, count: int) -> None:
        rows = [(first + i, _text(rng, 3), _text(rng, rng.randint(1, 300))) for i in range(count)]
        conn.executemany("INSERT INTO passages (rowid, title_terms, body_terms) VALUES (?,?,?)", rows)

    insert(1 << 32, 300)  # two sources' id ranges, as candidates.allocate_ids gives them
    insert(2 << 32, 200)
    for _ in range(2):  # the second pass reads the token counts the first remembered
        for match in QUERIES:
            assert _scores(conn, rank.FUNCTION, match) == _scores(conn, rank.BUILTIN, match), match
    conn.execute("DELETE FROM passages WHERE rowid % 3 = 0")  # the table's statistics change
    insert((1 << 32) + 1000, 150)  # new ids after the used ones: never a reused one
    insert(3 << 32, 50)
    for match in QUERIES:
        expected = _scores(conn, rank.BUILTIN, match)
        assert expected and _scores(conn, rank.FUNCTION, match) == expected, match


def _doc(doc_id: str, body: str) -> Document:
    return Document(source_key="s@1", doc_id=doc_id, title=doc_id, body=body, acl=DocumentAcl(tenant="acme"))


def _search(backend: SqliteFtsBackend, text: str) -> list[tuple[str, float]]:
    [result] = backend.search(
        [SourceQuery("s@1", 10, 0.0)], QueryAnalysis(text), Viewer(tenant="acme", subject="a")
    )
    return [(h.doc_id, h.score) for h in result.hits]


def test_search_ranks_by_kb_bm25_with_the_scores_of_bm25(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same file searched by a backend whose connections load kb_bm25 and by one told to use bm25()
    (`KB_SQLITE_RANK=bm25`): the same hits and scores."""
    _require_build()
    rng = random.Random(7)
    path = tmp_path / "search.sqlite3"
    fast = SqliteFtsBackend(path, auto_compact=False)
    fast.put_documents([_doc(f"d{i:03d}", _text(rng, rng.randint(5, 400))) for i in range(120)])
    assert rank.FUNCTION in candidates.candidates_sql()
    answers = [_search(fast, q) for q in ["w1 w2", "w3", "网关离线 w9", "w38 w39 w0"]]
    fast.close()
    monkeypatch.setenv(rank.RANK_ENV, "bm25")
    rank._choice.cache_clear()
    plain = SqliteFtsBackend(path, auto_compact=False)
    assert "kb_bm25" not in candidates.candidates_sql()
    assert [_search(plain, q) for q in ["w1 w2", "w3", "网关离线 w9", "w38 w39 w0"]] == answers
    assert all(answers)
    plain.close()


def test_without_a_compiler_or_a_loadable_build_the_index_ranks_by_bm25(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(rank, "_compiler", lambda: None)
    assert rank.library() is None and rank.function() == rank.BUILTIN
    assert "no C compiler (cc or gcc) on PATH" in caplog.text
    assert rank.described() == "bm25(): no C compiler (cc or gcc) on PATH"  # kb serve's banner says it
    backend = SqliteFtsBackend(tmp_path / "a.sqlite3", auto_compact=False)
    backend.put_documents([_doc("d1", "w1 w2 w3")])
    assert [d for d, _ in _search(backend, "w2")] == ["d1"]
    backend.close()

    rank._choice.cache_clear()  # a damaged build in the cache: refused, never loaded into the index
    damaged = rank.cache_root() / hashlib.sha256(rank._source()).hexdigest()[:16]
    damaged.mkdir(parents=True)
    (damaged / rank.LIBRARY).write_bytes(b"not a library")
    assert rank.library() is None and rank.function() == rank.BUILTIN
    assert "not loaded (OperationalError)" in caplog.text


def test_kb_bm25_is_built_once_per_user_into_a_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    path = _require_build()
    assert path.is_relative_to(tmp_path) and path.name == rank.LIBRARY
    assert path.parent.stat().st_mode & 0o777 == 0o700
    built = path.stat().st_mtime_ns
    rank._choice.cache_clear()
    assert rank.library() == path and path.stat().st_mtime_ns == built  # found, not built again


def test_a_build_others_may_write_is_not_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A library in a directory group or others may write could be anyone's code: refused, bm25() ranks."""
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    path = _require_build()
    path.parent.chmod(0o777)
    rank._choice.cache_clear()
    assert rank.library() is None and rank.function() == rank.BUILTIN
    assert "is not this user's alone" in caplog.text

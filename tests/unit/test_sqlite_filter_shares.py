"""F-FILTER on the embedded backend: how much of a source a filter admits (which decides the selective or
broad plan) is counted once per source version and filter, and counted again after any write of the source;
`1` and `true` are different filters."""

from __future__ import annotations

from pathlib import Path

from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.adapters.sqlite.filters import AdmittedShares
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
from knowledge_core.domain.filters import parse_filter
from knowledge_core.domain.models import Document, DocumentAcl

KEY = "docs@1.0.0"


def _docs(n: int, start: int, metadata: dict) -> list[Document]:
    return [
        Document(
            source_key=KEY,
            doc_id=f"d{i}",
            title=f"t{i}",
            body=f"body {i}",
            acl=DocumentAcl(tenant="a"),
            metadata=metadata,
        )
        for i in range(start, start + n)
    ]


def test_f_filter_admitted_share_counted_once_per_source_version(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite3"
    backend = SqliteFtsBackend(path)
    backend.put_documents(
        _docs(2, 0, {"region": "eu", "level": 1}) + _docs(8, 2, {"region": "us", "level": True})
    )
    counted: list[str] = []
    conn = sqlite3.connect(path)
    conn.set_trace_callback(lambda sql: counted.append(sql) if "count(*)" in sql else None)
    shares = AdmittedShares()
    eu = parse_filter({"equals": {"key": "region", "value": "eu"}})
    assert shares.share(conn, KEY, eu) == 0.2 and len(counted) == 2
    assert shares.share(conn, KEY, eu) == 0.2 and len(counted) == 2  # the same version: not counted again
    one, true = (parse_filter({"equals": {"key": "level", "value": v}}) for v in (1, True))
    assert (shares.share(conn, KEY, one), shares.share(conn, KEY, true)) == (0.2, 0.8)
    backend.put_documents(_docs(10, 10, {"region": "eu"}))  # a write of the source: its version moves
    assert shares.share(conn, KEY, eu) == 0.6 and len(counted) == 8
    backend.delete_document(KEY, "d10")
    assert shares.share(conn, KEY, eu) == 11 / 19
    conn.close()
    backend.close()


def test_f_filter_admitted_shares_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "search.sqlite3"
    backend = SqliteFtsBackend(path)
    backend.put_documents(_docs(4, 0, {"n": 1}))
    conn = sqlite3.connect(path)
    shares = AdmittedShares()
    for i in range(AdmittedShares.MAX_ENTRIES + 10):
        shares.share(conn, KEY, parse_filter({"equals": {"key": "n", "value": i}}))
    assert len(shares) == AdmittedShares.MAX_ENTRIES
    conn.close()
    backend.close()

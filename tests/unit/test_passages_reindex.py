"""Re-index on upgrade (I-INGEST / A-REF): an embedded index cut by an older splitter is
re-split on open; refs minted before keep their semantics — the unchanged document still reads, a changed
one answers 409 knowledge_changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite.driver import sqlite3
from knowledge_core.domain.errors import KnowledgeChanged
from knowledge_core.domain.models import Document, DocumentAcl
from knowledge_core.domain.passages import split_structured
from knowledge_core.domain.wire import ReadRequest, SearchRequest

from tests.conftest import FakeClock, embedded_container
from tests.unit.test_search_hints import PRINCIPAL, ROUTE, A, setup_world

BODY = (
    "# Runbook\n\n## Promote\n\nPromote the standby replica with patronictl.\n\n## Verify\n\nCheck the lag."
)


def _doc(body: str = BODY) -> Document:
    return Document(source_key=A, doc_id="runbook", title="Runbook", body=body, acl=DocumentAcl(tenant="t"))


def _rows(path: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT text, heading FROM passage_rows ORDER BY passage_no").fetchall()


def test_i_ingest_sqlite_resplits_on_open_and_old_refs_keep_409_semantics(
    tmp_path: Path, clock: FakeClock
) -> None:
    state = str(tmp_path / "state.sqlite3")
    first = setup_world(embedded_container(tmp_path, clock, state_path=state), {A: 0.0}, [_doc()])
    ref = first.knowledge.search(PRINCIPAL, ROUTE, SearchRequest(query="promote standby")).hints[0].ref
    # The file as the previous splitter left it: one passage holding the headings, no heading paths.
    index = tmp_path / "kb.sqlite3"
    with sqlite3.connect(index) as conn:
        conn.execute("UPDATE passage_rows SET text = ?, heading = NULL", (BODY,))
        conn.execute("PRAGMA user_version = 2")
    reopened = embedded_container(tmp_path, clock, state_path=state)
    assert reopened.backend is not None
    expected = [(p.text, p.heading_path) for p in split_structured(BODY, "Runbook")]
    assert (
        _rows(index)
        == expected
        == [
            ("Promote the standby replica with patronictl.", "Promote"),
            ("Check the lag.", "Verify"),
        ]
    )
    hint = reopened.knowledge.search(PRINCIPAL, ROUTE, SearchRequest(query="promote standby")).hints[0]
    assert hint.summary == "Promote the standby replica with patronictl."
    # The ref minted before the re-split reads the same, unchanged document.
    page = reopened.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=ref, max_bytes=4096))
    assert "Promote the standby" in page.content
    reopened.admin.put_documents([_doc(BODY + "\n\nA new step.")])
    with pytest.raises(KnowledgeChanged):
        reopened.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=ref, max_bytes=4096))

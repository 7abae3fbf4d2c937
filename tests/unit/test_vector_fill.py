"""G-LOCAL first start and I-INGEST bounded embedding, in the core on the embedded backend: passages stored
with their vectors deferred are searchable by BM25 at once, every door ranks by BM25 and says so until a
background fill (stoppable between batches) gives them their vectors, then hybrid; one write's embedding has
a deadline, so a huge document fails typed instead of holding the ingestion worker and every job behind it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.adapters.sqlite.search import FILL_BATCH, SqliteFtsBackend
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.models import Document, DocumentAcl, SourceDefinition
from knowledge_core.services.retrieval import Retrieval

from tests.conftest import FakeClock, embedded_container
from tests.fake_embedder import MixedEmbedder

SOURCE = "manuals@1.0.0"


class CountingEmbedder(MixedEmbedder):
    """MixedEmbedder counting the passages it embeds; `delay` seconds per call, `on_call` run at each."""

    def __init__(self, delay: float = 0.0, on_call: Any = None) -> None:
        self.passages = 0
        self.calls = 0
        self.delay = delay
        self.on_call = on_call

    def embed_passages(self, texts: Any, models: Any = None) -> list:
        self.calls += 1
        self.passages += len(texts)
        if self.on_call is not None:
            self.on_call()
        time.sleep(self.delay)
        return super().embed_passages(texts, models)


def _docs(n: int, prefix: str = "d") -> list[Document]:
    topics = ["battery drains fast", "garden hose leaks", "river level alert", "电池 续航 很短"]
    return [
        Document(
            source_key=SOURCE,
            doc_id=f"{prefix}{i}",
            title=f"Note {i}",
            body=f"{topics[i % len(topics)]} note number {i}",
            acl=DocumentAcl(tenant="acme"),
        )
        for i in range(n)
    ]


def test_g_local_deferred_vectors_rank_by_bm25_and_say_so_until_filled_then_hybrid(tmp_path: Path) -> None:
    """G-LOCAL: documents written with their vectors deferred embed nothing and are found by BM25 at once;
    the ranking state says bm25/filling and queries carry no vector until `fill_vectors`, then hybrid/ready
    with query vectors."""
    embedder = CountingEmbedder()
    backend = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=embedder)
    retrieval = Retrieval(backend, embedder=embedder)
    with backend.deferred_vectors():
        backend.put_documents(_docs(6))
    assert embedder.passages == 0
    assert backend.vectors_pending()
    state = retrieval.ranking_state()
    assert (state.mode, state.vectors) == ("bm25", "filling")
    assert retrieval.analyse("battery").vectors == ()
    assert backend.fill_vectors() is True
    assert embedder.passages > 0 and not backend.vectors_pending()
    state = retrieval.ranking_state()
    assert (state.mode, state.vectors) == ("hybrid", "ready")
    assert retrieval.analyse("battery").vectors


def test_g_local_another_process_opening_pending_vectors_leaves_them_to_the_fill(tmp_path: Path) -> None:
    """G-LOCAL: a worker process opening the index while vectors are pending embeds nothing at open (the
    background fill does), and sees the same pending state; written normally, a write embeds at once."""
    with_deferred = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=CountingEmbedder())
    with with_deferred.deferred_vectors():
        with_deferred.put_documents(_docs(4))
    other_embedder = CountingEmbedder()
    other = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=other_embedder)
    assert other_embedder.passages == 0 and other.vectors_pending()
    assert with_deferred.fill_vectors() and not other.vectors_pending()
    other.put_documents(_docs(1, prefix="late"))
    assert other_embedder.passages > 0 and not other.vectors_pending()


def test_g_local_a_fill_stops_between_batches_and_resumes_later(tmp_path: Path) -> None:
    """G-LOCAL: a stop set while the fill embeds ends it after the batch under way (kb serve's SIGTERM);
    vectors stay pending, and the next fill finishes them."""
    stop = threading.Event()
    embedder = CountingEmbedder(on_call=stop.set)
    backend = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=embedder)
    with backend.deferred_vectors():
        backend.put_documents(_docs(FILL_BATCH * 3))
    assert backend.fill_vectors(stop) is False
    assert embedder.calls == 1 and embedder.passages <= FILL_BATCH
    assert backend.vectors_pending()
    embedder.on_call = None
    assert backend.fill_vectors() is True and not backend.vectors_pending()


def test_g_local_a_deferred_write_during_a_fill_keeps_vectors_pending(tmp_path: Path) -> None:
    """G-LOCAL: a fill that ends after another deferred write began does not clear the pending state it
    did not see: it goes round again, so no passage is left without its vectors while hybrid is on."""
    backend = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=CountingEmbedder())
    with backend.deferred_vectors():
        backend.put_documents(_docs(2))
    wrote = []

    def write_once() -> None:
        if not wrote:
            wrote.append(True)
            with backend.deferred_vectors():
                backend.put_documents(_docs(2, prefix="more"))

    backend._embedder.on_call = write_once  # type: ignore[union-attr]
    assert backend.fill_vectors() is True and not backend.vectors_pending()
    missing = (
        backend._conn()
        .execute(
            "SELECT count(*) FROM passage_rows r WHERE NOT EXISTS "
            "(SELECT 1 FROM passage_vectors v WHERE v.passage_id = r.id)"
        )
        .fetchone()[0]
    )
    assert missing == 0


def test_i_ingest_a_write_whose_embedding_passes_the_deadline_is_refused_whole(tmp_path: Path) -> None:
    """I-INGEST: embedding a write is bounded by the embedding deadline: past it the write is refused
    (typed `embedding_timeout`) and nothing of it is stored."""
    backend = SqliteFtsBackend(
        tmp_path / "kb.sqlite3", embedder=CountingEmbedder(delay=0.2), embedding_seconds=0.1
    )
    huge = Document(
        source_key=SOURCE,
        doc_id="huge",
        title="Huge",
        body="\n\n".join(f"battery paragraph {i} " + "word " * 120 for i in range(400)),
        acl=DocumentAcl(tenant="acme"),
    )
    started = time.monotonic()
    with pytest.raises(SourceFailure) as refused:
        backend.put_documents([huge])
    assert refused.value.kind == "rejected" and refused.value.cause == "embedding_timeout"
    assert time.monotonic() - started < 5
    assert backend.get_document(SOURCE, "huge") is None


def test_i_ingest_a_huge_document_fails_typed_and_the_next_job_completes(
    tmp_path: Path, clock: FakeClock
) -> None:
    """I-INGEST: one ingestion worker, a job whose document embeds past the deadline and a small job
    behind it: the huge document ends `embedding_timeout` (the rest of its job written), and the small
    job completes, all within a bounded time."""
    from knowledge_core.domain.admin_wire import IngestionJobRequest
    from knowledge_core.domain.wire import parse_request

    container = embedded_container(tmp_path, clock, embedding_deadline_seconds=1.0)
    slow = CountingEmbedder(delay=0.3)  # per call of DEADLINE_CHUNK passages: the huge document needs many
    container._embedder = slow  # the port override: this embedder, no model files
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    huge_body = "\n\n".join(f"battery paragraph {i} " + "word " * 120 for i in range(400))

    def job(documents: list[dict]) -> str:
        body = {"documents": [{"acl": {"tenant": "acme"}, **d} for d in documents]}
        return container.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body))).job_id

    big = job(
        [
            {"doc_id": "huge", "title": "Huge", "body": huge_body},
            {"doc_id": "ok", "title": "Ok", "body": "garden"},
        ]
    )
    small = job([{"doc_id": "small", "title": "Small", "body": "river level alert"}])
    started = time.monotonic()
    raised = []
    for _ in range(6):  # as IngestWorker does: a refused batch counts an attempt, then the lease runs out
        try:
            if container.ingestion.work("w1") is None:
                break
        except SourceFailure as exc:
            raised.append(exc.cause)
            clock.advance(container.settings.ingest_lease_seconds + 1)
    assert raised == ["embedding_timeout"]  # the batch of two once; then each document alone
    assert time.monotonic() - started < 20
    big_status = container.ingestion.status(SOURCE, big)
    assert big_status.state == "completed"
    assert {(e.doc_id, e.code) for e in big_status.errors} == {("huge", "embedding_timeout")}
    assert big_status.counts.done == 1
    assert container.ingestion.status(SOURCE, small).state == "completed"
    assert container.backend.get_document(SOURCE, "small") is not None


def test_i_ingest_opensearch_write_past_the_embedding_deadline_sends_nothing() -> None:
    """I-INGEST: the OpenSearch adapter bounds a write's embedding the same way: refused typed
    `embedding_timeout` before any request reaches the cluster."""
    from knowledge_core.adapters.opensearch import OpenSearchBackend

    class _Refuses:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def __getattr__(self, name: str) -> Any:
            self.calls.append(name)
            raise AssertionError(f"no request expected ({name})")

    client = _Refuses()
    backend = OpenSearchBackend(
        "http://127.0.0.1:1", client=client, embedder=CountingEmbedder(delay=0.2), embedding_seconds=0.1
    )
    backend.ensure_indices = lambda: None  # type: ignore[method-assign]  # indices ready: only the write
    huge = Document(
        source_key=SOURCE,
        doc_id="huge",
        title="Huge",
        body="\n\n".join(f"battery paragraph {i} " + "word " * 120 for i in range(400)),
        acl=DocumentAcl(tenant="acme"),
    )
    with pytest.raises(SourceFailure) as refused:
        backend.put_documents([huge])
    assert refused.value.kind == "rejected" and refused.value.cause == "embedding_timeout"
    assert client.calls == []

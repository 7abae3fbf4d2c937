"""Ingestion security (SPEC §7 I-INGEST): hostile files that jam or exhaust ingestion, directory sync
races, sync that deletes across tenants, and job cancel. Each test is named after its finding and fails on
the code before the fix. Every hostile file is generated here (`tests/bombs.py`), small on disk."""

from __future__ import annotations

import base64
import json
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.errors import InvalidRequest, SourceFailure
from knowledge_core.domain.models import Document, DocumentAcl, SourceDefinition
from knowledge_core.domain.wire import parse_request
from knowledge_core.extraction import ExtractionError, ExtractionLimits, extract
from knowledge_core.services.ingestion import IngestionService

from tests import bombs
from tests.conftest import FakeClock, embedded_container

SOURCE = "manuals@1.0.0"
ACL = {"tenant": "acme"}


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock) -> Container:
    container = embedded_container(tmp_path, clock, ingest_directories=True)
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container


@pytest.fixture(scope="session")
def docx_bomb(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return bombs.docx_of_spaces(tmp_path_factory.mktemp("bombs") / "spaces.docx").read_bytes()


def request(body: dict) -> IngestionJobRequest:
    body = dict(body)
    if "documents" in body:
        body["documents"] = [{"acl": ACL, **d} for d in body["documents"]]
    else:
        body.setdefault("acl", ACL)
    return parse_request(IngestionJobRequest, json.dumps(body))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def errors_of(c: Container, job_id: str) -> dict[str, str]:
    return {e.doc_id: e.code for e in c.ingestion.status(SOURCE, job_id).errors}


# --- M1: any extraction failure is typed; the job goes on ---------------------------------------------


def _work_until_finished(
    c: Container, clock: FakeClock, dies: type[BaseException], raised: list[BaseException] | None = None
) -> int:
    """Workers until the job finishes, each one that ends by `dies` (kept in `raised`) followed by its
    lease running out: how many ended so."""
    for restart in range(10):
        try:
            c.ingestion.work(f"w{restart}")
            return restart
        except dies as exc:
            if raised is not None:
                raised.append(exc)
            clock.advance(c.settings.ingest_lease_seconds + 1)
    pytest.fail("the job never finished: a failing document is retried forever")


def test_m1_recursion_error_is_typed_and_job_goes_on(c: Container) -> None:
    """~1 MB of nested <div> raised RecursionError out of the job (it stayed `running`, the good
    documents of its batch were never written); an unknown PDF cipher raised NotImplementedError."""
    accepted = c.ingestion.submit(
        SOURCE,
        request(
            {
                "documents": [
                    {"doc_id": "good", "title": "Good", "body": "pumpernickel"},
                    {"doc_id": "divs", "filename": "d.html", "content_base64": b64(bombs.nested_divs())},
                    {
                        "doc_id": "cipher",
                        "filename": "c.pdf",
                        "content_base64": b64(bombs.pdf_unknown_cipher()),
                    },
                    {"doc_id": "after", "filename": "a.md", "content_base64": b64(b"# After\n\nrye bread")},
                ]
            }
        ),
    )
    assert c.ingestion.work("w") == accepted.job_id
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and (status.counts.done, status.counts.failed) == (2, 2)
    assert errors_of(c, accepted.job_id) == {"divs": "too_complex", "cipher": "encrypted"}
    assert c.backend.document_ids(SOURCE) == ["after", "good"]


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (MemoryError(), "too_large"),
        (RecursionError(), "too_complex"),
        (NotImplementedError(), "extraction_failed"),
    ],
)
def test_m1_any_extractor_exception_is_a_typed_error(c: Container, raised: BaseException, code: str) -> None:
    def broken(name: str, data: bytes) -> object:
        raise raised

    service = IngestionService(c.state.registry, c.state.jobs, c.backend, c.clock, extractor=broken)  # type: ignore[arg-type]
    docs = [
        {"doc_id": "file", "filename": "f.html", "content_base64": b64(b"<p>x</p>")},
        {"doc_id": "text", "title": "T", "body": "still written"},
    ]
    accepted = service.submit(SOURCE, request({"documents": docs}))
    service.work("w")
    status = service.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and {(e.doc_id, e.code) for e in status.errors} == {("file", code)}
    assert c.backend.document_ids(SOURCE) == ["text"]


def test_m1_poison_document_ends_failed_after_bounded_attempts(
    c: Container, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A document that kills its worker every time (kill -9 while on it, also across restarts) is begun
    at most MAX_DOCUMENT_ATTEMPTS times, then fails `attempts_exhausted`; the rest of the job is done."""
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"body {i}"} for i in range(5)]
    docs[2] = {"doc_id": "poison", "filename": "p.md", "content_base64": b64(b"# kills the worker")}
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    real = c.ingestion._extract

    def dies_on_poison(name: str, data: bytes) -> object:
        if name == "p.md":
            raise SystemExit("worker killed")  # not an Exception: the worker process dies here
        return real(name, data)

    monkeypatch.setattr(c.ingestion, "_extract", dies_on_poison)
    restart = _work_until_finished(c, clock, SystemExit)  # each death: the next kb serve takes the job over
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 4
    assert errors_of(c, accepted.job_id) == {"poison": "attempts_exhausted"}
    assert restart == 3  # three deaths, then the fourth worker fails it and finishes


def test_m1_a_search_backend_outage_costs_no_attempts(
    c: Container, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend down for many retries is nobody's document's fault: once it is back, every document
    is written (none ends `attempts_exhausted`)."""
    from knowledge_core.domain.errors import SourceFailure
    from knowledge_core.services import ingestion

    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"body {i}"} for i in range(3)]
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))

    def down(documents: list) -> None:
        raise SourceFailure("unavailable")

    with monkeypatch.context() as patched:
        patched.setattr(c.backend, "put_documents", down)
        for _ in range(6):
            assert c.ingestion.work("w") == accepted.job_id
            clock.advance(ingestion.BACKEND_RETRY_SECONDS + 1)
    assert [d.attempts for d in c.state.jobs.job_documents(accepted.job_id)] == [0, 0, 0]
    assert c.ingestion.work("w") == accepted.job_id
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 3 and not status.errors


class _Indices:
    """The index APIs of a node with nothing made yet (ensure_indices puts templates, creates indices)."""

    def put_index_template(self, **_: Any) -> None: ...

    def get_alias(self, **_: Any) -> dict:
        from opensearchpy.exceptions import NotFoundError

        raise NotFoundError(404, "aliases_not_found_exception", {})

    def create(self, **_: Any) -> None: ...

    def refresh(self, **_: Any) -> None:  # what a job's end reads first: the index made here holds nothing
        from opensearchpy.exceptions import NotFoundError

        raise NotFoundError(404, "index_not_found_exception", {})


class _Serializer:
    def dumps(self, data: Any) -> str:
        return json.dumps(data)


class _WritingNode:
    """An OpenSearch client without a server: no document stored yet, and each `_bulk` item answered by
    `fault(row)` (a failing status, or (status, the node's reason), or None: written); `fault` may raise a
    transport error instead."""

    def __init__(self) -> None:
        self.indices = _Indices()
        self.transport = type("Transport", (), {"serializer": _Serializer()})()
        self.fault: Callable[[dict], int | tuple[int, str] | None] = lambda row: None

    def get(self, **_: Any) -> dict:
        from opensearchpy.exceptions import NotFoundError

        raise NotFoundError(404, "not_found", {})

    def mget(self, **_: Any) -> dict:
        return {"docs": []}

    def bulk(self, body: str, **_: Any) -> dict:
        lines = [json.loads(line) for line in body.splitlines()]
        items = []
        for action, row in zip(lines[::2], lines[1::2], strict=True):
            ((op, _meta),) = action.items()
            answer = self.fault(row)
            if answer is None:
                items.append({op: {"status": 201}})
            else:
                status, reason = answer if isinstance(answer, tuple) else (answer, "refused")
                items.append(
                    {op: {"status": status, "error": {"type": f"status {status}", "reason": reason}}}
                )
        return {"errors": any("error" in item[op] for item in items for op in item), "items": items}


@pytest.fixture
def on_opensearch(tmp_path: Path, clock: FakeClock) -> tuple[Container, _WritingNode]:
    """An embedded-state container whose search backend is the OpenSearch adapter on a fake node."""
    from knowledge_core.adapters.opensearch import OpenSearchBackend

    node = _WritingNode()
    settings = embedded_container(tmp_path, clock).settings
    container = Container(settings, clock=clock, backend=OpenSearchBackend("http://127.0.0.1:1", client=node))
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container, node


def _refused(exc: Exception) -> Callable[[dict], int | None]:
    def fault(row: dict) -> int | None:
        raise exc

    return fault


def _write_faults() -> dict[str, tuple[Callable[[dict], int | None], str]]:
    """How a write can fail -> (the node's answer, the SourceFailure kind the adapter reports)."""
    from opensearchpy.exceptions import ConnectionError, ConnectionTimeout, TransportError

    return {
        "every item throttled (429)": (lambda row: 429, "throttled"),
        # passages throttled, their documents failed by the node itself
        "items throttled or the node failing (503)": (
            lambda row: 429 if "passage_no" in row else 503,
            "unavailable",
        ),
        "connection refused": (_refused(ConnectionError("N/A", "refused", OSError())), "unavailable"),
        "timed out": (_refused(ConnectionTimeout("TIMEOUT", "timed out", OSError())), "timeout"),
        "request throttled (429)": (_refused(TransportError(429, "too_many_requests", {})), "throttled"),
        "an item refused (400)": (lambda row: 400 if row["doc_id"] == "d1" else None, "rejected"),
        "request refused (413)": (_refused(TransportError(413, "request_entity_too_large", {})), "rejected"),
    }


@pytest.mark.parametrize("fault", sorted(_write_faults()))
def test_m1_i_ingest_opensearch_write_faults_are_typed_source_failures(
    on_opensearch: tuple[Container, _WritingNode], fault: str
) -> None:
    """The OpenSearch adapter reports a write it could not make as the port says (a SourceFailure of its
    kind, transient unless the node refused the documents), and the admin API answers it 503
    knowledge_unavailable, saying when to retry."""
    from knowledge_core.domain.errors import KnowledgeUnavailable, SourceFailure

    c, node = on_opensearch
    node.fault, kind = _write_faults()[fault]
    docs = [
        Document(source_key=SOURCE, doc_id=f"d{i}", title="t", body=f"b {i}", acl=DocumentAcl(tenant="acme"))
        for i in range(3)
    ]
    with pytest.raises(SourceFailure) as caught:
        c.backend.put_documents(docs)
    assert caught.value.kind == kind and caught.value.transient == (kind != "rejected")
    with pytest.raises(KnowledgeUnavailable) as answered:
        c.admin.put_documents(docs)
    assert answered.value.status == 503
    assert ("retry" in answered.value.message) == (kind == "throttled")


@pytest.mark.parametrize("fault", ["every item throttled (429)", "connection refused", "timed out"])
def test_m1_i_ingest_opensearch_throttled_or_down_write_is_retried_by_the_job_without_an_attempt(
    on_opensearch: tuple[Container, _WritingNode], clock: FakeClock, fault: str
) -> None:
    """A write OpenSearch throttles (or cannot take) is retried by the job after BACKEND_RETRY_SECONDS,
    costing the documents no attempt, however often; once the node takes it, every document is done."""
    from knowledge_core.services import ingestion

    c, node = on_opensearch
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"body {i}"} for i in range(3)]
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    node.fault = _write_faults()[fault][0]
    for _ in range(4):
        assert c.ingestion.work("w") == accepted.job_id  # returns: the job waits, nothing raised
        assert c.ingestion.work("w2") is None  # backing off
        clock.advance(ingestion.BACKEND_RETRY_SECONDS + 1)
    assert [d.attempts for d in c.state.jobs.job_documents(accepted.job_id)] == [0, 0, 0]
    node.fault = lambda row: None
    assert c.ingestion.work("w") == accepted.job_id
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 3 and not status.errors


def test_m1_i_ingest_sqlite_locked_search_file_is_retried_by_the_job_without_an_attempt(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The embedded search file locked by another process past its busy timeout is an outage too: the
    job waits and retries without costing the documents an attempt, and the admin API answers 503."""
    from knowledge_core.adapters.sqlite.driver import sqlite3
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.errors import KnowledgeUnavailable
    from knowledge_core.services import ingestion

    settings = embedded_container(tmp_path, clock).settings
    backend = SqliteFtsBackend(settings.sqlite_path, busy_timeout_s=0.05)
    c = Container(settings, clock=clock, backend=backend)
    c.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"body {i}"} for i in range(3)]
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    holder = sqlite3.connect(settings.sqlite_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for _ in range(3):
            assert c.ingestion.work("w") == accepted.job_id  # returns: the job waits, nothing raised
            clock.advance(ingestion.BACKEND_RETRY_SECONDS + 1)
        with pytest.raises(KnowledgeUnavailable) as answered:
            c.admin.put_documents([Document(source_key=SOURCE, doc_id="x", title="t", body="b")])
        assert answered.value.status == 503
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [d.attempts for d in c.state.jobs.job_documents(accepted.job_id)] == [0, 0, 0]
    assert c.ingestion.work("w") == accepted.job_id
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 3 and not status.errors


def test_m1_i_ingest_opensearch_rejected_write_is_not_retried_as_an_outage(
    on_opensearch: tuple[Container, _WritingNode], clock: FakeClock
) -> None:
    """A document OpenSearch refuses (a 4xx item) is no outage: the batch's try counts an attempt, its batch
    is then written a document at a time, and the refused one, written alone, fails at once with the typed
    `index_rejected` (no further attempt: retrying would not change it); the job completes."""
    from knowledge_core.domain.errors import SourceFailure

    c, node = on_opensearch
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"body {i}"} for i in range(5)]
    docs[2]["doc_id"] = "refused"
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    node.fault = lambda row: 400 if row["doc_id"] == "refused" else None
    raised: list[BaseException] = []
    restart = _work_until_finished(c, clock, SourceFailure, raised)  # retried once the lease runs out
    assert {exc.kind for exc in raised if isinstance(exc, SourceFailure)} == {"rejected"}
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 4
    assert errors_of(c, accepted.job_id) == {"refused": "index_rejected"}
    assert restart == 1  # the batch refused once; alone, the document is refused and recorded, not raised
    assert [d.attempts for d in c.state.jobs.job_documents(accepted.job_id)] == [2, 2, 2, 2, 2]


def test_i_ingest_a_document_past_the_index_field_limit_fails_too_many_fields(
    on_opensearch: tuple[Container, _WritingNode], clock: FakeClock
) -> None:
    """New metadata keys past OpenSearch's field limit: the document fails `too_many_fields` (not a bare
    status, not `attempts_exhausted` after three tries), and nothing of the node's message is kept beyond
    the limit itself; the other documents are written."""
    from knowledge_core.adapters.opensearch import _write_failure

    c, node = on_opensearch
    docs = [{"doc_id": "plain", "title": "P", "body": "b"}, {"doc_id": "wide", "title": "W", "body": "b"}]
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    reason = "Limit of total fields [1000] has been exceeded while adding new fields [3] 'secret value'"
    node.fault = lambda row: (400, reason) if row["doc_id"] == "wide" else None
    _work_until_finished(c, clock, SourceFailure)
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 1
    assert errors_of(c, accepted.job_id) == {"wide": "too_many_fields"}
    failure = _write_failure([400], [{"type": "illegal_argument_exception", "reason": reason}])
    assert (failure.kind, failure.cause) == ("rejected", "too_many_fields")
    assert str(failure) == "opensearch rejected the write: the index's field limit (1000) is reached"
    plain = _write_failure([400], [{"type": "mapper_parsing_exception", "reason": "field [x] 'secret'"}])
    assert plain.cause is None and "secret" not in str(plain)


# --- M2: bounded before and while reading, in a worker process with resource limits --------------------


def _hwm_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("bomb", "name", "code", "seconds"),
    [
        ("docx", "spaces.docx", "too_large", 20),
        ("tables", "tables.html", "too_complex", 20),
        ("divs", "divs.html", "too_complex", 20),
        ("pdf", "pages.pdf", "timeout", 20),
    ],
)
def test_m2_bombs_end_typed_within_bounds_and_never_grow_the_server(
    c: Container, docx_bomb: bytes, bomb: str, name: str, code: str, seconds: float
) -> None:
    """The four bombs of the review (1 GiB of spaces in a 1 MB DOCX; 2,000 nested tables in 66 KB of
    HTML; ~1 MB of nested divs; a small PDF whose 200 pages share one huge content stream) end in a
    typed error within the wall bound, extracted in a child process: the serving process stays small."""
    from knowledge_core.extraction_sandbox import ProcessExtractor

    data = {
        "docx": docx_bomb,
        "tables": bombs.nested_tables(),
        "divs": bombs.nested_divs(),
        "pdf": bombs.pdf_shared_stream(),
    }[bomb]
    extractor = ProcessExtractor(ExtractionLimits(wall_seconds=5))
    before = _hwm_mib()
    started = time.monotonic()
    try:
        with pytest.raises(ExtractionError) as caught:
            extractor(name, data)
    finally:
        extractor.close()
    assert caught.value.code == code
    assert time.monotonic() - started < seconds
    assert _hwm_mib() - before < 64  # the 1 GiB inflates (if at all) in the child, never here


@pytest.mark.timeout(60)
def test_m2_the_extraction_child_runs_with_resource_limits_and_no_parent_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from knowledge_core.extraction_sandbox import ProcessExtractor

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "parent-secret")
    extractor = ProcessExtractor(ExtractionLimits(memory_bytes=512 * 1024 * 1024, wall_seconds=7))
    try:
        assert extractor("a.html", b"<h1>T</h1><p>body</p>").body.strip() == "body"
        child = extractor._child
        assert child is not None
        limits = Path(f"/proc/{child.pid}/limits").read_text()
        address = next(line for line in limits.splitlines() if line.startswith("Max address space"))
        assert address.split()[3] == str(512 * 1024 * 1024)
        cpu = next(line for line in limits.splitlines() if line.startswith("Max cpu time"))
        assert int(cpu.split()[3]) <= 7 + 1 + 5  # this document's budget on top of what it used
        assert b"parent-secret" not in Path(f"/proc/{child.pid}/environ").read_bytes()
    finally:
        extractor.close()


def test_m2_the_kb_serve_worker_extracts_in_a_child_process(c: Container) -> None:
    """The container's default: not a thread of the serving process."""
    from knowledge_core.extraction_sandbox import ProcessExtractor

    assert isinstance(c.extractor, ProcessExtractor)
    assert c.ingestion._extract is c.extractor


def test_m2_the_size_checks_come_before_any_decoding(c: Container) -> None:
    """A body over 5 MiB is refused at submit (never queued); a text file over it before decoding (it
    is `too_large`, not `corrupt`, even when it is not UTF-8); an input over the bound before parsing."""
    huge = "x" * (5 * 1024 * 1024 + 1)
    accepted = c.ingestion.submit(
        SOURCE, request({"documents": [{"doc_id": "big", "title": "B", "body": huge}]})
    )
    queued = c.ingestion.status(SOURCE, accepted.job_id)
    assert queued.counts.failed == 1 and queued.errors[0].code == "too_large"
    with pytest.raises(ExtractionError) as caught:
        extract("big.md", b"\xff" * (5 * 1024 * 1024 + 8))
    assert caught.value.code == "too_large"
    with pytest.raises(ExtractionError) as caught:
        extract("big.html", b"<p>" * 100, ExtractionLimits(max_input_bytes=200))
    assert caught.value.code == "too_large"


@pytest.mark.parametrize(
    ("name", "data", "limits", "code"),
    [
        ("deep.html", b"<div>" * 300 + b"x", ExtractionLimits(), "too_complex"),
        ("wide.html", b"<p>x</p>" * 50, ExtractionLimits(max_html_elements=40), "too_complex"),
        (
            "pages.pdf",
            bombs.pdf_shared_stream(pages=20, repeats=10),
            ExtractionLimits(max_pdf_pages=10),
            "too_large",
        ),
        (
            "content.pdf",
            bombs.pdf_shared_stream(pages=20, repeats=1000),
            ExtractionLimits(max_pdf_content_bytes=100_000),
            "too_large",
        ),
        (
            "out.pdf",
            bombs.pdf_shared_stream(pages=20, repeats=1000),
            ExtractionLimits(max_output_bytes=500),
            "too_large",
        ),
    ],
)
def test_m2_each_bound_is_a_typed_error(name: str, data: bytes, limits: ExtractionLimits, code: str) -> None:
    with pytest.raises(ExtractionError) as caught:
        extract(name, data, limits)
    assert caught.value.code == code


def test_m2_docx_zip_bounds_refuse_before_inflating(docx_bomb: bytes) -> None:
    from tests.unit.test_extraction import make_docx

    started = time.monotonic()
    with pytest.raises(ExtractionError) as caught:
        extract("spaces.docx", docx_bomb)
    assert caught.value.code == "too_large" and time.monotonic() - started < 5
    with pytest.raises(ExtractionError) as caught:  # the total of declared sizes
        extract("v.docx", make_docx(), ExtractionLimits(max_unzipped_bytes=10_000))
    assert caught.value.code == "too_large"
    assert extract("v.docx", make_docx()).title == "Valve manual"  # a real document passes


# --- M3: files opened without following links, regular files only ------------------------------------


@pytest.mark.timeout(60)
def test_m3_file_swapped_for_symlink_or_fifo_is_a_typed_error(c: Container, tmp_path: Path) -> None:
    """After the scan, a file becomes a symlink to a file outside, another a FIFO, a folder a symlink to
    a folder outside: each is `not_a_file`, nothing outside is read, the worker never hangs."""
    folder, outside = tmp_path / "docs", tmp_path / "outside"
    (folder / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nouter-space-secret", "utf-8")
    (outside / "d.md").write_text("# D\n\nouter-space-secret", "utf-8")
    for name in ("a.md", "b.md", "c.md", "sub/d.md"):
        (folder / name).write_text(f"# {name}\n\ninside text", "utf-8")
    accepted = c.ingestion.submit(SOURCE, request({"directory": str(folder), "doc_id_prefix": "kb"}))
    (folder / "a.md").unlink()
    (folder / "a.md").symlink_to(outside / "secret.md")
    (folder / "b.md").unlink()
    os.mkfifo(folder / "b.md")
    (folder / "sub" / "d.md").unlink()
    (folder / "sub").rmdir()
    (folder / "sub").symlink_to(outside)
    c.ingestion.work("w")
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 1
    assert errors_of(c, accepted.job_id) == {
        "kb-a": "not_a_file",
        "kb-b": "not_a_file",
        "kb-sub-d": "not_a_file",
    }
    assert c.backend.document_ids(SOURCE) == ["kb-c"]


# --- M4 + SPEC §7: sync scope ---------------------------------------------------------------------------


def test_m4_sync_with_an_empty_doc_id_prefix_is_refused(c: Container, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\na", "utf-8")
    with pytest.raises(InvalidRequest) as caught:
        c.ingestion.submit(SOURCE, request({"directory": str(tmp_path), "sync": True}))
    assert caught.value.field == "doc_id_prefix" and "doc_id_prefix" in caught.value.message


def test_m4_sync_deletes_only_what_a_sync_of_that_origin_wrote_for_that_tenant(
    c: Container, tmp_path: Path
) -> None:
    """Two tenants and a bulk-ingested document under the same prefix survive a sync; so do the
    documents another directory's sync wrote under it. Only what left this directory goes."""
    mine, theirs, elsewhere = tmp_path / "mine", tmp_path / "theirs", tmp_path / "elsewhere"
    for folder, names in ((mine, ["a", "b"]), (theirs, ["t"]), (elsewhere, ["e"])):
        folder.mkdir()
        for name in names:
            (folder / f"{name}.md").write_text(f"# {name}\n\n{name} text", "utf-8")

    def sync(folder: Path, tenant: str = "acme") -> str:
        body = {"directory": str(folder), "doc_id_prefix": "kb", "sync": True, "acl": {"tenant": tenant}}
        job_id = c.ingestion.submit(SOURCE, request(body)).job_id
        c.ingestion.work("w")
        return job_id

    sync(mine)
    sync(theirs, tenant="globex")  # another tenant's sync, same source and prefix
    sync(elsewhere)  # the same tenant, another origin
    c.admin.put_documents(  # ingested another way, under the prefix: acme's and another tenant's
        [
            Document(
                source_key=SOURCE, doc_id="kb-bulk", title="B", body="bulk", acl=DocumentAcl(tenant="acme")
            ),
            Document(
                source_key=SOURCE, doc_id="kb-other", title="O", body="o", acl=DocumentAcl(tenant="initech")
            ),
        ]
    )
    assert len(c.backend.document_ids(SOURCE, "kb-")) == 6
    (mine / "a.md").unlink()
    (mine / "b.md").unlink()
    (mine / "c.md").write_text("# c\n\nc text", "utf-8")
    last = sync(mine)
    assert c.backend.document_ids(SOURCE, "kb-") == ["kb-bulk", "kb-c", "kb-e", "kb-other", "kb-t"]
    assert c.ingestion.status(SOURCE, last).counts.deleted == 2
    stored = c.backend.get_document(SOURCE, "kb-c")
    assert stored is not None and str(tmp_path) not in json.dumps(stored.structured_source)


# --- job cancel -----------------------------------------------------------------------------------------


def test_job_cancel_stops_after_the_current_batch_and_keeps_counts(
    c: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"body {i}"} for i in range(120)]
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    real_put = c.backend.put_documents

    def cancel_during_first_batch(documents: list) -> None:
        asked = c.ingestion.cancel(SOURCE, accepted.job_id)
        assert asked.state == "running" and asked.cancel_requested
        real_put(documents)

    monkeypatch.setattr(c.backend, "put_documents", cancel_during_first_batch)
    c.ingestion.work("w")
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "cancelled" and status.finished_at is not None
    assert (status.counts.done, status.counts.queued) == (50, 70)
    assert len(c.backend.document_ids(SOURCE)) == 50
    assert c.ingestion.work("w2") is None  # never claimed again
    queued = c.ingestion.submit(SOURCE, request({"documents": docs[:1]}))
    assert c.ingestion.cancel(SOURCE, queued.job_id).state == "cancelled"  # no worker yet: at once


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_job_cancel_admin_route(tmp_path: Path, clock: FakeClock) -> None:
    """`POST /admin/v1/sources/{source}/ingestion-jobs/{job_id}/cancel` (template.yaml, admin function)."""
    from knowledge_core import bootstrap

    from kb_cli import demo
    from kb_cli.events import load_event
    from kb_cli.gateway import Handlers

    c = embedded_container(tmp_path, clock)
    demo.seed(c, with_token=False)
    event = load_event("admin/submit-ingestion-job.json")

    def post(path: str) -> dict:
        e = json.loads(json.dumps(event))
        e["routeKey"] = e["requestContext"]["routeKey"] = "POST " + path
        e["rawPath"] = e["requestContext"]["http"]["path"] = path
        e["body"] = None
        return Handlers().invoke("AdminFunction", e)

    bootstrap.reset(c)
    try:
        job_id = json.loads(Handlers().invoke("AdminFunction", event)["body"])["job_id"]
        base = "/admin/v1/sources/demo-docs@1.0.0/ingestion-jobs"
        cancelled = post(f"{base}/{job_id}/cancel")
        body = json.loads(cancelled["body"])
        assert cancelled["statusCode"] == 200 and body["state"] == "cancelled" and body["cancel_requested"]
        missing = post(f"{base}/nope/cancel")
        assert missing["statusCode"] == 404 and json.loads(missing["body"])["error"]["code"] == "not_found"
    finally:
        bootstrap.reset(None)
    route = "/admin/v1/sources/{source}/ingestion-jobs/{job_id}/cancel"
    assert route in Path("template.yaml").read_text("utf-8")


def test_m4_the_sync_origin_digest_never_reaches_a_hit_or_citation() -> None:
    from knowledge_core.domain.ingestion import sync_origin_tag
    from knowledge_core.domain.passages import hit_source

    stored = {
        "uri": "a.md",
        "format": "markdown",
        "sync_origin": sync_origin_tag("/srv/docs"),
        "page_starts": [0],
    }
    assert hit_source(stored, [1]) == {"uri": "a.md", "format": "markdown", "pages": [1]}

"""I-INGEST jobs in the core (embedded state and index): a job answers at once and is worked through by
`work`; per-document typed errors do not stop the rest; unchanged content is skipped; a sync deletes what
left the directory; a worker that dies mid-job leaves its lease to run out and another finishes the job
with every document written once and whole."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest, JobStatus
from knowledge_core.domain.errors import InvalidRequest, NotFound
from knowledge_core.domain.models import SourceDefinition
from knowledge_core.domain.wire import parse_request
from knowledge_core.ports import JobQueue

from tests.conftest import FakeClock, embedded_container
from tests.unit.test_extraction import encrypted_pdf, make_docx, make_pdf

SOURCE = "manuals@1.0.0"


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock) -> Container:
    container = embedded_container(tmp_path, clock, ingest_directories=True)
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container


ACL = {"tenant": "acme"}


def request(body: dict) -> IngestionJobRequest:
    """A job request; every document (or the directory) gets tenant `acme` unless it names an ACL."""
    body = dict(body)
    if "documents" in body:
        body["documents"] = [{"acl": ACL, **d} for d in body["documents"]]
    else:
        body.setdefault("acl", ACL)
    return parse_request(IngestionJobRequest, json.dumps(body))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_i_ingest_inline_job_counts_outcomes_and_typed_errors(c: Container, clock: FakeClock) -> None:
    accepted = c.ingestion.submit(
        SOURCE,
        request(
            {
                "documents": [
                    {"doc_id": "note", "title": "Note", "body": "plain pumpernickel text"},
                    {
                        "doc_id": "manual",
                        "filename": "m.pdf",
                        "content_base64": b64(make_pdf(["pumps", "valves"])),
                    },
                    {"doc_id": "valve", "filename": "v.docx", "content_base64": b64(make_docx())},
                    {"doc_id": "locked", "filename": "l.pdf", "content_base64": b64(encrypted_pdf())},
                    {"doc_id": "sheet", "filename": "s.xlsx", "content_base64": b64(b"PK\x03\x04")},
                    {"doc_id": "blank", "filename": "b.md", "content_base64": b64(b"   ")},
                ]
            }
        ),
    )
    queued = c.ingestion.status(SOURCE, accepted.job_id)
    assert queued.state == "queued" and queued.counts.queued == 6 and queued.started_at is None
    assert c.ingestion.work("w1") == accepted.job_id
    done = c.ingestion.status(SOURCE, accepted.job_id)
    assert done.state == "completed" and done.finished_at is not None
    assert (done.counts.done, done.counts.failed, done.counts.queued) == (3, 3, 0)
    assert {(e.doc_id, e.code) for e in done.errors} == {
        ("locked", "encrypted"),
        ("sheet", "unsupported_format"),
        ("blank", "empty"),
    }
    manual = c.backend.get_document(SOURCE, "manual")
    assert manual is not None and manual.structured_source is not None
    assert manual.structured_source["format"] == "pdf" and len(manual.structured_source["page_starts"]) == 2
    valve = c.backend.get_document(SOURCE, "valve")
    assert valve is not None and valve.title == "Valve manual" and "# Installation" in valve.body

    # The same content again: nothing is rewritten.
    clock.advance(1)
    again = c.ingestion.submit(
        SOURCE,
        request({"documents": [{"doc_id": "note", "title": "Note", "body": "plain pumpernickel text"}]}),
    )
    c.ingestion.work("w1")
    assert c.ingestion.status(SOURCE, again.job_id).counts.unchanged == 1
    assert [j.job_id for j in c.ingestion.list_jobs(SOURCE).jobs] == [again.job_id, accepted.job_id]
    assert c.ingestion.work("w1") is None  # nothing left


def test_i_ingest_directory_sync_deletes_documents_that_left(c: Container, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# Alpha\n\nalpha text", "utf-8")
    (folder / "sub" / "b.html").write_text("<h1>Beta</h1><p>beta text</p>", "utf-8")
    (folder / ".hidden.md").write_text("# hidden", "utf-8")
    outside = c.ingestion.submit(
        SOURCE, request({"documents": [{"doc_id": "keep-me", "title": "K", "body": "outside the prefix"}]})
    )
    c.ingestion.work("w")
    first = c.ingestion.submit(
        SOURCE, request({"directory": str(folder), "doc_id_prefix": "kb", "sync": True})
    )
    c.ingestion.work("w")
    status = c.ingestion.status(SOURCE, first.job_id)
    assert (status.counts.done, status.counts.deleted) == (2, 0)
    assert c.backend.document_ids(SOURCE, "kb-") == ["kb-a", "kb-sub-b"]
    (folder / "a.md").unlink()
    second = c.ingestion.submit(
        SOURCE, request({"directory": str(folder), "doc_id_prefix": "kb", "sync": True})
    )
    c.ingestion.work("w")
    status = c.ingestion.status(SOURCE, second.job_id)
    assert (status.counts.unchanged, status.counts.deleted) == (1, 1)
    assert c.backend.document_ids(SOURCE) == ["kb-sub-b", "keep-me"]
    assert c.ingestion.status(SOURCE, outside.job_id).state == "completed"


def test_i_ingest_a_dead_worker_is_taken_over_after_its_lease(
    c: Container, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"body number {i}"} for i in range(120)]
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    calls = {"n": 0}
    real_put = c.backend.put_documents

    def dies_on_second_batch(documents: list) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise SystemExit("killed")  # the process dies mid-job, after one batch was recorded
        real_put(documents)

    monkeypatch.setattr(c.backend, "put_documents", dies_on_second_batch)
    with pytest.raises(SystemExit):
        c.ingestion.work("w1")
    half = c.ingestion.status(SOURCE, accepted.job_id)
    assert half.state == "running" and half.counts.done == 50 and half.counts.queued == 70
    assert c.ingestion.work("w2") is None  # still leased to the dead worker
    clock.advance(c.settings.ingest_lease_seconds + 1)
    assert c.ingestion.work("w2") == accepted.job_id
    done = c.ingestion.status(SOURCE, accepted.job_id)
    assert done.state == "completed" and done.counts.done == 120 and done.passages == 120
    assert len(c.backend.document_ids(SOURCE)) == 120


def test_i_ingest_bad_requests_name_their_field(c: Container) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(
            IngestionJobRequest, '{"documents": [{"doc_id": "x", "body": "b", "acl": {"tenant": "t"}}]}'
        )
    assert "title" in caught.value.message
    with pytest.raises(InvalidRequest):
        parse_request(IngestionJobRequest, '{"documents": [], "directory": "/x"}')
    with pytest.raises(InvalidRequest) as caught:  # a directory's documents name their tenant too
        parse_request(IngestionJobRequest, '{"directory": "/x"}')
    assert "acl" in caught.value.message
    with pytest.raises(InvalidRequest) as caught:
        c.ingestion.submit(SOURCE, request({"directory": "relative/dir"}))
    assert caught.value.field == "directory"
    with pytest.raises(NotFound):
        c.ingestion.submit("none@1.0.0", request({"documents": [{"doc_id": "x", "title": "t", "body": "b"}]}))
    with pytest.raises(NotFound):
        c.ingestion.status(SOURCE, "no-such-job")


def test_i_ingest_a_file_sent_without_doc_id_gets_the_id_kb_ingest_gives_it(
    c: Container, tmp_path: Path
) -> None:
    """A file of a job may leave out its doc_id (the console sends files so): the service names it as
    `kb ingest` names that file (its name's id, under the job's doc_id_prefix), so one file sent through
    either door is one document, a Chinese name included; a text body still needs its doc_id."""
    from knowledge_core.domain.ingestion import directory_doc_id, path_doc_id

    note = b64("# 阀门检修\n\n每月检查一次阀门。".encode())
    status = run_job(c, {"documents": [{"filename": "阀门检修.md", "content_base64": note}]})
    named = {d.doc_id for d in c.admin.list_documents(SOURCE).documents}
    assert status.counts.done == 1 and named == {path_doc_id("阀门检修")}
    assert path_doc_id("阀门检修").startswith("FaMenJianXiu-")
    pump = b64(b"# Pump\n\nThe pump seal is checked weekly.")
    status = run_job(
        c,
        {
            "doc_id_prefix": "plant",
            "documents": [
                {"filename": "阀门检修.md", "content_base64": note},
                {"filename": "pump.md", "content_base64": pump},
                {"doc_id": "own-id", "filename": "pump.md", "content_base64": pump},  # a given id stays
            ],
        },
    )
    named = {d.doc_id for d in c.admin.list_documents(SOURCE).documents}
    assert status.counts.done == 3 and named >= {
        directory_doc_id("plant", Path("阀门检修.md")),
        "plant-pump",
        "own-id",
    }
    with pytest.raises(InvalidRequest) as caught:  # two files of one name: refused before any job
        c.ingestion.submit(
            SOURCE, request({"documents": [{"filename": "pump.md", "content_base64": pump}] * 2})
        )
    assert caught.value.field == "documents"
    with pytest.raises(InvalidRequest) as caught:
        parse_request(
            IngestionJobRequest, '{"documents": [{"title": "t", "body": "b", "acl": {"tenant": "t"}}]}'
        )
    assert "doc_id" in caught.value.message
    with pytest.raises(InvalidRequest) as caught:  # a prefix that would name nothing is a mistake
        c.ingestion.submit(
            SOURCE,
            request({"doc_id_prefix": "plant", "documents": [{"doc_id": "x", "title": "t", "body": "b"}]}),
        )
    assert "doc_id_prefix" in caught.value.message
    with pytest.raises(InvalidRequest) as caught:  # sync, acl and metadata still belong to a directory
        parse_request(
            IngestionJobRequest,
            '{"documents": [{"doc_id": "x", "title": "t", "body": "b", '
            '"acl": {"tenant": "t"}}], "sync": true}',
        )
    assert "sync" in caught.value.message


@pytest.mark.parametrize(
    ("name", "data", "shown"),
    [
        ("冷却塔维护.md", "# 冷却塔维护\n\n电导率在 **1500 μS/cm** 以下。\n".encode(), "**1500 μS/cm**"),
        ("冷却塔维护.md", "\ufeff# 冷却塔维护\r\n\r\n电导率 1500 μS/cm 以下。\r\n".encode(), "电导率 1500"),
        ("冷却塔.txt", "冷却塔维护\r\n\r\n电导率每周检测一次。\r\n".encode("gb18030"), "每周检测一次"),
        ("cafe.txt", "Café rules\r\n\r\nLunch costs 4.50 € with your badge.".encode("cp1252"), "4.50 €"),
        ("notepad.txt", "Unicode (Notepad): 冷却塔 café\r\n".encode("utf-16"), "冷却塔 café"),
        ("controls.md", "# Tower\x00 log\n\npH\x00 9\x07.5\fok\x1b\x85".encode(), "pH 9.5\nok"),
    ],
    ids=["utf-8", "utf-8-bom-crlf", "gb18030", "cp1252", "utf-16", "control-characters"],
)
def test_i_ingest_one_markdown_file_through_either_door_is_one_unchanged_document(
    c: Container, tmp_path: Path, name: str, data: bytes, shown: str
) -> None:
    """`kb ingest FILE.md` sends the text; the console sends the file's bytes, which the job extracts.
    Both store the same document (title, body, structured source with its format), so the second is
    `unchanged`, whichever door comes first: also for a text file with a byte-order mark, Windows line
    ends, or in a legacy encoding both doors decode alike (extraction.decode_text), or with control
    characters both leave out (extraction.printable_text: a NUL would otherwise refuse the text door)."""
    from kb_cli.commands.ingest import _file_document
    from kb_cli.main import parse

    note = tmp_path / name
    note.write_bytes(data)
    args = parse(["ingest", "--source", SOURCE, "--tenant", "acme", str(note)])
    cli = _file_document(args, "tower", note, note.name, None)
    console = {
        "doc_id": "tower",
        "filename": note.name,
        "content_base64": b64(note.read_bytes()),
        "structured_source": {"uri": note.name},
    }
    for first, second in ((cli, console), (console, cli)):
        assert run_job(c, {"documents": [{**first, "doc_id": "tower"}]}).counts.done == 1
        stored = c.backend.get_document(SOURCE, "tower")
        assert stored is not None and shown in stored.body and "\ufeff" not in stored.body + stored.title
        assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", stored.body + stored.title)
        again = run_job(c, {"documents": [{**second, "doc_id": "tower"}]})
        assert (again.counts.unchanged, again.counts.done) == (1, 0)
        c.admin.delete_document(SOURCE, "tower")


def run_job(c: Container, body: dict) -> JobStatus:
    accepted = c.ingestion.submit(SOURCE, request(body))
    assert c.ingestion.work("w1") == accepted.job_id
    return c.ingestion.status(SOURCE, accepted.job_id)


class ListQueue(JobQueue):
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    def enqueue(self, job_id: str, delay_s: int = 0) -> None:
        self.sent.append((job_id, delay_s))


# A malformed message records no metric, which makes Powertools warn: expected here.
@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_i_ingest_worker_function_works_the_job_of_its_sqs_message(tmp_path: Path, clock: FakeClock) -> None:
    """The AWS worker: `events/ingest_worker/job.json` names a job; the function works it; a message for a
    job another worker holds is queued again for when that lease would have run out."""
    from knowledge_core import bootstrap

    from kb_cli.events import load_event
    from kb_cli.gateway import FunctionError, Handlers

    queue = ListQueue()
    base = embedded_container(tmp_path, clock)
    c = Container(base.settings, clock=clock, job_queue=queue)
    c.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    accepted = c.ingestion.submit(
        SOURCE, request({"documents": [{"doc_id": "a", "title": "A", "body": "alpha"}]})
    )
    assert queue.sent == [(accepted.job_id, 0)]
    event = load_event("ingest_worker/job.json")
    event["Records"][0]["body"] = json.dumps({"job_id": accepted.job_id})
    bootstrap.reset(c)
    try:
        assert Handlers().invoke("IngestWorkerFunction", event) == {"batchItemFailures": []}
        assert c.ingestion.status(SOURCE, accepted.job_id).state == "completed"
        held = c.ingestion.submit(
            SOURCE, request({"documents": [{"doc_id": "b", "title": "B", "body": "b"}]})
        )
        assert c.state.jobs.claim_job("elsewhere", clock.now(), 15, held.job_id) is not None
        event["Records"][0]["body"] = json.dumps({"job_id": held.job_id})
        assert Handlers().invoke("IngestWorkerFunction", event) == {"batchItemFailures": []}
        assert queue.sent[-1] == (held.job_id, 16)
        # A malformed message fails the invocation: SQS retries it, then moves it to the dead-letter queue.
        event["Records"][0]["body"] = '{"job": 1}'
        with pytest.raises(FunctionError):
            Handlers().invoke("IngestWorkerFunction", event)
    finally:
        bootstrap.reset(None)


def test_i_ingest_batches_cut_by_size_leave_nothing_behind(
    c: Container, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from knowledge_core.domain.errors import SourceFailure
    from knowledge_core.services import ingestion

    monkeypatch.setattr(ingestion, "BATCH_BODY_CHARS", 100)
    docs = [{"doc_id": f"d{i}", "title": f"T{i}", "body": f"{i:02d}" + "x" * 58} for i in range(7)]
    accepted = c.ingestion.submit(SOURCE, request({"documents": docs}))
    assert c.ingestion.work("w") == accepted.job_id
    done = c.ingestion.status(SOURCE, accepted.job_id)
    assert done.state == "completed" and (done.counts.done, done.counts.queued) == (7, 0)

    # The search backend down: the job keeps its documents and waits before anyone retries it.
    more = c.ingestion.submit(SOURCE, request({"documents": [{"doc_id": "e", "title": "E", "body": "e"}]}))

    def down(documents: list) -> None:
        raise SourceFailure("unavailable")

    monkeypatch.setattr(c.backend, "put_documents", down)
    assert c.ingestion.work("w") == more.job_id
    assert c.ingestion.status(SOURCE, more.job_id).counts.queued == 1
    assert c.ingestion.work("w2") is None  # backing off
    monkeypatch.undo()
    clock.advance(ingestion.BACKEND_RETRY_SECONDS + 1)
    assert c.ingestion.work("w2") == more.job_id
    assert c.ingestion.status(SOURCE, more.job_id).counts.done == 1


def test_i_ingest_two_files_of_one_doc_id_fail_alone_and_one_id_twice_inline_is_refused(
    c: Container, tmp_path: Path
) -> None:
    """Two files of a directory whose names map to one doc_id each fail `doc_id_collision` (naming its
    file) and the rest is ingested; documents sent inline are the caller's list: one id twice in it is
    refused whole, naming both and the id."""
    folder = tmp_path / "clash"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha", "utf-8")
    (folder / "a.txt").write_text("A\n\nalpha", "utf-8")
    (folder / "b.md").write_text("# B\n\nbeta", "utf-8")
    status = run_job(c, {"directory": str(folder)})
    assert [(e.doc_id, e.code, e.uri) for e in status.errors] == [
        ("a", "doc_id_collision", "a.md"),
        ("a", "doc_id_collision", "a.txt"),
    ]
    assert (status.counts.done, status.counts.failed) == (1, 2)
    assert c.backend.document_ids(SOURCE) == ["b"]
    twice = [{"doc_id": "x", "title": "t", "body": "b"}] * 2
    with pytest.raises(InvalidRequest) as caught:
        c.ingestion.submit(SOURCE, request({"documents": twice}))
    assert caught.value.field == "documents"
    assert caught.value.message == "documents: documents[0] and documents[1] would both be document x"


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_i_ingest_admin_routes_answer_202_then_the_job(tmp_path: Path, clock: FakeClock) -> None:
    """Through the admin function with `events/admin/submit-ingestion-job.json`: 202 and a job id at once;
    GET gives the counts once worked; an unknown job is a typed 404; a bad body names its field."""
    from knowledge_core import bootstrap

    from kb_cli import demo
    from kb_cli.events import load_event
    from kb_cli.gateway import Handlers

    c = embedded_container(tmp_path, clock)
    demo.seed(c, with_token=False)
    event = load_event("admin/submit-ingestion-job.json")

    def get(path: str) -> dict:
        e = json.loads(json.dumps(event))
        e["routeKey"] = e["requestContext"]["routeKey"] = "GET " + path
        e["rawPath"] = e["requestContext"]["http"]["path"] = path
        e["requestContext"]["http"]["method"] = "GET"
        e["body"] = None
        return Handlers().invoke("AdminFunction", e)

    bootstrap.reset(c)
    try:
        submitted = Handlers().invoke("AdminFunction", event)
        assert submitted["statusCode"] == 202 and submitted["headers"]["Cache-Control"] == "no-store"
        job_id = json.loads(submitted["body"])["job_id"]
        c.ingestion.work("w")
        base = "/admin/v1/sources/demo-docs@1.0.0/ingestion-jobs"
        got = get(f"{base}/{job_id}")
        body = json.loads(got["body"])
        assert got["statusCode"] == 200 and body["state"] == "completed" and body["counts"]["done"] == 2
        assert json.loads(get(base)["body"])["jobs"][0]["job_id"] == job_id
        missing = get(f"{base}/nope")
        assert missing["statusCode"] == 404 and json.loads(missing["body"])["error"]["code"] == "not_found"
        bad = json.loads(json.dumps(event))
        document = {"doc_id": "x", "title": "t", "body": "b", "acl": {"tenant": "default"}, "kb_ids": []}
        bad["body"] = json.dumps({"documents": [document]})
        refused = Handlers().invoke("AdminFunction", bad)
        assert refused["statusCode"] == 400 and "kb_ids" in json.loads(refused["body"])["error"]["message"]
        page = c.backend.get_document("demo-docs@1.0.0", "gateway-page")
        assert page is not None and page.title == "Gateway offline" and "menu" not in page.body
    finally:
        bootstrap.reset(None)

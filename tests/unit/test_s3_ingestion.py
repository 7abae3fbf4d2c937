"""I-INGEST with an S3 prefix as the origin, on moto's in-process S3 (no network): a job over the
prefix with the directory job's counts and typed per-document errors naming the object, sidecars that are
not documents, objects with an unchanged ETag and size skipped without a read, a sync that deletes what
left the prefix and nothing under another, and typed per-job refusals (no bucket, empty prefix, denied,
no credentials, outside the deployment's prefix)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.adapters.s3_objects import S3ObjectStore
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.errors import Forbidden, InvalidRequest, NotFound
from knowledge_core.domain.models import Document, DocumentAcl, SourceDefinition
from knowledge_core.domain.s3_source import (
    MAX_OBJECT_BYTES,
    ObjectStoreError,
    S3Location,
    StoredObject,
    is_document_key,
    object_doc_id,
    parse_s3_uri,
)
from knowledge_core.domain.wire import parse_request
from knowledge_core.ports import ObjectStore
from knowledge_core.settings import Settings

from tests.conftest import TEST_SECRET, FakeClock
from tests.unit.test_extraction import make_pdf

SOURCE = "manuals@1.0.0"
BUCKET = "kb-docs"
ACL = {"tenant": "acme"}


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def container(tmp_path: Path, clock: FakeClock, store: ObjectStore, **overrides: object) -> Container:
    values: dict[str, object] = {
        "state_backend": "sqlite",
        "state_path": str(tmp_path / "state.sqlite3"),
        "search_backend": "sqlite",
        "sqlite_path": str(tmp_path / "kb.sqlite3"),
        "token_secret": TEST_SECRET,
        "registry_cache_seconds": 0,
        "ingest_directories": True,
    }
    c = Container(Settings.model_validate(values | overrides), clock=clock, object_store=store)
    c.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return c


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock, s3: Any) -> Container:
    return container(tmp_path, clock, S3ObjectStore(client=s3))


def sync(c: Container, uri: str, prefix: str = "kb", sync: bool = True) -> Any:
    body = {"s3_uri": uri, "doc_id_prefix": prefix, "sync": sync, "acl": ACL}
    accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    c.ingestion.work("w1", job_id=accepted.job_id)
    return c.ingestion.status(SOURCE, accepted.job_id)


def put(s3: Any, key: str, body: bytes | str) -> None:
    s3.put_object(Bucket=BUCKET, Key=key, Body=body.encode() if isinstance(body, str) else body)


def doc_ids(c: Container) -> set[str]:
    return set(c.backend.document_ids(SOURCE, ""))


def test_i_ingest_s3_uri_parsing_and_document_keys() -> None:
    loc = parse_s3_uri("s3://kb-docs/manuals/")
    assert loc == S3Location("kb-docs", "manuals/") and loc.uri == "s3://kb-docs/manuals/"
    assert parse_s3_uri("s3://kb-docs") == S3Location("kb-docs", "")
    for bad in ("s3://", "s3://UPPER/x", "s3://a/x", "http://kb-docs/x", "s3://kb-docs/\x00"):
        with pytest.raises(InvalidRequest) as exc:
            parse_s3_uri(bad)
        assert exc.value.field == "s3_uri"
    assert is_document_key(loc, "manuals/a/b.md")
    for key in (
        "manuals/a.md.metadata.json",
        "manuals/dir/",
        "manuals/.hidden/x.md",
        "other/a.md",
        "manuals/",
    ):
        assert not is_document_key(loc, key), key
    assert object_doc_id(loc, "kb", "manuals/sub/pump guide.md").startswith("kb-sub-pump-guide")
    assert parse_s3_uri("s3://kb-docs/manuals/a/").within(loc)
    assert not parse_s3_uri("s3://kb-docs/manualsX").within(parse_s3_uri("s3://kb-docs/manuals/"))


def test_i_ingest_s3_prefix_job_counts_sidecars_and_errors_naming_the_key(c: Container, s3: Any) -> None:
    put(s3, "docs/pumps.md", "# Pumps\n\nCentrifugal pumps move water.")
    put(s3, "docs/pumps.md.metadata.json", json.dumps({"metadataAttributes": {"team": "ops"}}))
    put(s3, "docs/sub/valves.pdf", make_pdf(["valves close", "valves open"]))
    put(s3, "docs/broken.pdf", b"%PDF-1.4 not really")
    put(s3, "docs/sheet.xlsx", b"PK\x03\x04")
    put(s3, "other/elsewhere.md", "# Elsewhere\n\nnot in the prefix")
    status = sync(c, f"s3://{BUCKET}/docs/")
    assert status.state == "completed" and status.total == 4  # the sidecar is not a document
    assert (status.counts.done, status.counts.failed, status.counts.unchanged) == (2, 2, 0)
    assert {(e.code, e.uri) for e in status.errors} == {
        ("corrupt", f"s3://{BUCKET}/docs/broken.pdf"),
        ("unsupported_format", f"s3://{BUCKET}/docs/sheet.xlsx"),
    }
    assert doc_ids(c) == {"kb-pumps", "kb-sub-valves"}
    pumps = c.backend.get_document(SOURCE, "kb-pumps")
    assert pumps is not None and pumps.title == "Pumps" and pumps.acl.tenant == "acme"
    assert pumps.structured_source is not None
    assert pumps.structured_source["uri"] == f"s3://{BUCKET}/docs/pumps.md"
    valves = c.backend.get_document(SOURCE, "kb-sub-valves")
    assert valves is not None and valves.structured_source and valves.structured_source["page_starts"]


def test_i_ingest_s3_unchanged_etag_and_size_skip_without_reading(c: Container, s3: Any) -> None:
    put(s3, "docs/a.md", "# A\n\nalpha")
    put(s3, "docs/b.md", "# B\n\nbeta")
    assert sync(c, f"s3://{BUCKET}/docs/").counts.done == 2
    gets: list[str] = []
    s3.meta.events.register("before-call.s3.GetObject", lambda params, **_: gets.append(params["url_path"]))
    again = sync(c, f"s3://{BUCKET}/docs/")
    assert (again.counts.unchanged, again.counts.done, again.passages > 0) == (2, 0, True)
    assert gets == []  # ETag and size matched: nothing was read
    put(s3, "docs/b.md", "# B\n\nbeta, revised")
    changed = sync(c, f"s3://{BUCKET}/docs/")
    assert (changed.counts.unchanged, changed.counts.done) == (1, 1) and len(gets) == 1
    b = c.backend.get_document(SOURCE, "kb-b")
    assert b is not None and "revised" in b.body


def test_i_ingest_s3_acl_change_is_an_update_though_the_etag_is_equal(c: Container, s3: Any) -> None:
    """Sharing the prefix's documents with another tenant rewrites them though their objects are equal;
    handing them to another tenant is not a prefix job's to do (`another_tenant`: they stay acme's)."""
    put(s3, "docs/a.md", "# A\n\nalpha")
    sync(c, f"s3://{BUCKET}/docs/")
    shared = {"tenant": "acme", "shared_tenants": ["globex"]}
    for acl, outcome in ((shared, "done"), ({"tenant": "globex"}, "failed")):
        body = {"s3_uri": f"s3://{BUCKET}/docs/", "doc_id_prefix": "kb", "acl": acl}
        accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
        c.ingestion.work("w1", job_id=accepted.job_id)
        assert getattr(c.ingestion.status(SOURCE, accepted.job_id).counts, outcome) == 1
    a = c.backend.get_document(SOURCE, "kb-a")
    assert a is not None and a.acl.tenant == "acme" and a.acl.shared_tenants == ["globex"]


def test_i_ingest_s3_sync_deletes_what_left_the_prefix_and_never_another_prefix(
    c: Container, s3: Any
) -> None:
    put(s3, "docs/a.md", "# A\n\nalpha")
    put(s3, "docs/b.md", "# B\n\nbeta")
    put(s3, "team/c.md", "# C\n\ngamma")
    sync(c, f"s3://{BUCKET}/docs/", prefix="docs")
    sync(c, f"s3://{BUCKET}/team/", prefix="team")
    assert doc_ids(c) == {"docs-a", "docs-b", "team-c"}
    s3.delete_object(Bucket=BUCKET, Key="docs/b.md")
    put(s3, "docs/new.md", "# New\n\nfresh")
    after = sync(c, f"s3://{BUCKET}/docs/", prefix="docs")
    assert (after.counts.done, after.counts.unchanged, after.counts.deleted) == (1, 1, 1)
    assert doc_ids(c) == {"docs-a", "docs-new", "team-c"}  # the other prefix is untouched


class FailingStore(ObjectStore):
    """An object store that refuses in one typed way (access denied, no credentials, …)."""

    def __init__(self, list_code: str | None = None, get_code: str | None = None, size: int = 10) -> None:
        self.list_code, self.get_code, self.size = list_code, get_code, size

    def list_objects(self, bucket: str, prefix: str, limit: int) -> list[StoredObject]:
        if self.list_code:
            raise ObjectStoreError(self.list_code)  # type: ignore[arg-type]
        return [StoredObject(f"{prefix}x.md", "etag-1", self.size)]

    def head_object(self, bucket: str, key: str) -> StoredObject | None:
        return None

    def get_object(self, bucket: str, key: str, max_bytes: int) -> tuple[bytes, str]:
        if self.get_code:
            raise ObjectStoreError(self.get_code)  # type: ignore[arg-type]
        return b"# X\n\nx", "etag-1"


@pytest.mark.parametrize(
    ("code", "error"),
    [("bucket_not_found", NotFound), ("access_denied", Forbidden), ("no_credentials", Forbidden)],
)
def test_i_ingest_s3_listing_refusals_are_typed_per_job_errors(tmp_path, clock, code, error) -> None:
    c = container(tmp_path, clock, FailingStore(list_code=code))
    body = {"s3_uri": "s3://kb-docs/docs/", "doc_id_prefix": "kb", "acl": ACL}
    with pytest.raises(error) as exc:
        c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    assert exc.value.field == "s3_uri" and "kb-docs" not in exc.value.message.replace("s3_uri", "")
    assert c.ingestion.list_jobs(SOURCE).jobs == []  # no job, so none stuck


def test_i_ingest_s3_missing_bucket_and_empty_prefix_on_moto(c: Container, s3: Any) -> None:
    body = {"s3_uri": "s3://no-such-bucket-here/docs/", "doc_id_prefix": "kb", "acl": ACL}
    with pytest.raises(NotFound):
        c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    put(s3, "docs/a.md", "# A\n\nalpha")
    sync(c, f"s3://{BUCKET}/docs/")
    empty = {"s3_uri": f"s3://{BUCKET}/dosc/", "doc_id_prefix": "kb", "sync": True, "acl": ACL}
    with pytest.raises(NotFound):  # a typo'd prefix is refused, not synced as "everything left"
        c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(empty)))
    assert doc_ids(c) == {"kb-a"}


@pytest.mark.parametrize(
    ("store", "code"),
    [
        (FailingStore(get_code="access_denied"), "access_denied"),
        (FailingStore(get_code="not_found"), "not_found"),
        (FailingStore(size=MAX_OBJECT_BYTES + 1, get_code="unavailable"), "too_large"),
    ],
)
def test_i_ingest_s3_object_failures_are_per_document_errors(tmp_path, clock, store, code) -> None:
    c = container(tmp_path, clock, store)
    body = {"s3_uri": "s3://kb-docs/docs/", "doc_id_prefix": "kb", "acl": ACL}
    accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    c.ingestion.work("w1", job_id=accepted.job_id)
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed"
    assert [(e.code, e.uri) for e in status.errors] == [(code, "s3://kb-docs/docs/x.md")]


def test_i_ingest_s3_unavailable_store_leaves_the_job_to_resume(tmp_path, clock) -> None:
    store = FailingStore(get_code="unavailable")
    c = container(tmp_path, clock, store)
    body = {"s3_uri": "s3://kb-docs/docs/", "doc_id_prefix": "kb", "acl": ACL}
    accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    c.ingestion.work("w1", job_id=accepted.job_id)
    assert c.ingestion.status(SOURCE, accepted.job_id).counts.queued == 1  # not failed: S3 was down
    store.get_code = None
    clock.advance(120)
    c.ingestion.work("w2", job_id=accepted.job_id)
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert (status.state, status.counts.done) == ("completed", 1)


def test_i_ingest_s3_deployment_reads_only_its_prefix(tmp_path, clock) -> None:
    c = container(
        tmp_path, clock, FailingStore(), ingest_directories=False, ingest_s3_uri="s3://kb-docs/manuals/"
    )
    inside = {"s3_uri": "s3://kb-docs/manuals/pumps/", "doc_id_prefix": "kb", "acl": ACL}
    assert c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(inside))).total == 1
    for uri in ("s3://kb-docs/other/", "s3://kb-docs/manualsX/", "s3://another-bucket/manuals/"):
        outside = {"s3_uri": uri, "doc_id_prefix": "kb", "acl": ACL}
        with pytest.raises(Forbidden):
            c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(outside)))
    (tmp_path / "none").mkdir()
    none = container(tmp_path / "none", clock, FailingStore(), ingest_directories=False)
    with pytest.raises(InvalidRequest):
        none.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(inside)))


def test_i_ingest_s3_request_needs_an_acl_and_one_origin() -> None:
    for body in (
        {"s3_uri": "s3://kb-docs/docs/"},
        {"s3_uri": "s3://kb-docs/docs/", "directory": "/tmp", "acl": ACL},
        {"s3_uri": "https://kb-docs/docs/", "acl": ACL},
    ):
        with pytest.raises(InvalidRequest):
            parse_request(IngestionJobRequest, json.dumps(body))


# --- AWS: the template's grants, object events and the scheduled sync -------------------------------------


def test_i_ingest_s3_template_grants_list_and_get_under_the_prefix_only() -> None:
    from tests.iam_actions import Action, allowed, grants

    params = {"S3SourceBucket": "kb-docs", "S3SourcePrefix": "manuals/"}
    policy = grants(s3=params)
    worker, admin = policy["IngestWorkerFunction"], policy["AdminFunction"]
    assert allowed(Action("s3", "ListBucket", ("kb-docs", "manuals/")), worker)
    assert allowed(Action("s3", "ListBucket", ("kb-docs", "manuals/pumps/")), admin)
    assert allowed(Action("s3", "GetObject", ("kb-docs/manuals/pumps/a.pdf",)), worker)
    for action in (
        Action("s3", "ListBucket", ("kb-docs", "other/")),
        Action("s3", "ListBucket", ("kb-docs", "")),
        Action("s3", "ListBucket", ("another-bucket", "manuals/")),
        Action("s3", "GetObject", ("kb-docs/other/a.pdf",)),
        Action("s3", "GetObject", ("another-bucket/manuals/a.pdf",)),
        Action("s3", "PutObject", ("kb-docs/manuals/a.pdf",)),
    ):
        assert not allowed(action, worker), action
    assert not allowed(Action("s3", "GetObject", ("kb-docs/manuals/a.pdf",)), admin)  # the worker reads
    assert not any(g.service == "s3" for g in policy["SearchFunction"])


def test_i_ingest_s3_object_events_from_eventbridge_and_s3_notifications() -> None:
    from knowledge_core.domain.s3_source import ObjectEvent, object_events

    bridge = {
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": "kb-docs"}, "object": {"key": "m/a b.md", "size": 7, "etag": "e1"}},
    }
    assert object_events(bridge) == [ObjectEvent("created", "kb-docs", "m/a b.md", "e1", 7)]
    bridge_gone = bridge | {
        "detail-type": "Object Deleted",
        "detail": {"bucket": {"name": "kb-docs"}, "object": {"key": "m/x"}},
    }
    assert object_events(bridge_gone) == [ObjectEvent("removed", "kb-docs", "m/x")]
    native = {
        "Records": [
            {
                "eventSource": "aws:s3",
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "bucket": {"name": "kb-docs"},
                    "object": {"key": "m/a+b%C3%A9.md", "size": 3, "eTag": "e2"},
                },
            },
            {
                "eventSource": "aws:s3",
                "eventName": "ObjectRemoved:Delete",
                "s3": {"bucket": {"name": "kb-docs"}, "object": {"key": "m/old.md"}},
            },
        ]
    }
    assert object_events(native) == [
        ObjectEvent("created", "kb-docs", "m/a bé.md", "e2", 3),
        ObjectEvent("removed", "kb-docs", "m/old.md"),
    ]
    assert object_events({"Event": "s3:TestEvent", "Bucket": "kb-docs"}) == []
    assert object_events({"job_id": "j"}) is None


def test_i_ingest_s3_events_ingest_created_and_delete_only_what_that_object_made(
    tmp_path: Path, clock: FakeClock, s3: Any
) -> None:
    from knowledge_core.domain.s3_source import ObjectEvent

    c = container(
        tmp_path,
        clock,
        S3ObjectStore(client=s3),
        ingest_directories=False,
        ingest_s3_uri=f"s3://{BUCKET}/docs/",
        ingest_s3_source=SOURCE,
        ingest_s3_tenant="acme",
    )
    events = c.s3_events
    assert events is not None
    put(s3, "docs/a.md", "# A\n\nalpha")
    put(s3, "other/b.md", "# B\n\nbeta")
    created = [
        ObjectEvent("created", BUCKET, "docs/a.md", "e", 10),
        ObjectEvent("created", BUCKET, "other/b.md", "e", 10),  # outside the prefix: ignored
        ObjectEvent("created", BUCKET, "docs/a.md.metadata.json", "e", 10),  # a sidecar: ignored
        ObjectEvent("created", "another-bucket", "docs/a.md", "e", 10),
    ]
    assert events.handle(created) == 1
    while c.ingestion.work("w1") is not None:
        pass
    assert doc_ids(c) == {"s3-a"}
    # A document of the same doc_id made another way (inline, another tenant) is not the object's.
    other_way = Document(
        source_key=SOURCE, doc_id="s3-z", title="Z", body="inline", acl=DocumentAcl(tenant="acme")
    )
    c.backend.put_documents([other_way])
    assert events.handle([ObjectEvent("removed", BUCKET, "docs/z.md")]) == 0  # not made by that object
    assert events.handle([ObjectEvent("removed", BUCKET, "docs/a.md")]) == 0  # it is there again: late
    s3.delete_object(Bucket=BUCKET, Key="docs/a.md")
    assert events.handle([ObjectEvent("removed", BUCKET, "docs/a.md")]) == 1
    put(s3, "docs/a.md", "# A\n\nalpha")
    assert doc_ids(c) == {"s3-z"}
    put(s3, "docs/c.md", "# C\n\ngamma")
    job_id = events.full_sync()
    c.ingestion.work("w1", job_id=job_id)
    status = c.ingestion.status(SOURCE, job_id)
    # a.md was deleted from the index but is still in the bucket: the full sync brings it back.
    assert status.sync and (status.counts.done, status.counts.deleted) == (2, 0)
    assert doc_ids(c) == {"s3-a", "s3-c", "s3-z"}  # the sync deletes only what a sync of it wrote


def test_i_ingest_s3_worker_takes_the_ready_events(tmp_path: Path, clock: FakeClock, s3: Any) -> None:
    """events/ingest_worker/s3-*.json (for `sam local invoke` too) through the worker function."""
    from knowledge_core import bootstrap

    from kb_cli.events import load_event
    from kb_cli.gateway import Handlers

    s3.create_bucket(Bucket="kb-documents")
    s3.put_object(Bucket="kb-documents", Key="manuals/pump-guide.md", Body=b"# Pump guide\n\nSeals.")
    c = container(
        tmp_path,
        clock,
        S3ObjectStore(client=s3),
        ingest_directories=False,
        ingest_s3_uri="s3://kb-documents/manuals/",
        ingest_s3_source=SOURCE,
    )
    bootstrap.reset(c)
    try:
        handlers = Handlers()
        for name in ("ingest_worker/s3-object-created.json", "ingest_worker/s3-full-sync.json"):
            assert handlers.invoke("IngestWorkerFunction", load_event(name)) == {"batchItemFailures": []}
    finally:
        bootstrap.reset(None)
    jobs = c.ingestion.list_jobs(SOURCE).jobs
    assert sorted((j.total, j.sync) for j in jobs) == [(1, False), (1, True)]  # the object; the sync

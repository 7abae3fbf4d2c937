"""I-INGEST: `kb ingest` through each of its doors (a file alone, several files, a directory the service
reads, a directory sent file by file) against the embedded service, and the job rules every door shares:
the exit code, empty files, doc_id collisions, another tenant's documents, file names and hard links."""

from __future__ import annotations

import argparse
import hashlib
import json
import unicodedata
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest, JobStatus
from knowledge_core.domain.ingestion import directory_doc_id, path_doc_id
from knowledge_core.domain.models import SourceDefinition
from knowledge_core.domain.s3_source import ObjectStoreError, StoredObject
from knowledge_core.domain.wire import parse_request
from knowledge_core.ports import ObjectStore

from kb_cli.commands.ingest import cmd_ingest
from kb_cli.main import parse
from tests.conftest import FakeClock, embedded_container

SOURCE = "manuals@1.0.0"
LOOPBACK = "http://127.0.0.1:3000"  # the service reads a directory itself
REMOTE = "http://kb.example"  # the CLI reads a directory and sends its files


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock) -> Container:
    container = embedded_container(tmp_path, clock, ingest_directories=True)
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container


def service_call(c: Container) -> Any:
    """The admin API's ingestion-job routes, answered by the embedded service; a job is worked at once."""

    def call(endpoint: str, method: str, path: str, body: Any = None) -> Any:
        parts = path.split("/")  # /admin/v1/sources/{source}/ingestion-jobs[/{job_id}]
        source = unquote(parts[4])
        if method == "POST":
            accepted = c.ingestion.submit(source, parse_request(IngestionJobRequest, json.dumps(body)))
            c.ingestion.work("w")
            return accepted.model_dump(mode="json")
        return c.ingestion.status(source, parts[6]).model_dump(mode="json")

    return call


def kb_ingest(c: Container, *argv: str, endpoint: str = LOOPBACK) -> int:
    args: argparse.Namespace = parse(["ingest", "--source", SOURCE, "--endpoint", endpoint, *argv])
    return cmd_ingest(args, service_call(c))


# --- exit code ---------------------------------------------------------------------------------------------


def test_i_ingest_kb_ingest_exits_1_when_a_file_of_an_unsupported_format_failed(
    c: Container, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .csv alone, or in a folder the service reads or the CLI sends, fails `unsupported_format`: listed
    in the summary, and the command exits 1 as for any failed document."""
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n", "utf-8")
    assert kb_ingest(c, str(data)) == 1
    out = capsys.readouterr()
    assert "(0 unchanged, 1 failed, 0 deleted)" in out.out and "data.csv: unsupported_format" in out.err
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha text", "utf-8")
    (folder / "sheet.csv").write_text("a,b\n1,2\n", "utf-8")
    assert kb_ingest(c, str(folder)) == 1
    out = capsys.readouterr()
    assert "ingested 1 document(s)" in out.out and "1 failed" in out.out
    assert "sheet: unsupported_format (sheet.csv)" in out.err
    assert kb_ingest(c, "--doc-id", "remote", str(folder), endpoint=REMOTE) == 1
    out = capsys.readouterr()
    assert "ingested 1 document(s)" in out.out and "1 failed" in out.out
    assert "sheet.csv: unsupported_format" in out.err
    assert c.backend.document_ids(SOURCE) == ["a", "remote-a"]  # the rest is ingested


# --- an empty file -----------------------------------------------------------------------------------------


class DictStore(ObjectStore):
    """An S3 bucket in a dict (key -> bytes): what a sync lists and reads."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    def _listed(self, key: str) -> StoredObject:
        data = self.objects[key]
        return StoredObject(key, hashlib.md5(data).hexdigest(), len(data))

    def list_objects(self, bucket: str, prefix: str, limit: int) -> list[StoredObject]:
        return [self._listed(k) for k in sorted(self.objects) if k.startswith(prefix)][: limit + 1]

    def head_object(self, bucket: str, key: str) -> StoredObject | None:
        return self._listed(key) if key in self.objects else None

    def get_object(self, bucket: str, key: str, max_bytes: int) -> tuple[bytes, str]:
        if key not in self.objects:
            raise ObjectStoreError("not_found")
        return self.objects[key], self._listed(key).etag


def s3_container(tmp_path: Path, clock: FakeClock, objects: dict[str, bytes]) -> Container:
    container = Container(
        embedded_container(tmp_path, clock, ingest_directories=True).settings,
        clock=clock,
        object_store=DictStore(objects),
    )
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container


def run(c: Container, body: dict[str, Any]) -> JobStatus:
    accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    c.ingestion.work("w", job_id=accepted.job_id)
    return c.ingestion.status(SOURCE, accepted.job_id)


def test_i_ingest_an_empty_file_fails_empty_through_every_door(
    c: Container, tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file (or one of blanks, or a Markdown title alone) is no document: `empty` alone, in a
    folder the service reads or the CLI sends, in an S3 sync and as an upload to the admin API."""
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "empty.md").write_bytes(b"")
    (folder / "blank.txt").write_bytes(b"  \n\n ")
    (folder / "title.md").write_text("# Only a title\n", "utf-8")
    (folder / "full.md").write_text("# Full\n\nsome text", "utf-8")
    for name in ("empty.md", "blank.txt", "title.md"):
        assert kb_ingest(c, "--tenant", "acme", str(folder / name)) == 1
        assert f"{name}: empty" in capsys.readouterr().err
    assert kb_ingest(c, "--tenant", "acme", "--doc-id", "remote", str(folder), endpoint=REMOTE) == 1
    assert kb_ingest(c, "--tenant", "acme", "--doc-id", "served", str(folder)) == 1
    err = capsys.readouterr().err
    assert all(f"{name}: empty" in err for name in ("empty.md", "blank.txt", "title.md"))
    assert all(f"served-{stem}: empty" in err for stem in ("empty", "blank", "title"))
    assert sorted(c.backend.document_ids(SOURCE)) == ["remote-full", "served-full"]

    upload = {"filename": "empty.md", "content_base64": "", "acl": {"tenant": "acme"}}
    status = run(c, {"documents": [upload]})
    assert [(e.doc_id, e.code) for e in status.errors] == [("empty", "empty")]

    bucket = {"docs/empty.md": b"", "docs/full.md": b"# Full\n\nsome text"}
    (tmp_path / "s3").mkdir()
    s3 = s3_container(tmp_path / "s3", clock, bucket)
    body = {"s3_uri": "s3://kb-docs/docs/", "doc_id_prefix": "s3", "sync": True, "acl": {"tenant": "acme"}}
    status = run(s3, body)
    assert [(e.doc_id, e.code) for e in status.errors] == [("s3-empty", "empty")]
    assert s3.backend.document_ids(SOURCE) == ["s3-full"]


# --- file names and hard links -----------------------------------------------------------------------------

NFC, NFD = unicodedata.normalize("NFC", "café-阀门"), unicodedata.normalize("NFD", "café-阀门")


def test_i_ingest_a_file_name_spelt_nfc_or_nfd_is_one_document(c: Container, tmp_path: Path) -> None:
    """One file name in its composed (NFC) and decomposed (NFD, as macOS may write it) spellings gives one
    doc_id: a synced file renamed from one spelling to the other stays one document, none deleted."""
    assert NFC != NFD
    assert path_doc_id(NFC) == path_doc_id(NFD)
    assert directory_doc_id("kb", Path(f"{NFC}.md")) == directory_doc_id("kb", Path(f"{NFD}.md"))
    folder = tmp_path / "synced"
    folder.mkdir()
    (folder / f"{NFC}.md").write_text("# Café\n\ncoffee notes", "utf-8")
    body = {"directory": str(folder), "doc_id_prefix": "kb", "sync": True, "acl": {"tenant": "acme"}}
    assert run(c, body).counts.done == 1
    ids = c.backend.document_ids(SOURCE)
    (folder / f"{NFC}.md").rename(folder / f"{NFD}.md")
    status = run(c, body)
    assert (status.counts.failed, status.counts.deleted) == (0, 0)
    assert c.backend.document_ids(SOURCE) == ids


def test_i_ingest_a_hard_link_in_a_directory_is_refused_like_a_symlink(
    c: Container, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hard link inside an ingested directory may be a file from outside it (`/etc/…` on the same file
    system): the service's reader refuses it `not_a_file`, as a symlink swapped in, and so does the CLI's;
    the other files are ingested."""
    outside = tmp_path / "outside.md"
    outside.write_text("# Private\n\nnot to be ingested", "utf-8")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha text", "utf-8")
    (folder / "linked.md").hardlink_to(outside)
    body = {"directory": str(folder), "doc_id_prefix": "kb", "acl": {"tenant": "acme"}}
    status = run(c, body)
    assert [(e.doc_id, e.code, e.uri) for e in status.errors] == [("kb-linked", "not_a_file", "linked.md")]
    assert kb_ingest(c, "--tenant", "acme", "--doc-id", "cli", str(folder), endpoint=REMOTE) == 1
    assert "linked.md: not_a_file" in capsys.readouterr().err
    assert c.backend.document_ids(SOURCE) == ["cli-a", "kb-a"]


# --- another tenant's document -----------------------------------------------------------------------------


def test_a_sync_never_overwrites_another_tenants_document(
    c: Container, tmp_path: Path, clock: FakeClock
) -> None:
    """Tenant A has `mix-x`; tenant B syncs `x.md` under prefix `mix` (the same doc_id): that file fails
    `another_tenant` and A's document stays A's, unchanged; when the file goes, B's next sync deletes
    nothing of A's. The same for an S3 prefix; the rest of each job is written."""
    theirs = {"doc_id": "mix-x", "title": "A's", "body": "tenant a text", "acl": {"tenant": "a"}}
    assert run(c, {"documents": [theirs]}).counts.done == 1
    before = c.backend.get_document(SOURCE, "mix-x")
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "x.md").write_text("# B's\n\ntenant b text", "utf-8")
    (folder / "y.md").write_text("# Y\n\nb's own", "utf-8")
    body = {"directory": str(folder), "doc_id_prefix": "mix", "sync": True, "acl": {"tenant": "b"}}
    status = run(c, body)
    assert [(e.doc_id, e.code, e.uri) for e in status.errors] == [("mix-x", "another_tenant", "x.md")]
    assert status.counts.done == 1 and c.backend.get_document(SOURCE, "mix-x") == before
    (folder / "x.md").unlink()
    status = run(c, body)
    assert (status.counts.failed, status.counts.deleted) == (0, 0)
    assert c.backend.get_document(SOURCE, "mix-x") == before
    assert c.backend.document_ids(SOURCE) == ["mix-x", "mix-y"]

    (tmp_path / "s3").mkdir()
    s3 = s3_container(tmp_path / "s3", clock, {"docs/x.md": b"# B's\n\nb", "docs/y.md": b"# Y\n\ny"})
    assert run(s3, {"documents": [theirs]}).counts.done == 1
    before = s3.backend.get_document(SOURCE, "mix-x")
    body = {"s3_uri": "s3://kb-docs/docs/", "doc_id_prefix": "mix", "sync": True, "acl": {"tenant": "b"}}
    status = run(s3, body)
    assert [(e.doc_id, e.code) for e in status.errors] == [("mix-x", "another_tenant")]
    assert s3.backend.get_document(SOURCE, "mix-x") == before
    assert s3.backend.document_ids(SOURCE) == ["mix-x", "mix-y"]


# --- doc_id collisions -------------------------------------------------------------------------------------


def test_i_ingest_a_doc_id_collision_fails_its_files_alone_and_the_sync_goes_on(
    c: Container, tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """`a/b.md` beside `a-b.md`, `x.docx` beside `x.html`: one doc_id each. Those files fail
    `doc_id_collision`, each error naming its file; the rest of the sync is written and its deletions
    run; the document already stored under a clashing id is neither replaced nor deleted. The same
    through an S3 prefix and through `kb ingest` of a folder, whichever reads it."""
    folder = tmp_path / "synced"
    (folder / "a").mkdir(parents=True)
    (folder / "a-b.md").write_text("# AB\n\nab text", "utf-8")
    (folder / "gone.md").write_text("# Gone\n\nleaves", "utf-8")
    body = {"directory": str(folder), "doc_id_prefix": "kb", "sync": True, "acl": {"tenant": "acme"}}
    assert run(c, body).counts.done == 2
    kept = c.backend.get_document(SOURCE, "kb-a-b")
    (folder / "gone.md").unlink()
    (folder / "a" / "b.md").write_text("# B\n\nb text", "utf-8")
    (folder / "x.html").write_text("<h1>X</h1><p>x text</p>", "utf-8")
    (folder / "x.docx").write_bytes(b"PK\x03\x04")
    (folder / "ok.md").write_text("# OK\n\nok text", "utf-8")
    status = run(c, body)
    assert [(e.doc_id, e.code, e.uri) for e in status.errors] == [
        ("kb-a-b", "doc_id_collision", "a/b.md"),
        ("kb-a-b", "doc_id_collision", "a-b.md"),
        ("kb-x", "doc_id_collision", "x.docx"),
        ("kb-x", "doc_id_collision", "x.html"),
    ]
    assert (status.counts.done, status.counts.failed, status.counts.deleted) == (1, 4, 1)
    assert c.backend.document_ids(SOURCE) == ["kb-a-b", "kb-ok"]
    assert c.backend.get_document(SOURCE, "kb-a-b") == kept

    assert kb_ingest(c, "--tenant", "acme", "--doc-id", "kb", "--sync", str(folder)) == 1
    err = capsys.readouterr().err
    assert "kb-a-b: doc_id_collision (a-b.md)" in err and "kb-a-b: doc_id_collision (a/b.md)" in err
    assert kb_ingest(c, "--tenant", "acme", "--doc-id", "cli", str(folder), endpoint=REMOTE) == 1
    err = capsys.readouterr().err
    assert "a-b.md: doc_id_collision: a/b.md and a-b.md would all be document cli-a-b" in err
    assert "x.html: doc_id_collision: x.docx and x.html would all be document cli-x" in err
    assert sorted(c.backend.document_ids(SOURCE, "cli-")) == ["cli-ok"]

    (tmp_path / "s3").mkdir()
    bucket = {"docs/a-b.md": b"# AB\n\nab", "docs/a/b.md": b"# B\n\nb", "docs/ok.md": b"# OK\n\nok"}
    s3 = s3_container(tmp_path / "s3", clock, bucket)
    body = {"s3_uri": "s3://kb-docs/docs/", "doc_id_prefix": "s3", "sync": True, "acl": {"tenant": "acme"}}
    status = run(s3, body)
    assert [(e.doc_id, e.code) for e in status.errors] == [("s3-a-b", "doc_id_collision")] * 2
    assert s3.backend.document_ids(SOURCE) == ["s3-ok"]


# --- a file alone under an id another file holds -----------------------------------------------------------


def test_i_ingest_a_file_alone_never_silently_replaces_another_files_document(
    c: Container, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`notes.md`, then `notes.txt`, each alone: both are doc_id `notes` (ids keep no extension, so every
    stored id stays as it was). The second fails `doc_id_taken`, says how to go on, and the first stays;
    the same file again — edited, from another folder, its name spelt NFD — is an update; `--replace`
    replaces."""
    md, txt = tmp_path / "notes.md", tmp_path / "notes.txt"
    md.write_text("# Notes\n\nfrom markdown", "utf-8")
    txt.write_text("Notes\n\nfrom text", "utf-8")
    assert kb_ingest(c, "--tenant", "acme", str(md)) == 0
    assert kb_ingest(c, "--tenant", "acme", str(txt)) == 1
    err = capsys.readouterr().err
    assert f"notes: doc_id_taken ({txt})" in err and "--replace replaces it" in err
    assert "from markdown" in body_of(c, "notes")
    md.write_text("# Notes\n\nedited markdown", "utf-8")
    assert kb_ingest(c, "--tenant", "acme", str(md)) == 0
    assert "edited markdown" in body_of(c, "notes")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "notes.md").write_text("# Notes\n\nan older copy", "utf-8")
    assert kb_ingest(c, "--tenant", "acme", str(tmp_path / "old" / "notes.md")) == 0
    assert "an older copy" in body_of(c, "notes")
    assert kb_ingest(c, "--tenant", "acme", "--replace", str(txt)) == 0
    assert "from text" in body_of(c, "notes")
    (tmp_path / f"{NFC}.md").write_text("# Café\n\ncomposed", "utf-8")
    (tmp_path / "nfd").mkdir()
    (tmp_path / "nfd" / f"{NFD}.md").write_text("# Café\n\ndecomposed", "utf-8")
    assert kb_ingest(c, "--tenant", "acme", str(tmp_path / f"{NFC}.md")) == 0
    assert kb_ingest(c, "--tenant", "acme", str(tmp_path / "nfd" / f"{NFD}.md")) == 0
    assert "decomposed" in body_of(c, path_doc_id(NFC))


def body_of(c: Container, doc_id: str) -> str:
    stored = c.backend.get_document(SOURCE, doc_id)
    assert stored is not None
    return stored.body

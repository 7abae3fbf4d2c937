"""Document metadata through ingestion (SPEC §1, §7, §8): the `metadata` field of inline
job documents, directory and S3 jobs; sidecars `<file>.metadata.json` in Bedrock's shape, which are never
documents, re-ingest their file when they change and fail only their own document when malformed; and the
"unchanged" rule comparing metadata as part of what is stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.errors import InvalidRequest
from knowledge_core.domain.metadata_sources import (
    MetadataError,
    combine_metadata,
    parse_meta_flag,
    parse_sidecar,
)
from knowledge_core.domain.models import SourceDefinition
from knowledge_core.domain.wire import parse_request

from tests.conftest import FakeClock, embedded_container

SOURCE = "manuals@1.0.0"
ACL = {"tenant": "acme"}


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock) -> Container:
    container = embedded_container(tmp_path, clock, ingest_directories=True)
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container


def run(c: Container, body: dict[str, Any]) -> Any:
    accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    c.ingestion.work("w1", job_id=accepted.job_id)
    return c.ingestion.status(SOURCE, accepted.job_id)


def metadata(c: Container, doc_id: str) -> dict[str, Any] | None:
    doc = c.backend.get_document(SOURCE, doc_id)
    assert doc is not None
    return doc.metadata


def sidecar(attributes: dict[str, Any]) -> str:
    return json.dumps({"metadataAttributes": attributes})


# --- parsing --------------------------------------------------------------------------------------------


def test_i_ingest_sidecar_parses_bedrock_plain_and_typed_attributes() -> None:
    plain = parse_sidecar(
        sidecar({"region": "eu", "year": 2024, "public": True, "tags": ["a", "b"]}).encode()
    )
    assert plain == {"region": "eu", "year": 2024, "public": True, "tags": ["a", "b"]}
    typed = {
        "region": {"value": {"type": "STRING", "stringValue": "eu"}, "includeForEmbedding": True},
        "year": {"value": {"type": "NUMBER", "numberValue": 2024}},
        "public": {"value": {"type": "BOOLEAN", "booleanValue": False}},
        "tags": {"value": {"type": "STRING_LIST", "stringListValue": ["x"]}},
    }
    assert parse_sidecar(sidecar(typed).encode()) == {
        "region": "eu",
        "year": 2024,
        "public": False,
        "tags": ["x"],
    }


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"\xff\xfe",
        b"[]",
        json.dumps({"region": "eu"}).encode(),  # not under metadataAttributes
        json.dumps({"metadataAttributes": {}, "extra": 1}).encode(),
        json.dumps({"metadataAttributes": ["a"]}).encode(),
        json.dumps({"metadataAttributes": {"k": {"value": {"type": "DATE", "dateValue": 1}}}}).encode(),
        json.dumps({"metadataAttributes": {"k": {"nested": 1}}}).encode(),
        b" " * (10 * 1024 + 1),
    ],
)
def test_i_ingest_malformed_sidecar_is_a_metadata_error_without_its_text(data: bytes) -> None:
    with pytest.raises(MetadataError) as exc:
        parse_sidecar(data)
    assert "not really" not in str(exc.value)


def test_i_ingest_meta_flag_parses_numbers_booleans_lists_and_strings() -> None:
    assert parse_meta_flag("year=2024") == ("year", 2024)
    assert parse_meta_flag("score=-1.5e2") == ("score", -150.0)
    assert parse_meta_flag("public=true") == ("public", True)
    assert parse_meta_flag("public=false") == ("public", False)
    assert parse_meta_flag('tags=["eu","us"]') == ("tags", ["eu", "us"])
    assert parse_meta_flag('code="2024"') == ("code", "2024")  # quoted: stays a string
    assert parse_meta_flag("region=eu-west=1") == ("region", "eu-west=1")
    assert parse_meta_flag("note=") == ("note", "")
    for bad in ("region", "=eu", "tags=[eu"):
        with pytest.raises(MetadataError):
            parse_meta_flag(bad)


def test_i_ingest_given_metadata_wins_over_the_sidecar_key_by_key() -> None:
    assert combine_metadata({"region": "us", "team": "ops"}, {"region": "eu"}) == {
        "region": "eu",
        "team": "ops",
    }
    assert combine_metadata(None, None) is None and combine_metadata({}, {}) is None


# --- inline jobs and the unchanged rule ------------------------------------------------------------------


def test_i_ingest_inline_job_stores_metadata_and_a_metadata_change_is_an_update(c: Container) -> None:
    doc = {"doc_id": "note", "title": "Note", "body": "pumps", "acl": ACL, "metadata": {"region": "eu"}}
    first = run(c, {"documents": [doc]})
    assert first.counts.done == 1 and metadata(c, "note") == {"region": "eu"}
    assert run(c, {"documents": [doc]}).counts.unchanged == 1
    changed = run(c, {"documents": [{**doc, "metadata": {"region": "us"}}]})
    assert changed.counts.done == 1 and metadata(c, "note") == {"region": "us"}  # SPEC §1: not "unchanged"
    dropped = run(c, {"documents": [{k: v for k, v in doc.items() if k != "metadata"}]})
    assert dropped.counts.done == 1 and metadata(c, "note") is None


def test_i_ingest_bad_metadata_is_a_400_naming_the_field() -> None:
    doc = {"doc_id": "n", "title": "N", "body": "b", "acl": ACL, "metadata": {"region": {"x": 1}}}
    with pytest.raises(InvalidRequest) as exc:
        parse_request(IngestionJobRequest, json.dumps({"documents": [doc]}))
    assert exc.value.field == "documents[0].metadata.region"
    with pytest.raises(InvalidRequest) as exc:
        parse_request(
            IngestionJobRequest, json.dumps({"directory": "/x", "acl": ACL, "metadata": {"1bad": 1}})
        )
    assert exc.value.field.startswith("metadata")
    with pytest.raises(InvalidRequest):  # job-level metadata applies to a directory or prefix only
        parse_request(
            IngestionJobRequest, json.dumps({"documents": [doc | {"metadata": {}}], "metadata": {"a": 1}})
        )


# --- directories and sidecars ----------------------------------------------------------------------------


def test_i_ingest_directory_sidecars_are_metadata_not_documents(c: Container, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "pumps.md").write_text("# Pumps\n\nCentrifugal pumps.", encoding="utf-8")
    (root / "pumps.md.metadata.json").write_text(sidecar({"region": "eu", "year": 2024}), encoding="utf-8")
    (root / "sub" / "valves.md").write_text("# Valves\n\nGate valves.", encoding="utf-8")
    (root / "orphan.md.metadata.json").write_text(sidecar({"region": "us"}), encoding="utf-8")
    status = run(c, {"directory": str(root), "acl": ACL, "doc_id_prefix": "m", "metadata": {"year": 2025}})
    assert status.total == 2 and (status.counts.done, status.counts.failed) == (2, 0)  # no sidecar counted
    assert set(c.backend.document_ids(SOURCE)) == {"m-pumps", "m-sub-valves"}
    assert metadata(c, "m-pumps") == {"region": "eu", "year": 2025}  # the job's metadata wins per key
    assert metadata(c, "m-sub-valves") == {"year": 2025}


def test_i_ingest_a_sidecar_change_re_ingests_its_file(c: Container, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "pumps.md").write_text("# Pumps\n\nCentrifugal pumps.", encoding="utf-8")
    body = {"directory": str(root), "acl": ACL, "doc_id_prefix": "m", "sync": True}
    assert run(c, body).counts.done == 1 and metadata(c, "m-pumps") is None
    (root / "pumps.md.metadata.json").write_text(sidecar({"region": "eu"}), encoding="utf-8")
    assert run(c, body).counts.done == 1 and metadata(c, "m-pumps") == {"region": "eu"}
    assert run(c, body).counts.unchanged == 1
    (root / "pumps.md.metadata.json").write_text(sidecar({"region": "us"}), encoding="utf-8")
    assert run(c, body).counts.done == 1 and metadata(c, "m-pumps") == {"region": "us"}
    (root / "pumps.md.metadata.json").unlink()
    again = run(c, body)
    assert again.counts.done == 1 and again.counts.deleted == 0 and metadata(c, "m-pumps") is None


def test_i_ingest_a_malformed_sidecar_fails_only_its_document(c: Container, tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    (root / "a.md.metadata.json").write_text('{"metadataAttributes": not really json', encoding="utf-8")
    (root / "b.md").write_text("# B\n\nbeta", encoding="utf-8")
    (root / "b.md.metadata.json").write_text(sidecar({"bad key": 1}), encoding="utf-8")  # breaks §8
    (root / "c.md").write_text("# C\n\ngamma", encoding="utf-8")
    status = run(c, {"directory": str(root), "acl": ACL, "doc_id_prefix": "m"})
    assert (status.counts.done, status.counts.failed) == (1, 2)
    assert {(e.doc_id, e.code) for e in status.errors} == {
        ("m-a", "invalid_metadata"),
        ("m-b", "invalid_metadata"),
    }
    assert "not really" not in status.model_dump_json()
    assert set(c.backend.document_ids(SOURCE)) == {"m-c"}


def test_i_ingest_a_sidecar_link_is_refused_not_followed(c: Container, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(sidecar({"leak": "yes"}), encoding="utf-8")
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    (root / "a.md.metadata.json").symlink_to(secret)
    status = run(c, {"directory": str(root), "acl": ACL, "doc_id_prefix": "m"})
    # A symlinked sidecar is skipped by the scan like any link: the document has no metadata, nothing leaks.
    assert status.counts.done == 1 and metadata(c, "m-a") is None

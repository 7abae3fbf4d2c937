"""The ingestion job payload is a discriminated union (I-INGEST): each kind of job document
(text, upload, directory file, S3 object) is its own model told apart by `kind`; payloads stored before
`kind` existed are read by one function that infers it from their keys."""

from __future__ import annotations

import pytest
from knowledge_core.domain.ingestion import (
    DirectoryFilePayload,
    S3ObjectPayload,
    TextPayload,
    UploadPayload,
    job_payload,
    known_payload,
    payload_json,
)
from pydantic import ValidationError

ACL = {"tenant": "default"}


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        (TextPayload(title="t", body="b", acl=ACL), TextPayload),
        (UploadPayload(filename="a.pdf", content_base64="JVBERi0=", acl=ACL), UploadPayload),
        (DirectoryFilePayload(path="/d/a.md", root="/d", uri="a.md", acl=ACL), DirectoryFilePayload),
        (
            S3ObjectPayload(s3={"bucket": "b", "key": "k.md", "etag": "e", "size": 1}, uri="s3://b/k.md"),
            S3ObjectPayload,
        ),
    ],
)
def test_i_ingest_payload_kinds_round_trip_through_storage(payload: object, kind: type) -> None:
    stored = payload_json(payload)  # type: ignore[arg-type]
    assert stored["kind"] == kind.model_fields["kind"].default
    assert job_payload(stored) == payload


def test_i_ingest_payloads_stored_before_kind_are_read_by_their_keys() -> None:
    assert isinstance(job_payload({"title": "t", "body": "b", "acl": ACL}), TextPayload)
    assert isinstance(job_payload({"path": "/d/a.md", "uri": "a.md", "acl": ACL}), DirectoryFilePayload)
    assert isinstance(
        job_payload({"s3": {"bucket": "b", "key": "k"}, "uri": "s3://b/k", "acl": ACL}), S3ObjectPayload
    )
    assert isinstance(job_payload({"filename": "a.pdf", "content_base64": "", "acl": ACL}), UploadPayload)


def test_i_ingest_a_payload_of_no_kind_is_refused_not_guessed() -> None:
    with pytest.raises(ValidationError):
        job_payload({"kind": "text", "filename": "a.pdf"})  # a text payload needs its body
    assert known_payload({"kind": "mystery"}) is None and known_payload(None) is None

"""A-REF (SPEC §2.5, "prefer binding digests over raw ids"): a ref does not carry its source
key and doc id as readable base64 JSON — they travel encrypted (AES-SIV under a key derived from the server
secret with its own label), bound to the caller's identity digest, inside the same HMAC-signed token."""

from __future__ import annotations

import base64
import json

import pytest
from knowledge_core.codec import REF_LABEL, TokenCodec, identity_digest
from knowledge_core.domain.errors import ReferenceInvalid

from tests.conftest import TEST_SECRET, FakeClock
from tests.unit.test_codec import PRINCIPAL, REVISION, RUN, SCOPE, forge

SOURCE, DOC = "demo-docs@1.0.0", "01-device-installation-spec"
IDENTITY = identity_digest(PRINCIPAL, "ws", RUN)


def issue(codec: TokenCodec, identity: str = IDENTITY, doc_id: str = DOC) -> str:
    ref, _ = codec.issue_ref(
        identity=identity, scope_revision=SCOPE, source_key=SOURCE, doc_id=doc_id, revision=REVISION
    )
    return ref


def payload(ref: str) -> dict:
    body = ref.partition(".")[0]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def test_ref_payload_hides_source_key_and_doc_id() -> None:
    codec = TokenCodec(TEST_SECRET.encode(), FakeClock())
    ref = issue(codec)
    readable = json.dumps(payload(ref))
    for raw in (SOURCE, DOC, "demo-docs", "device"):
        assert raw not in readable
    assert {"k", "d"}.isdisjoint(payload(ref))
    claims = codec.open_ref(ref, identity=IDENTITY)
    assert (claims.source_key, claims.doc_id) == (SOURCE, DOC)


def test_ref_location_is_bound_to_the_identity() -> None:
    """A location copied into a correctly signed ref of another caller does not open."""
    codec = TokenCodec(TEST_SECRET.encode(), FakeClock())
    other = identity_digest(PRINCIPAL.model_copy(update={"subject": "mallory"}), "ws", RUN)
    moved = {**payload(issue(codec)), "i": other}
    with pytest.raises(ReferenceInvalid):
        codec.open_ref(forge(REF_LABEL, moved), identity=other)


@pytest.mark.parametrize("location", ["", "x", "AAAA", "!!", base64.urlsafe_b64encode(b"s@1\nd").decode()])
def test_ref_signed_but_unreadable_location_is_invalid(location: str) -> None:
    codec = TokenCodec(TEST_SECRET.encode(), FakeClock())
    forged = {**payload(issue(codec)), "x": location}
    with pytest.raises(ReferenceInvalid):
        codec.open_ref(forge(REF_LABEL, forged), identity=IDENTITY)


def test_ref_location_opens_across_one_rotation() -> None:
    old, new = b"o" * 32, b"n" * 32
    ref = issue(TokenCodec(old, FakeClock()))
    rotated = TokenCodec(new, FakeClock(), previous=old)
    assert rotated.open_ref(ref, identity=IDENTITY).doc_id == DOC
    with pytest.raises(ReferenceInvalid):
        TokenCodec(new, FakeClock()).open_ref(ref, identity=IDENTITY)


def test_ref_is_no_longer_than_before_by_more_than_the_siv() -> None:
    """The budget of a search answer (4096 bytes, three refs) pays 16 bytes of tag per ref, and base64."""
    codec = TokenCodec(TEST_SECRET.encode(), FakeClock())
    plain_fields = len(json.dumps({"k": SOURCE, "d": DOC}, separators=(",", ":"))) - 2
    sealed_field = len(json.dumps({"x": payload(issue(codec))["x"]}, separators=(",", ":"))) - 2
    assert sealed_field - plain_fields <= 16 * 4 // 3 + (len(SOURCE) + len(DOC)) // 3 + 8

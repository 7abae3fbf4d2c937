"""A-REF: HMAC references and cursors — tampering, binding, expiry, domain separation, key sharing."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from knowledge_core.codec import CURSOR_LABEL, REF_LABEL, TokenCodec, identity_digest
from knowledge_core.domain.errors import ReferenceExpired, ReferenceInvalid
from knowledge_core.domain.models import Principal

from tests.conftest import TEST_SECRET, FakeClock

SECRET = TEST_SECRET.encode()
SCOPE = "a" * 64
REVISION = "sha256:" + "b" * 64
PRINCIPAL = Principal(
    client_id="client-1",
    session_id="session-1",
    subject="alice",
    on_behalf_of="bob",
    tenant="t1",
    routes=["ws"],
)
RUN = "6f1c1d4e-3f0e-4c55-9a55-2b7f4b3f9a10"
URL_SAFE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_codec(clock: FakeClock | None = None, secret: bytes = SECRET) -> TokenCodec:
    return TokenCodec(secret, clock or FakeClock())


def mint(
    codec: TokenCodec,
    principal: Principal = PRINCIPAL,
    route: str = "ws",
    run_id: str | None = RUN,
    **overrides: str,
) -> tuple[str, str]:
    """(ref, identity) for a document of source s@1."""
    identity = identity_digest(principal, route, run_id)
    fields = {
        "scope_revision": SCOPE,
        "source_key": "s@1",
        "doc_id": "doc-1",
        "revision": REVISION,
    } | overrides
    ref, _ = codec.issue_ref(identity=identity, **fields)
    return ref, identity


CODEC = make_codec()
REF, IDENTITY = mint(CODEC)
CLAIMS = CODEC.open_ref(REF, identity=IDENTITY)
CURSOR = CODEC.issue_cursor(ref=REF, offset=4096, expires_at=CLAIMS.expires_at)
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ é\x00"


def _mutations() -> st.SearchStrategy:
    """(kind, position, character) of a single flip, insert or delete anywhere in a token."""
    return st.tuples(
        st.sampled_from(["flip", "insert", "delete"]),
        st.integers(min_value=0, max_value=10_000),
        st.sampled_from(ALPHABET),
    )


def mutate(token: str, mutation: tuple[str, int, str]) -> str:
    kind, pos, char = mutation
    if kind == "insert":
        pos %= len(token) + 1
        return token[:pos] + char + token[pos:]
    pos %= len(token)
    if kind == "delete":
        return token[:pos] + token[pos + 1 :]
    replacement = char if char != token[pos] else ("A" if token[pos] != "A" else "B")
    return token[:pos] + replacement + token[pos + 1 :]


def forge(label: bytes, payload: object) -> str:
    """A token with a valid MAC over an arbitrary payload (what a holder of the secret could produce)."""
    key = hmac.new(SECRET, label, hashlib.sha256).digest()
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()
    mac = (
        base64.urlsafe_b64encode(hmac.new(key, body.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
    )
    return f"{body}.{mac}"


# --- tampering ---------------------------------------------------------------------------------------


@PROPERTY
@given(mutation=_mutations())
def test_a_ref_any_single_change_to_a_ref_is_invalid(mutation):
    tampered = mutate(REF, mutation)
    assert tampered != REF
    with pytest.raises(ReferenceInvalid) as info:
        CODEC.open_ref(tampered, identity=IDENTITY)
    assert info.value.code == "knowledge_reference_invalid" and info.value.status == 400


@PROPERTY
@given(mutation=_mutations())
def test_a_ref_any_single_change_to_a_cursor_is_invalid(mutation):
    tampered = mutate(CURSOR, mutation)
    with pytest.raises(ReferenceInvalid) as info:
        CODEC.open_cursor(tampered, ref=REF)
    assert info.value.code == "knowledge_reference_invalid"


@pytest.mark.parametrize("part", ["payload", "mac"])
def test_a_ref_every_position_of_payload_and_mac_matters(part):
    body = REF.partition(".")[0]
    start, stop = (0, len(body)) if part == "payload" else (len(body) + 1, len(REF))
    for pos in range(start, stop):
        for kind in ("flip", "delete"):
            with pytest.raises(ReferenceInvalid):
                CODEC.open_ref(mutate(REF, (kind, pos, "x")), identity=IDENTITY)


@pytest.mark.parametrize(
    "token",
    [
        "",
        ".",
        "abc",
        "abc.",
        ".abc",
        "a.b.c",
        REF + ".",
        "é" + REF,
        REF + "\n",
        "eyJ0IjoicmVmIn0.tampered",
        REF.replace(".", ""),
    ],
)
def test_a_ref_malformed_tokens_are_invalid(token):
    with pytest.raises(ReferenceInvalid):
        CODEC.open_ref(token, identity=IDENTITY)


@pytest.mark.parametrize(
    "payload",
    [
        [],
        "ref",
        {"t": "ref"},
        {"t": "ref", "i": IDENTITY, "s": "x", "k": "s@1", "d": "d", "r": "r"},
        {"t": "ref", "i": IDENTITY, "s": "x", "k": "s@1", "d": "d", "r": "r", "e": "9999999999"},
        {"t": "ref", "i": IDENTITY, "s": "x", "k": "s@1", "d": 7, "r": "r", "e": 9_999_999_999},
        {"t": "ref", "i": IDENTITY, "s": "x", "k": "s@1", "d": "d", "r": "r", "e": 9_999_999_999.5},
        {"t": "cur", "i": IDENTITY, "s": "x", "k": "s@1", "d": "d", "r": "r", "e": 9_999_999_999},
    ],
)
def test_a_ref_correctly_signed_but_malformed_payload_is_invalid_not_a_crash(payload):
    with pytest.raises(ReferenceInvalid):
        CODEC.open_ref(forge(REF_LABEL, payload), identity=IDENTITY)


@pytest.mark.parametrize(
    "payload",
    [
        {"t": "cur"},
        {"t": "cur", "f": "x", "o": -1, "e": 9_999_999_999},
        {"t": "cur", "f": "x", "o": "1", "e": 1},
        {"t": "cur", "f": 5, "o": 1, "e": 9_999_999_999},
        {"t": "ref", "f": "x", "o": 1, "e": 9_999_999_999},
    ],
)
def test_a_ref_correctly_signed_but_malformed_cursor_is_invalid(payload):
    with pytest.raises(ReferenceInvalid):
        CODEC.open_cursor(forge(CURSOR_LABEL, payload), ref=REF)


# --- binding -------------------------------------------------------------------------------------------

OTHERS = {
    "client": (PRINCIPAL.model_copy(update={"client_id": "client-2"}), "ws", RUN),
    "session": (PRINCIPAL.model_copy(update={"session_id": "session-2"}), "ws", RUN),
    "subject": (PRINCIPAL.model_copy(update={"subject": "mallory"}), "ws", RUN),
    "on_behalf_of": (PRINCIPAL.model_copy(update={"on_behalf_of": "carol"}), "ws", RUN),
    "on_behalf_of_absent": (PRINCIPAL.model_copy(update={"on_behalf_of": None}), "ws", RUN),
    "route": (PRINCIPAL, "ws-2", RUN),
    "run": (PRINCIPAL, "ws", "0d7a0f7e-9c1b-4f3e-8a57-6e0b2a1c4d5f"),
    "no_run": (PRINCIPAL, "ws", None),
}


@pytest.mark.parametrize("field", sorted(OTHERS))
def test_a_ref_each_bound_field_matters(field):
    principal, route, run_id = OTHERS[field]
    other_identity = identity_digest(principal, route, run_id)
    assert other_identity != IDENTITY
    with pytest.raises(ReferenceInvalid):
        CODEC.open_ref(REF, identity=other_identity)
    # ... and the reverse: a ref minted for the other value does not verify for the original.
    other_ref, _ = mint(CODEC, principal, route, run_id)
    with pytest.raises(ReferenceInvalid):
        CODEC.open_ref(other_ref, identity=IDENTITY)


@PROPERTY
@given(
    a=st.tuples(st.text(max_size=8), st.text(max_size=8), st.text(max_size=8), st.text(max_size=8)),
    b=st.tuples(st.text(max_size=8), st.text(max_size=8), st.text(max_size=8), st.text(max_size=8)),
)
def test_a_ref_identity_digest_is_injective_on_its_fields(a, b):
    def ident(t: tuple[str, str, str, str]) -> str:
        p = Principal(
            client_id=t[0], session_id=t[1], subject=t[2], on_behalf_of=t[3] or None, tenant="t", routes=[]
        )
        return identity_digest(p, "ws", None)

    assert (ident(a) == ident(b)) == (a == b)


def test_a_ref_binds_scope_source_doc_and_revision():
    claims = CODEC.open_ref(REF, identity=IDENTITY)
    assert (claims.source_key, claims.doc_id, claims.revision) == ("s@1", "doc-1", REVISION)
    assert TokenCodec.scope_matches(claims, SCOPE)
    assert not TokenCodec.scope_matches(claims, "c" * 64)


def test_a_ref_payload_carries_digests_not_raw_identities():
    payload = base64.urlsafe_b64decode(REF.partition(".")[0] + "==").decode()
    for raw in ("client-1", "session-1", "alice", "bob", RUN):
        assert raw not in payload


# --- expiry --------------------------------------------------------------------------------------------


def test_a_ref_valid_at_299_seconds_expired_at_300():
    clock = FakeClock()
    codec = make_codec(clock)
    ref, identity = mint(codec)
    claims = codec.open_ref(ref, identity=identity)
    cursor = codec.issue_cursor(ref=ref, offset=10, expires_at=claims.expires_at)
    assert claims.expires_at == int(clock.now()) + 300
    clock.advance(299)
    codec.open_ref(ref, identity=identity)
    assert codec.open_cursor(cursor, ref=ref).offset == 10
    clock.advance(1)
    with pytest.raises(ReferenceExpired) as info:
        codec.open_ref(ref, identity=identity)
    assert (info.value.status, info.value.code) == (410, "knowledge_reference_expired")
    with pytest.raises(ReferenceExpired):
        codec.open_cursor(cursor, ref=ref)
    clock.advance(86_400)
    with pytest.raises(ReferenceExpired):
        codec.open_ref(ref, identity=identity)


def test_a_ref_invalid_wins_over_expired():
    clock = FakeClock()
    codec = make_codec(clock)
    ref, identity = mint(codec)
    clock.advance(301)
    with pytest.raises(ReferenceInvalid):
        codec.open_ref(mutate(ref, ("flip", 3, "Q")), identity=identity)
    with pytest.raises(ReferenceInvalid):
        codec.open_ref(ref, identity=identity_digest(PRINCIPAL, "other", RUN))


# --- domain separation -------------------------------------------------------------------------------


def test_a_ref_a_cursor_is_never_a_ref_and_a_ref_never_a_cursor():
    with pytest.raises(ReferenceInvalid):
        CODEC.open_ref(CURSOR, identity=IDENTITY)
    with pytest.raises(ReferenceInvalid):
        CODEC.open_cursor(REF, ref=REF)
    # Even a ref-shaped payload signed with the cursor key (and the reverse) is refused.
    ref_payload = json.loads(base64.urlsafe_b64decode(REF.partition(".")[0] + "=="))
    with pytest.raises(ReferenceInvalid):
        CODEC.open_ref(forge(CURSOR_LABEL, ref_payload), identity=IDENTITY)
    cursor_payload = json.loads(base64.urlsafe_b64decode(CURSOR.partition(".")[0] + "=="))
    with pytest.raises(ReferenceInvalid):
        CODEC.open_cursor(forge(REF_LABEL, cursor_payload), ref=REF)


def test_a_ref_a_cursor_is_bound_to_its_ref():
    other_ref, _ = mint(CODEC, doc_id="doc-2")
    assert CODEC.open_cursor(CURSOR, ref=REF).offset == 4096
    with pytest.raises(ReferenceInvalid):
        CODEC.open_cursor(CURSOR, ref=other_ref)


# --- keys ----------------------------------------------------------------------------------------------


def test_a_ref_codecs_sharing_the_secret_verify_each_other():
    a, b = make_codec(), make_codec()
    ref, identity = mint(a)
    assert b.open_ref(ref, identity=identity) == a.open_ref(ref, identity=identity)
    cursor = b.issue_cursor(ref=ref, offset=7, expires_at=a.open_ref(ref, identity=identity).expires_at)
    assert a.open_cursor(cursor, ref=ref).offset == 7


def test_a_ref_a_different_secret_does_not_verify():
    rotated = make_codec(secret=b"another-secret-0123456789abcdef")
    with pytest.raises(ReferenceInvalid):
        rotated.open_ref(REF, identity=IDENTITY)
    with pytest.raises(ReferenceInvalid):
        rotated.open_cursor(CURSOR, ref=REF)


def test_a_ref_short_secret_is_refused():
    with pytest.raises(ValueError):
        TokenCodec(b"short", FakeClock())


@settings(max_examples=30, deadline=None)
@given(
    doc_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}", fullmatch=True), offset=st.integers(0, 131072)
)
def test_a_ref_tokens_are_url_safe(doc_id, offset):
    ref, identity = mint(CODEC, doc_id=doc_id)
    cursor = CODEC.issue_cursor(ref=ref, offset=offset, expires_at=CLAIMS.expires_at)
    for token in (ref, cursor):
        assert URL_SAFE.fullmatch(token), token
        assert quote(token, safe="") == token
    assert CODEC.open_ref(ref, identity=identity).doc_id == doc_id
    assert CODEC.open_cursor(cursor, ref=ref).offset == offset

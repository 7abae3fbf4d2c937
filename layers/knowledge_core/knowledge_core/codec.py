"""Self-contained HMAC-SHA256 references and cursors (A-REF).

Keys are derived from the server token secret with distinct labels, so a cursor can never pass as a
ref (nor the reverse). Payloads carry binding digests rather than raw identities, and a ref's source key
and doc id only encrypted (AES-SIV under a third derived key); verification uses a constant-time compare
and an injectable clock.

Rotation (S9): tokens are signed with the current secret and verified with the current or the previous
one, and `RotatingTokenCodec` re-reads both on a bounded interval, so warm containers on either side of a
rotation accept each other's refs until the previous secret is retired."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import encode_basestring_ascii
from typing import Any

from .domain.errors import ReferenceExpired, ReferenceInvalid
from .domain.models import Principal
from .ports import Clock

REF_LABEL = b"bailing.agent-knowledge.v1/ref"
CURSOR_LABEL = b"bailing.agent-knowledge.v1/cursor"
LOCATION_LABEL = b"bailing.agent-knowledge.v1/ref-location"  # encrypts a ref's source key and doc id
REFERENCE_TTL_SECONDS = 300
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
_DECODER = json.JSONDecoder()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def identity_digest(principal: Principal, route: str, run_id: str | None) -> str:
    """Binds tenant, client, session, subject/on_behalf_of, route and the optional run."""
    parts = [
        principal.client_id,
        principal.session_id,
        principal.subject,
        principal.on_behalf_of or "",
        route,
        run_id or "",
        principal.tenant,
    ]
    return _b64(hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode("utf-8")).digest())


@dataclass(frozen=True)
class RefClaims:
    identity: str
    scope: str  # knowledge scope revision (hex prefix)
    source_key: str
    doc_id: str
    revision: str  # document revision
    expires_at: int
    version: str | None = None  # models.stored_version when the hit knew it (refs from before: None)


@dataclass(frozen=True)
class CursorClaims:
    ref_digest: str
    offset: int
    expires_at: int


def _q(value: str) -> str:
    """A JSON string literal, ASCII-escaped exactly as json.dumps(ensure_ascii=True) writes it."""
    return encode_basestring_ascii(value)


def _scope_tag(scope_revision: str) -> str:
    return scope_revision[:32]


@lru_cache(maxsize=8)
def _siv(key: bytes) -> Any:
    """AES-SIV (RFC 5297, `cryptography`) under a derived key; imported on first use, not at cold start."""
    from cryptography.hazmat.primitives.ciphers.aead import AESSIV

    return AESSIV(key)


def _seal_location(key: bytes, identity: str, source_key: str, doc_id: str) -> str:
    """A ref's source key and doc id, encrypted (I1, SPEC §2.5: a holder reads no raw ids from a ref).
    Deterministic authenticated encryption bound to the caller's identity digest: two refs to one document
    look alike only to the caller they were issued to. Neither part can hold a newline."""
    sealed = _siv(key).encrypt(f"{source_key}\n{doc_id}".encode(), [identity.encode("ascii"), REF_LABEL])
    return _b64(sealed)


def _open_location(keys: tuple[bytes, ...], identity: str, location: str) -> tuple[str, str]:
    """The source key and doc id of a ref whose MAC verified; the current or the previous key."""
    from cryptography.exceptions import InvalidTag

    try:
        sealed = _unb64(location)
    except (ValueError, binascii.Error):
        raise ReferenceInvalid() from None
    for key in keys:
        try:
            plain = _siv(key).decrypt(sealed, [identity.encode("ascii"), REF_LABEL])
        except (InvalidTag, ValueError):
            continue
        source_key, sep, doc_id = plain.decode("utf-8", "replace").partition("\n")
        if sep:
            return source_key, doc_id
    raise ReferenceInvalid()


@dataclass(frozen=True)
class KeyRing:
    """The derived keys of the current secret (signs and verifies) and of the previous one (verifies)."""

    ref_keys: tuple[bytes, ...]
    cursor_keys: tuple[bytes, ...]
    location_keys: tuple[bytes, ...] = ()

    @classmethod
    def of(cls, secret: bytes, previous: bytes | None = None) -> KeyRing:
        secrets_ = [secret] + ([previous] if previous and previous != secret else [])
        for s in secrets_:
            if len(s) < 16:
                raise ValueError("token secret must be at least 16 bytes")
        return cls(
            tuple(hmac.new(s, REF_LABEL, hashlib.sha256).digest() for s in secrets_),
            tuple(hmac.new(s, CURSOR_LABEL, hashlib.sha256).digest() for s in secrets_),
            tuple(hmac.new(s, LOCATION_LABEL, hashlib.sha256).digest() for s in secrets_),
        )


SecretSource = Callable[[], tuple[bytes, bytes | None]]
"""Reads (current, previous or None) token secrets: Secrets Manager stages, a file, the environment."""


class TokenCodec:
    def __init__(
        self,
        secret: bytes,
        clock: Clock,
        ttl_seconds: int = REFERENCE_TTL_SECONDS,
        *,
        previous: bytes | None = None,
    ) -> None:
        self._ring = KeyRing.of(secret, previous)
        self._clock = clock
        self.ttl_seconds = ttl_seconds

    def keys(self) -> KeyRing:
        return self._ring

    # --- refs ---------------------------------------------------------------------------------
    def issue_ref(
        self,
        *,
        identity: str,
        scope_revision: str,
        source_key: str,
        doc_id: str,
        revision: str,
        version: str = "",
    ) -> tuple[str, int]:
        expires_at = int(self._clock.now()) + self.ttl_seconds
        # The same bytes json.dumps(separators=(",", ":")) gives for this dict, without its dispatch cost.
        keys = self.keys()
        location = _seal_location(keys.location_keys[0], identity, source_key, doc_id)
        payload = (
            f'{{"t":"ref","i":{_q(identity)},"s":{_q(_scope_tag(scope_revision))},"x":"{location}",'
            f'"r":{_q(revision.removeprefix("sha256:"))},'
            + (f'"v":{_q(version)},' if version else "")
            + f'"e":{expires_at:d}}}'
        )
        return self._seal_text(keys.ref_keys[0], payload), expires_at

    def open_ref(self, token: str, *, identity: str) -> RefClaims:
        """MAC, shape and identity first (400), then expiry (410). Scope and document are the caller's."""
        claims = self.ref_claims(token, identity=identity)
        if claims.expires_at <= self._clock.now():
            raise ReferenceExpired()
        return claims

    def ref_claims(self, token: str, *, identity: str) -> RefClaims:
        """MAC, shape and identity (400), whatever its expiry: what a ref this server issued to `identity`
        names — for re-checking a stored answer that carries it (a turn's replay), never for a read."""
        keys = self.keys()
        p = self._unseal(keys.ref_keys, token, "ref")
        try:
            identity_, scope, location, revision, expires_at = (p["i"], p["s"], p["x"], p["r"], p["e"])
        except KeyError:
            raise ReferenceInvalid() from None
        if (
            type(identity_) is not str
            or type(scope) is not str
            or type(location) is not str
            or type(revision) is not str
            or type(expires_at) is not int
        ):
            raise ReferenceInvalid()
        if not hmac.compare_digest(identity_, identity):
            raise ReferenceInvalid()
        version = p.get("v")
        if version is not None and type(version) is not str:
            raise ReferenceInvalid()
        source_key, doc_id = _open_location(keys.location_keys, identity_, location)
        return RefClaims(identity_, scope, source_key, doc_id, "sha256:" + revision, expires_at, version)

    @staticmethod
    def scope_matches(claims: RefClaims, scope_revision: str) -> bool:
        return hmac.compare_digest(claims.scope, _scope_tag(scope_revision))

    # --- cursors --------------------------------------------------------------------------------
    def issue_cursor(self, *, ref: str, offset: int, expires_at: int) -> str:
        return self._seal(
            self.keys().cursor_keys[0], {"t": "cur", "f": self.ref_digest(ref), "o": offset, "e": expires_at}
        )

    def open_cursor(self, cursor: str, *, ref: str) -> CursorClaims:
        p = self._unseal(self.keys().cursor_keys, cursor, "cur")
        try:
            claims = CursorClaims(ref_digest=p["f"], offset=p["o"], expires_at=p["e"])
            if type(claims.offset) is not int or claims.offset < 0 or not isinstance(claims.ref_digest, str):
                raise TypeError
        except (KeyError, TypeError):
            raise ReferenceInvalid("cursor is invalid") from None
        if not hmac.compare_digest(claims.ref_digest, self.ref_digest(ref)):
            raise ReferenceInvalid("cursor does not belong to this ref")
        if type(claims.expires_at) is not int or claims.expires_at <= self._clock.now():
            raise ReferenceExpired()
        return claims

    @staticmethod
    def ref_digest(ref: str) -> str:
        return _b64(hashlib.sha256(ref.encode("utf-8")).digest()[:16])

    # --- sealing --------------------------------------------------------------------------------
    @classmethod
    def _seal(cls, key: bytes, payload: dict[str, Any]) -> str:
        return cls._seal_text(key, _ENCODER.encode(payload))

    @staticmethod
    def _seal_text(key: bytes, payload: str) -> str:
        body = _b64(payload.encode("ascii"))
        return f"{body}.{_b64(hmac.digest(key, body.encode('ascii'), 'sha256'))}"

    @staticmethod
    def _unseal(keys: tuple[bytes, ...], token: str, kind: str) -> dict[str, Any]:
        invalid = ReferenceInvalid() if kind == "ref" else ReferenceInvalid("cursor is invalid")
        body, sep, mac = token.partition(".")
        if not sep or not body or not mac or not token.isascii():
            raise invalid
        signed = body.encode("ascii")
        # Every key is tried (no early exit), each compare constant-time.
        matches = [hmac.compare_digest(mac, _b64(hmac.digest(key, signed, "sha256"))) for key in keys]
        if not any(matches):
            raise invalid
        try:
            payload = _DECODER.decode(_unb64(body).decode("ascii"))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise invalid from None
        if not isinstance(payload, dict) or payload.get("t") != kind:
            raise invalid
        return payload


class RotatingTokenCodec(TokenCodec):
    """A TokenCodec whose secrets are re-read from `source` at most every `refresh_seconds`: a rotated
    secret reaches every warm container within that bound. A failed re-read keeps the keys it has."""

    def __init__(
        self,
        source: SecretSource,
        clock: Clock,
        ttl_seconds: int = REFERENCE_TTL_SECONDS,
        *,
        refresh_seconds: float = 60.0,
    ) -> None:
        current, previous = source()
        super().__init__(current, clock, ttl_seconds, previous=previous)
        self._source = source
        self._refresh_seconds = refresh_seconds
        self._read_at = clock.now()
        self._lock = threading.Lock()

    def keys(self) -> KeyRing:
        now = self._clock.now()
        if now - self._read_at >= self._refresh_seconds and self._lock.acquire(blocking=False):
            try:
                self._read_at = now
                current, previous = self._source()
                self._ring = KeyRing.of(current, previous)
            except Exception:  # the secret store is down or returned junk: keep signing with what we have
                from .observability import logger

                logger.warning("token secret re-read failed; keeping the current keys")
            finally:
                self._lock.release()
        return self._ring

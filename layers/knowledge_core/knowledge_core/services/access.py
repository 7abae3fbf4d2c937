"""Bearer tokens and sessions: issuing (stored only as SHA-256), authenticating, route checks, run checks."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sys
import uuid

from ..domain.cache import BoundedCache
from ..domain.errors import Forbidden, NotFound, RunNotFound, RunNotReady, TokenExpired, Unauthorized
from ..domain.models import Principal, Run, Session, TokenSummary, owns_run
from ..ports import Clock, RunStore, SessionStore

TOKEN_PREFIX = "kbt_"
RUN_CACHE_BYTES = 4 * 1024 * 1024  # S5: every run a container sees would otherwise stay for its lifetime


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class AccessService:
    def __init__(self, sessions: SessionStore, clock: Clock) -> None:
        self._sessions = sessions
        self._clock = clock

    def issue_token(
        self,
        *,
        routes: list[str],
        client_id: str,
        subject: str,
        tenant: str,
        session_id: str | None = None,
        on_behalf_of: str | None = None,
        groups: list[str] | None = None,
        ttl_seconds: int = 3600,
    ) -> tuple[str, Session]:
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        session = Session(
            client_id=client_id,
            session_id=session_id or str(uuid.uuid4()),
            subject=subject,
            on_behalf_of=on_behalf_of,
            tenant=tenant,
            routes=routes,
            groups=groups or [],
            expires_at=int(self._clock.now()) + ttl_seconds,
        )
        self._sessions.put_session(token_hash(token), session)
        return token, session

    def list_tokens(self) -> list[TokenSummary]:
        return sorted(
            self._sessions.list_sessions(self._clock.now()), key=lambda t: (t.expires_at, t.token_id)
        )

    def revoke_token(self, token_id: str) -> TokenSummary:
        """Refused by the authorizer from its next read on (it caches no session)."""
        revoked = self._sessions.revoke_session(token_id, self._clock.now())
        if revoked is None:
            raise NotFound("token not found or expired", field="token_id")
        return revoked

    def authenticate(self, authorization: str | None) -> Principal:
        """`Authorization: Bearer <token>` -> principal; anything else is 401 (`TokenExpired` for a token
        past its expiry, so a client knows to get a new one)."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX) or len(token) > 256:
            raise Unauthorized()
        session = self._sessions.get_session(token_hash(token))
        if session is None or session.revoked:
            raise Unauthorized()
        if session.expires_at <= self._clock.now():
            raise TokenExpired()
        return Principal.model_validate(session.model_dump(exclude={"expires_at", "revoked"}))


def authorize_route(principal: Principal, route: str) -> None:
    # compare_digest takes str only when ASCII: compare UTF-8 bytes so any route name is a typed 403.
    wanted = route.encode("utf-8", "surrogatepass")
    if not any(hmac.compare_digest(wanted, allowed.encode("utf-8")) for allowed in principal.routes):
        raise Forbidden()


def _cached_run_bytes(value: object) -> int:
    # A Run object weighs several times its JSON (pydantic instance, dict, str objects).
    return 4 * len(value[1].model_dump_json()) if isinstance(value, tuple) else sys.getsizeof(value)


class RunGuard:
    """Public endpoints accept only the caller's own run, in `context_ready`."""

    def __init__(self, runs: RunStore, clock: Clock, ttl_seconds: float = 2.0) -> None:
        self._runs = runs
        self._clock = clock
        self._ttl = ttl_seconds
        self._cache: BoundedCache[str, tuple[float, Run]] = BoundedCache(
            RUN_CACHE_BYTES, max_entry_bytes=8192, size=_cached_run_bytes
        )

    def check(self, principal: Principal, route: str, run_id: str | None) -> Run | None:
        if run_id is None:
            return None
        run = self._get(run_id)
        if run is None or not owns_run(run, principal, route):
            raise RunNotFound()
        if run.state != "context_ready":
            raise RunNotReady()
        return run

    def _get(self, run_id: str) -> Run | None:
        now = self._clock.now()
        cached = self._cache.get(run_id)
        if cached and now - cached[0] < self._ttl:
            return cached[1]
        run = self._runs.get_run(run_id)
        if run is not None:
            self._cache.put(run_id, (now, run))
        return run

    def forget(self, run_id: str) -> None:
        self._cache.pop(run_id)

"""MCP authorization (M-AUTH): the MCP endpoint as an OAuth 2.1 resource server.

Access tokens are JWTs of one configured authorization server: signature against its JWKS (cached, refreshed
on an unknown key id at most every 30 s: key rotation), `iss`, `aud` = this resource (RFC 8707), `exp`/`nbf`.
A scope `<prefix><route>` grants that route; the principal is the service's usual one. Protected Resource
Metadata (RFC 9728) and the `WWW-Authenticate` challenges (RFC 6750) tell a client where to get a token."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.request
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..domain.errors import Forbidden, TokenExpired, Unauthorized
from ..domain.models import Principal

if TYPE_CHECKING:
    from jwt import PyJWKClient

    from ..settings import Settings

# Asymmetric algorithms only: a token signed with a shared secret ("HS256") or none is never accepted.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
WELL_KNOWN = "/.well-known/oauth-protected-resource"
JWKS_LIFESPAN_S = 300.0
JWKS_COOLDOWN_S = 30.0
FETCH_TIMEOUT_S = 5.0
MAX_TOKEN_CHARS = 8192


class InvalidToken(Unauthorized):
    """A bearer token that is not a valid access token of the configured issuer for this resource."""

    default_message = "invalid_token: the access token is not valid for this resource"


class InsufficientScope(Forbidden):
    """A valid access token whose scopes grant none of the routes asked for (RFC 6750 insufficient_scope)."""

    default_message = "insufficient_scope: the access token's scopes do not grant this route"
    refusal = "insufficient_scope"  # how the authorizer tells the function


def looks_like_jwt(authorization: str | None) -> bool:
    """Whether the header carries a compact JWS (three base64url parts), not one of the service's tokens."""
    scheme, _, token = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and token.strip().count(".") == 2


@dataclass
class OAuthResource:
    """The configured resource server: the metadata it publishes and the tokens it accepts."""

    issuer: str
    resource: str
    jwks_url: str | None = None
    scope_prefix: str = "knowledge/"
    routes: tuple[str, ...] = ()
    tenant: str = "default"
    leeway_s: float = 10.0

    @classmethod
    def from_settings(cls, settings: Settings) -> OAuthResource | None:
        if not settings.oauth_issuer or not settings.oauth_audience:
            return None
        return cls(
            issuer=settings.oauth_issuer,
            resource=settings.oauth_audience,
            jwks_url=settings.oauth_jwks_url,
            scope_prefix=settings.oauth_scope_prefix,
            routes=settings.oauth_route_list(),
            tenant=settings.oauth_tenant,
        )

    def on_domain(self, domain: str | None) -> OAuthResource:
        """This resource as a request sees it: a configured path alone becomes `https://<domain><path>`,
        the domain being the one API Gateway received the request on (never a client's Host header)."""
        if not self.resource.startswith("/"):
            return self
        if not domain or not _DOMAIN.fullmatch(domain):
            raise InvalidToken("invalid_token: the request's domain is unknown")
        return replace(self, resource=f"https://{domain.lower()}{self.resource}")

    # --- what the resource publishes -----------------------------------------------------------
    def scope_of(self, route: str) -> str:
        return self.scope_prefix + route

    @property
    def scopes_supported(self) -> list[str]:
        return [self.scope_of(route) for route in self.routes]

    @property
    def metadata_url(self) -> str:
        """RFC 9728 §3.1: the well-known segment between the resource's origin and its path."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{parts.path.rstrip('/')}"

    @property
    def metadata_paths(self) -> tuple[str, ...]:
        """The paths this resource's metadata answers on: the path-suffixed form and the root form."""
        suffixed = urlsplit(self.metadata_url).path
        return (suffixed, WELL_KNOWN) if suffixed != WELL_KNOWN else (WELL_KNOWN,)

    def metadata(self) -> dict[str, Any]:
        """The Protected Resource Metadata document (RFC 9728 §2)."""
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "Agent Knowledge Service (MCP)",
        }
        if self.routes:
            document["scopes_supported"] = self.scopes_supported
        return document

    def challenge(self, refusal: Unauthorized | Forbidden, *, route: str | None, presented: bool) -> str:
        """The `WWW-Authenticate` value of a 401 or 403 (RFC 6750 §3, MCP authorization): where the
        metadata is, the scope the request needs, and why a presented token was refused."""
        params = [f'resource_metadata="{self.metadata_url}"']
        scopes = [self.scope_of(route)] if route else self.scopes_supported
        if isinstance(refusal, Forbidden):
            params.insert(0, 'error="insufficient_scope"')
            params.append('error_description="the token does not grant this route"')
        elif presented:
            params.insert(0, 'error="invalid_token"')
            reason = (
                "the token has expired" if isinstance(refusal, TokenExpired) else "the token is not valid"
            )
            params.append(f'error_description="{reason}"')
        if scopes:
            params.append(f'scope="{" ".join(scopes)}"')
        return "Bearer " + ", ".join(params)

    # --- what it accepts ----------------------------------------------------------------------
    def authenticate(self, authorization: str | None) -> Principal:
        """`Authorization: Bearer <JWT>` -> principal. InvalidToken/TokenExpired (401) for a token that is
        not valid here; InsufficientScope (403) for a valid one that grants no route."""
        import jwt

        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
            raise InvalidToken()
        try:
            key = self._jwks().get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=list(ALGORITHMS),
                audience=self.resource,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise TokenExpired() from None
        except (jwt.PyJWTError, ValueError, OSError):
            # Which check failed (signature, key id, issuer, audience, …) is not told, only that one did.
            raise InvalidToken() from None
        routes = self.granted_routes(claims)
        if not routes:
            raise InsufficientScope()
        subject = _text(claims.get("sub")) or _text(claims.get("client_id")) or "oauth-client"
        client = _text(claims.get("client_id")) or _text(claims.get("azp")) or subject
        session = _text(claims.get("jti")) or hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]
        return Principal(
            client_id=client[:256],
            session_id=f"oauth:{session[:128]}",
            subject=subject[:256],
            tenant=self.tenant,
            routes=routes,
        )

    def granted_routes(self, claims: dict[str, Any]) -> list[str]:
        """The routes the token's scopes grant (`scope`, space-separated per RFC 9068, or `scp`, a list),
        within the configured routes when any are configured."""
        raw = claims.get("scope", claims.get("scp", ""))
        scopes = raw.split() if isinstance(raw, str) else [s for s in raw if isinstance(s, str)]
        routes = sorted(
            {s.removeprefix(self.scope_prefix) for s in scopes if s.startswith(self.scope_prefix)} - {""}
        )
        return [r for r in routes if r in self.routes] if self.routes else routes

    def _jwks(self) -> PyJWKClient:
        """The issuer's key set client, one per process (its cache outlives a request)."""
        with _CLIENTS_LOCK:
            client = _CLIENTS.get(self.issuer)
            if client is None:
                from jwt import PyJWKClient

                url = self.jwks_url or discover_jwks_url(self.issuer)
                client = PyJWKClient(
                    url,
                    cache_jwk_set=True,
                    lifespan=JWKS_LIFESPAN_S,
                    timeout=FETCH_TIMEOUT_S,
                    cooldown_duration=JWKS_COOLDOWN_S,
                )
                _CLIENTS[self.issuer] = client
            return client


_CLIENTS: dict[str, PyJWKClient] = {}
_CLIENTS_LOCK = threading.Lock()
_DOMAIN = re.compile(r"[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?")


def discover_jwks_url(issuer: str) -> str:
    """The issuer's `jwks_uri`: RFC 8414 metadata (well-known inserted before the issuer's path), else
    OpenID Connect discovery (appended), whichever answers first with the same issuer."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    candidates = (
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}{path}/.well-known/openid-configuration",
        f"{origin}/.well-known/openid-configuration{path}",
    )
    for url in candidates:
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as answer:
                document = json.loads(answer.read(1 << 20))
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and document.get("issuer") == issuer and document.get("jwks_uri"):
            return str(document["jwks_uri"])
    raise InvalidToken("invalid_token: the authorization server's keys could not be found")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""

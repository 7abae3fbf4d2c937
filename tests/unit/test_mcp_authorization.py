"""M-AUTH in the core: the OAuth resource server's token checks (RS256 keys made here, a JWKS served from
memory: no network), key rotation, the scope -> route mapping, the metadata and the challenges. The whole
flow against a real authorization server is tests/e2e/test_mcp_authorization.py."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from knowledge_core.domain.errors import Forbidden, TokenExpired, Unauthorized
from knowledge_core.services import oauth
from knowledge_core.services.oauth import InsufficientScope, InvalidToken, OAuthResource, looks_like_jwt
from knowledge_core.settings import Settings
from pydantic import ValidationError

ISSUER = "https://auth.example.test/tenant-a"
RESOURCE = "https://kb.example.test/mcp"


class Keys:
    """An issuer's signing keys and the JWKS it publishes (what PyJWKClient fetches)."""

    def __init__(self) -> None:
        self.private: dict[str, Any] = {}
        self.fetches = 0
        self.add("k1")

    def add(self, kid: str) -> None:
        self.private[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict[str, Any]:
        self.fetches += 1
        keys = []
        for kid, key in self.private.items():
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def token(self, kid: str = "k1", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": RESOURCE, "sub": "alice", "exp": now + 300, "nbf": now - 5}
        body |= {"scope": "openid knowledge/demo", "client_id": "agent-app", "jti": "j-1"}
        body |= claims
        return jwt.encode(
            {k: v for k, v in body.items() if v is not None}, self.private[kid], "RS256", {"kid": kid}
        )


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Keys:
    keys = Keys()
    client = jwt.PyJWKClient(f"{ISSUER}/jwks", cooldown_duration=0)
    monkeypatch.setattr(client, "fetch_data", keys.jwks)
    monkeypatch.setattr(oauth, "_CLIENTS", {ISSUER: client})
    return keys


def resource(routes: tuple[str, ...] = ("demo",)) -> OAuthResource:
    return OAuthResource(issuer=ISSUER, resource=RESOURCE, jwks_url=f"{ISSUER}/jwks", routes=routes)


def test_m_auth_valid_token_becomes_the_services_principal(keys):
    principal = resource().authenticate("Bearer " + keys.token())
    assert principal.routes == ["demo"] and principal.tenant == "default"
    assert (principal.subject, principal.client_id, principal.session_id) == (
        "alice",
        "agent-app",
        "oauth:j-1",
    )


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "https://other.example.test/mcp"},  # another resource (RFC 8707)
        {"iss": "https://evil.example.test"},
        {"nbf": "in ten minutes"},  # computed when the test runs, not when it is collected
        {"exp": None},
        {"aud": None},
    ],
    ids=["audience", "issuer", "not_yet_valid", "no_exp", "no_aud"],
)
def test_m_auth_token_claims_checked(keys, claims):
    if claims.get("nbf") == "in ten minutes":
        claims = {"nbf": int(time.time()) + 600}
    with pytest.raises(InvalidToken):
        resource().authenticate("Bearer " + keys.token(**claims))


def test_m_auth_expired_token_is_token_expired(keys):
    with pytest.raises(TokenExpired):
        resource().authenticate("Bearer " + keys.token(exp=int(time.time()) - 60))


def test_m_auth_signature_and_algorithm_checked(keys):
    good = keys.token()
    forged = good.rsplit(".", 1)[0] + "." + keys.token(sub="mallory").rsplit(".", 1)[1]
    hs256 = jwt.encode({"iss": ISSUER, "aud": RESOURCE, "exp": 2**31}, "k" * 32, "HS256", {"kid": "k1"})
    unsigned = jwt.encode({"iss": ISSUER, "aud": RESOURCE, "exp": 2**31}, None, "none", {"kid": "k1"})
    for token in (forged, hs256, unsigned, "a.b.c", "x" * 9000):
        with pytest.raises(InvalidToken):
            resource().authenticate("Bearer " + token)


def test_m_auth_rotated_key_is_fetched_once_unknown_kids_are_refused(keys):
    """A new key id refreshes the cached JWKS (rotation); a key id the issuer never published is refused."""
    r = resource()
    r.authenticate("Bearer " + keys.token())
    assert keys.fetches == 1
    keys.add("k2")
    assert r.authenticate("Bearer " + keys.token("k2")).routes == ["demo"]
    assert keys.fetches == 2
    r.authenticate("Bearer " + keys.token("k2"))
    assert keys.fetches == 2  # cached
    stranger = Keys()
    stranger.add("k9")
    with pytest.raises(InvalidToken):
        r.authenticate("Bearer " + stranger.token("k9"))


def test_m_auth_scopes_grant_routes(keys):
    assert resource(()).authenticate("Bearer " + keys.token(scope="knowledge/a knowledge/b x")).routes == [
        "a",
        "b",
    ]
    assert resource(("b",)).authenticate(
        "Bearer " + keys.token(scope=None, scp=["knowledge/a", "knowledge/b"])
    ).routes == ["b"]
    for scope in ("openid", "knowledge/other", "knowledge/"):
        with pytest.raises(InsufficientScope):
            resource().authenticate("Bearer " + keys.token(scope=scope))


def test_m_auth_metadata_and_challenges():
    r = resource()
    assert r.metadata_url == "https://kb.example.test/.well-known/oauth-protected-resource/mcp"
    assert r.metadata_paths == (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    )
    assert r.metadata() == {
        "resource": RESOURCE,
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "resource_name": "Agent Knowledge Service (MCP)",
        "scopes_supported": ["knowledge/demo"],
    }
    meta = f'resource_metadata="{r.metadata_url}"'
    assert (
        r.challenge(Unauthorized(), route=None, presented=False) == f'Bearer {meta}, scope="knowledge/demo"'
    )
    expired = r.challenge(TokenExpired(), route="demo", presented=True)
    assert expired.startswith('Bearer error="invalid_token"') and "expired" in expired
    assert 'scope="knowledge/demo"' in expired
    forbidden = r.challenge(Forbidden(), route="x", presented=True)
    assert forbidden.startswith('Bearer error="insufficient_scope"') and 'scope="knowledge/x"' in forbidden


def test_m_auth_audience_path_takes_the_apis_domain():
    r = OAuthResource(issuer=ISSUER, resource="/mcp")
    bound = r.on_domain("abc123.execute-api.us-east-1.amazonaws.com")
    assert bound.resource == "https://abc123.execute-api.us-east-1.amazonaws.com/mcp"
    assert bound.metadata_url.endswith(".amazonaws.com/.well-known/oauth-protected-resource/mcp")
    for domain in (None, "", "evil.test/path", "a b"):
        with pytest.raises(InvalidToken):
            r.on_domain(domain)


def test_m_auth_settings_need_issuer_and_audience_together():
    assert OAuthResource.from_settings(Settings()) is None
    configured = Settings.from_env(
        {"KB_OAUTH_ISSUER": ISSUER, "KB_OAUTH_AUDIENCE": RESOURCE, "KB_OAUTH_ROUTES": "demo, other"}
    )
    made = OAuthResource.from_settings(configured)
    assert made is not None and made.routes == ("demo", "other") and made.resource == RESOURCE
    with pytest.raises(ValidationError, match="oauth_audience"):
        Settings.from_env({"KB_OAUTH_ISSUER": ISSUER})
    with pytest.raises(ValidationError):
        Settings.from_env({"KB_OAUTH_ISSUER": "ftp://x", "KB_OAUTH_AUDIENCE": RESOURCE})


def test_m_auth_only_jwts_go_to_the_authorization_server():
    assert looks_like_jwt("Bearer a.b.c") and looks_like_jwt("bearer  a.b.c ")
    assert (
        not looks_like_jwt("Bearer kbt_abc")
        and not looks_like_jwt(None)
        and not looks_like_jwt("Basic a.b.c")
    )

"""A real OAuth 2.1 / OpenID authorization server on loopback for the M-AUTH tests: NAV's mock-oauth2-server
(MIT, Maven Central `no.nav.security:mock-oauth2-server`, tests/oauth_server/pom.xml), its classpath resolved
by Maven once (cached until the pom changes), started as a Java process on a free port.

Its token endpoint issues RS256 JWTs from its own keys (JWKS at `<issuer>/jwks`); the request mappings below
put the RFC 8707 `resource` in `aud` and the requested `scope` in `scope`, and make two clients whose tokens
are wrong on purpose: `kb-expired` (expired in 2000) and `kb-foreign-issuer` (another `iss`, same key)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, free_port, stop

POM = ROOT / "tests" / "oauth_server" / "pom.xml"
MAIN = "no.nav.security.mock.oauth2.StandaloneMockOAuth2ServerKt"
START_TIMEOUT_S = 60
EXPIRED_CLIENT = "kb-expired"
FOREIGN_ISSUER_CLIENT = "kb-foreign-issuer"
FOREIGN_ISSUER = "http://127.0.0.1:9/elsewhere"


def _claims(**extra: object) -> dict[str, object]:
    templated = {"sub": "${clientId}", "client_id": "${clientId}", "aud": "${resource}", "scope": "${scope}"}
    return {**templated, **extra}


def _mapping(client_id: str, **extra: object) -> dict[str, object]:
    return {"requestParam": "client_id", "match": client_id, "claims": _claims(**extra)}


CONFIG = {
    "interactiveLogin": False,
    "httpServer": "NettyWrapper",
    "tokenCallbacks": [
        {
            "issuerId": "default",
            "tokenExpiry": 300,
            "requestMappings": [
                _mapping(EXPIRED_CLIENT, exp=946684800),
                _mapping(FOREIGN_ISSUER_CLIENT, iss=FOREIGN_ISSUER),
                _mapping("*"),
            ],
        }
    ],
}


@dataclass(frozen=True)
class OAuthServer:
    base: str

    @property
    def issuer(self) -> str:
        return f"{self.base}/default"

    def token(self, client_id: str, *, scope: str, resource: str) -> str:
        """An access token from the token endpoint (client credentials, RFC 8707 `resource`)."""
        form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": "secret"}
        form |= {"scope": scope, "resource": resource}
        request = urllib.request.Request(
            f"{self.issuer}/token", data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())["access_token"]


def claims_of(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def _unavailable(message: str) -> None:
    if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def classpath(cache: Path) -> str:
    """The server's classpath (Maven Central via `mvn`), cached in `cache` until the pom changes."""
    out = cache / "oauth-server.classpath"
    if out.is_file() and out.stat().st_mtime >= POM.stat().st_mtime:
        cp = out.read_text().strip()
        if cp and all(Path(p).is_file() for p in cp.split(os.pathsep)):
            return cp
    if not (shutil.which("mvn") and shutil.which("java")):
        _unavailable("the OAuth authorization server needs java and mvn (Maven Central)")
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0 or not out.is_file():
        output = done.stdout[-2000:] + done.stderr[-2000:]
        _unavailable(f"maven could not resolve mock-oauth2-server: {output}")
    return out.read_text().strip()


@contextmanager
def running_oauth_server(cache: Path, log_path: Path) -> Iterator[OAuthServer]:
    cp = classpath(cache)
    port = free_port()
    env = {
        **os.environ,
        "SERVER_HOSTNAME": "127.0.0.1",
        "SERVER_PORT": str(port),
        "JSON_CONFIG": json.dumps(CONFIG),
    }
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", cp, MAIN],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            server = OAuthServer(f"http://127.0.0.1:{port}")
            discovery = f"{server.issuer}/.well-known/openid-configuration"
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    with urllib.request.urlopen(discovery, timeout=2):
                        break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        log_text = log_path.read_text()
                        raise RuntimeError("mock-oauth2-server did not start:\n" + log_text) from None
                    time.sleep(0.2)
            yield server
        finally:
            stop(proc)

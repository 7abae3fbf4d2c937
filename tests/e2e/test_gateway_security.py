"""The second security review at `kb serve`'s gateway, G-LOCAL: requests for another host are refused on
every route (DNS rebinding, H1); one deadline per request (L4); conflicting `Content-Length`s (L5); deeply
nested Invoke API payloads (L2); invalid document ids on the admin API (L1)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from kb_cli import gateway
from kb_cli.http import call
from tests.e2e.conftest import KbServer
from tests.e2e.test_gateway_limits import raw_exchange

SEARCH = "/agent-api/v1/workspaces/demo/knowledge/search"
EVIL = "evil.example"

# One request per kind of route: agent API, admin API (read and write), Invoke API, console, MCP, OpenAPI.
ROUTES = [
    ("POST", SEARCH, b'{"query": "gateway"}'),
    ("GET", "/agent-api/v1/workspaces/demo/knowledge/capabilities", b""),
    ("GET", "/admin/v1/tokens", b""),
    (
        "POST",
        "/admin/v1/tokens",
        b'{"routes": ["demo"], "client_id": "rebind", "subject": "u", "tenant": "demo"}',
    ),
    ("POST", "/2015-03-31/functions/SearchFunction/invocations", b"{}"),
    ("GET", "/console/", b""),
    ("POST", "/mcp", b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'),
    ("GET", "/agent-api/v1/openapi.json", b""),
    ("GET", "/nowhere", b""),
]


def raw(method: str, path: str, host: str, body: bytes = b"", extra: dict[str, str] | None = None) -> bytes:
    headers = {
        "Host": host,
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        **(extra or {}),
    }
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def rebinding_headers(server: KbServer, name: str = EVIL) -> dict[str, str]:
    """What a browser sends from a page whose DNS name was rebound to 127.0.0.1: its own name as Host and
    Origin, and `Sec-Fetch-Site: same-origin` (to the browser, it is)."""
    return {
        "Origin": f"http://{name}:{server.port}",
        "Sec-Fetch-Site": "same-origin",
        "Authorization": f"Bearer {server.token}",
    }


def assert_misdirected(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status == 421
    assert headers["content-type"] == "application/json" and headers["cache-control"] == "no-store"
    assert json.loads(body)["error"]["code"] == "misdirected_request"
    assert json.loads(body)["error"]["message"].startswith("host:")


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
def test_h1_dns_rebinding_host_refused(kb_server: KbServer, method: str, path: str, body: bytes) -> None:
    """G-LOCAL / H1: the rebinding page's Host is refused on every route, whatever its Origin says."""
    host = f"{EVIL}:{kb_server.port}"
    answer = raw_exchange(kb_server, raw(method, path, host, body, rebinding_headers(kb_server)))
    assert_misdirected(*answer)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",  # no port: the default one (80), not this server's
        "localhost:1",
        "127.0.0.2:{port}",
        "127.0.0.1.evil.example:{port}",
        "localhost.:{port}",
        "0.0.0.0:{port}",
        "[::ffff:127.0.0.1]:{port}",
        "",
    ],
)
def test_h1_dns_rebinding_other_names_and_ports_refused(kb_server: KbServer, host: str) -> None:
    answer = raw_exchange(
        kb_server, raw("GET", "/agent-api/v1/openapi.json", host.format(port=kb_server.port))
    )
    assert_misdirected(*answer)


def test_h1_dns_rebinding_missing_or_repeated_host_refused(kb_server: KbServer) -> None:
    """RFC 9112 §3.2: no Host, or more than one, is not a request for this server."""
    no_host = b"GET /agent-api/v1/openapi.json HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    assert_misdirected(*raw_exchange(kb_server, no_host))
    own = f"127.0.0.1:{kb_server.port}"
    twice = f"GET /agent-api/v1/openapi.json HTTP/1.1\r\nHost: {own}\r\nHost: {EVIL}\r\n\r\n".encode()
    assert_misdirected(*raw_exchange(kb_server, twice))


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]"])
def test_h1_dns_rebinding_loopback_names_with_own_port_answered(kb_server: KbServer, name: str) -> None:
    status, _, body = raw_exchange(
        kb_server, raw("GET", "/agent-api/v1/openapi.json", f"{name}:{kb_server.port}")
    )
    assert status == 200 and json.loads(body)["openapi"].startswith("3.")


def test_h1_dns_rebinding_page_mints_no_token(kb_server: KbServer) -> None:
    """The review's attack end to end: nothing is issued, and the token list does not leave the server."""
    before = call(kb_server.endpoint, "GET", "/admin/v1/tokens", state=kb_server.state)["tokens"]
    _, _, tokens = ROUTES[3]
    answer = raw_exchange(
        kb_server,
        raw("POST", "/admin/v1/tokens", f"{EVIL}:{kb_server.port}", tokens, rebinding_headers(kb_server)),
    )
    assert_misdirected(*answer)
    assert b"tok_" not in answer[2]
    assert call(kb_server.endpoint, "GET", "/admin/v1/tokens", state=kb_server.state)["tokens"] == before


@pytest.mark.parametrize(("lengths", "status"), [(("2", "3"), 400), (("2", "2"), 200)])
def test_l5_conflicting_duplicate_content_length_refused(
    kb_server: KbServer, lengths: tuple[str, str], status: int
) -> None:
    """RFC 9112 §6.3: differing Content-Length values make the framing invalid (400, connection closed);
    repeated identical ones are one length."""
    head = f"GET /agent-api/v1/openapi.json HTTP/1.1\r\nHost: 127.0.0.1:{kb_server.port}\r\n"
    request = (head + "".join(f"Content-Length: {n}\r\n" for n in lengths) + "\r\n{}").encode()
    got, headers, body = raw_exchange(kb_server, request)
    assert got == status and headers["cache-control"] == "no-store"
    if status == 400:
        assert json.loads(body) == {"message": "Bad Request"} and headers["connection"] == "close"


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("depth", [gateway.MAX_EVENT_DEPTH + 1, 900, 5000, 100_000])
def test_l2_deep_json_invoke_is_a_typed_400(kb_server: KbServer, depth: int) -> None:
    """L2: a deeply nested Invoke API payload is refused in words; the gateway thread never meets a
    RecursionError (it answered nothing before), and the next request is served."""
    response = kb_server.request(
        "POST", "/2015-03-31/functions/SearchFunction/invocations", raw_body=nested(depth)
    )
    assert response.status == 400 and response.headers["x-amzn-errortype"] == "InvalidRequestContentException"
    assert response.headers["cache-control"] == "no-store"
    assert set(response.json) == {"Type", "Message"}
    assert kb_server.knowledge("demo", "capabilities").status == 200


def test_l2_too_deep_counts_nesting_without_recursion() -> None:
    assert not gateway.too_deep(json.loads(nested(gateway.MAX_EVENT_DEPTH)), gateway.MAX_EVENT_DEPTH)
    assert gateway.too_deep(json.loads(nested(gateway.MAX_EVENT_DEPTH + 1)), gateway.MAX_EVENT_DEPTH)
    assert gateway.too_deep([[1], [[[[2]]]]], 4) and not gateway.too_deep([[1], [[[2]]]], 4)
    assert not gateway.too_deep({"version": "2.0", "body": "[[[[[[" * 100}, 2)


@pytest.mark.parametrize("doc_id", ["..%2F..%2Fetc", "a%0Ab", "a" * 201, "-x", "%E6%96%87"])
@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_l1_admin_invalid_doc_id_is_a_typed_400(kb_server: KbServer, doc_id: str, method: str) -> None:
    """L1: an id outside DOC_ID_PATTERN is a 400 naming doc_id on every document route, never a 500."""
    body = {"title": "t", "body": "x", "acl": {"tenant": "demo"}}
    response = kb_server.request(method, f"/admin/v1/sources/demo-docs@1.0.0/documents/{doc_id}", body)
    assert response.status == 400 and response.headers["cache-control"] == "no-store"
    assert response.json["error"]["code"] == "invalid_request"
    assert response.json["error"]["message"].startswith("doc_id:")
    assert "etc" not in response.json["error"]["message"]


# --- L4: one deadline per request, on a gateway in this process (short deadline) ------------------------


class _Answering:
    """A function runner answering every event with an empty 200 (the gateway is the subject here)."""

    def __init__(self) -> None:
        self.functions = gateway.Handlers().functions

    def resolve(self, name: str) -> Any:
        return next(fn for fn in self.functions.values() if name in (fn.logical_id, fn.short_name))

    def invoke(self, name: str, event: Any) -> Any:
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": "{}"}


@pytest.fixture
def short_deadline_gateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr(gateway, "REQUEST_DEADLINE_S", 2.0)
    server = gateway.make_server("127.0.0.1", 0, gateway.LocalGateway(_Answering()))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def closed_while_trickling(port: int, prefix: bytes, drip: bytes, every_s: float = 0.25) -> float | None:
    """Send `prefix`, then `drip` one byte every `every_s`; the seconds until the server closed the
    connection without answering (None if it never did, or answered)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(prefix)
        started = time.monotonic()
        for byte in drip:
            time.sleep(every_s)
            try:
                sock.sendall(bytes([byte]))
                sock.setblocking(False)
                try:
                    if sock.recv(65536) == b"":
                        return time.monotonic() - started
                    return None  # an answer: not what a trickled, incomplete request should get
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
            except OSError:  # reset by the server
                return time.monotonic() - started
    return None


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_l4_trickling_client_dropped_at_request_deadline(short_deadline_gateway: int, phase: str) -> None:
    """L4: a byte every 0.25 s never trips the 30 s read timeout, yet the request is dropped once its total
    deadline (2 s here) has passed, in the headers or in the body, with no answer."""
    port = short_deadline_gateway
    head = f"POST {SEARCH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 400\r\n".encode()
    if phase == "headers":
        closed_after = closed_while_trickling(port, b"", head + b"X-Slow: " + b"a" * 40)
    else:
        closed_after = closed_while_trickling(port, head + b"\r\n", b" " * 40)
    assert closed_after is not None and 1.5 < closed_after < 4.0
    assert (
        raw_exchange_port(
            port, f"GET /agent-api/v1/openapi.json HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        )
        == 200
    )


def raw_exchange_port(port: int, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return int(sock.recv(65536).split(b" ", 2)[1])


def test_g_local_a_client_that_resets_its_connection_is_no_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`curl -f` on an error status resets its keep-alive connection: `kb serve` used to print a Python
    traceback for it (socketserver's default). A client going away is now silent; any other error still
    reaches the terminal."""
    server = gateway._Server.__new__(gateway._Server)  # no socket: only its error handling is under test
    for gone in (ConnectionResetError(104, "reset"), BrokenPipeError(32, "pipe")):
        try:
            raise gone
        except OSError:
            server.handle_error(None, ("127.0.0.1", 1))
    assert capsys.readouterr().err == ""
    try:
        raise ValueError("a bug")
    except ValueError:
        server.handle_error(None, ("127.0.0.1", 1))
    assert "ValueError: a bug" in capsys.readouterr().err


# --- G-LOCAL: loopback is not an identity (the local operator credential) -----------------------------

OPERATOR_DOORS = [
    ("GET", "/admin/v1/tokens", None),
    ("POST", "/admin/v1/tokens", {"routes": ["demo"], "client_id": "op", "subject": "u", "tenant": "x"}),
    ("POST", "/2015-03-31/functions/AgentToolsFunction/invocations", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), OPERATOR_DOORS)
def test_g_local_admin_and_invoke_api_need_the_operator_credential(
    kb_server: KbServer, method: str, path: str, body: object
) -> None:
    """G-LOCAL: any local user reaches kb serve's loopback port, so the admin API and the Invoke API answer
    only with the operator credential kept 0600 in --state: none or a wrong one is a typed 401."""
    before = kb_server.request("GET", "/admin/v1/tokens").json["tokens"]
    for headers in ({}, {"X-Kb-Operator": "wrong"}, {"X-Kb-Operator": ""}):
        answer = raw_exchange(
            kb_server,
            raw(
                method,
                path,
                f"127.0.0.1:{kb_server.port}",
                json.dumps(body).encode() if body else b"",
                headers,
            ),
        )
        status, response_headers, payload = answer
        assert status == 401 and response_headers["cache-control"] == "no-store", payload
        assert json.loads(payload)["error"]["code"] == "unauthorized"
        assert kb_server.operator.encode() not in payload
    assert kb_server.request("GET", "/admin/v1/tokens").json["tokens"] == before  # nothing was issued
    assert kb_server.request(method, path, body).status in (200, 201)  # the credential opens it


def test_g_local_operator_credential_is_0600_and_printed_only_in_the_console_url(kb_server: KbServer) -> None:
    """G-LOCAL: the credential file is owner-only, the console URL kb serve prints carries it in the
    fragment, and no request line kb serve logs holds it."""
    path = kb_server.state / "operator-credential"
    assert path.stat().st_mode & 0o777 == 0o600 and kb_server.state.stat().st_mode & 0o777 == 0o700
    log = (kb_server.state / "serve.log").read_text()
    console = [line for line in log.splitlines() if line.startswith("console: ")]
    assert len(console) == 1 and f"/console/#operator={kb_server.operator} " in console[0]
    assert kb_server.request("GET", "/admin/v1/tokens").status == 200
    assert sum(kb_server.operator in line for line in log.splitlines()) == 1


def test_g_local_a_directory_outside_the_ingest_roots_is_refused(kb_server: KbServer, tmp_path) -> None:
    """G-LOCAL, I-INGEST: kb serve reads a directory job only under its --ingest-root directories (here the
    test session's temporary directory): a root-only directory elsewhere is a typed 403 naming `directory`."""
    import tempfile

    with tempfile.TemporaryDirectory(dir="/var/tmp") as outside:
        (tmp_path / "secret.md").write_text("# Inside\nreadable", encoding="utf-8")
        refused = kb_server.request(
            "POST",
            "/admin/v1/sources/demo-docs@1.0.0/ingestion-jobs",
            {"directory": outside, "acl": {"tenant": "default"}},
        )
        assert refused.status == 403, refused.raw
        assert refused.json["error"]["code"] == "forbidden"
        assert (
            refused.json["error"]["message"].startswith("directory:") and outside not in refused.raw.decode()
        )
    inside = kb_server.request(
        "POST",
        "/admin/v1/sources/demo-docs@1.0.0/ingestion-jobs",
        {"directory": str(tmp_path), "doc_id_prefix": "oproot", "acl": {"tenant": "default"}},
    )
    assert inside.status == 202, inside.raw

"""S10: `kb serve`'s gateway behaves like API Gateway at its edges — typed JSON errors with
`Cache-Control: no-store` for what it refuses itself, a 10 MB body cap, a read timeout, no raw exception
text from the Invoke API, and route names that must match the route pattern."""

from __future__ import annotations

import json
import socket

import pytest

from kb_cli.gateway import MAX_BODY_BYTES
from tests.e2e.conftest import KbServer

SEARCH = "/agent-api/v1/workspaces/demo/knowledge/search"


def raw_exchange(
    server: KbServer, request: bytes, timeout: float = 10.0, *, no_body: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are; read one response (status, lower-cased headers, body; none for HEAD)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = 0 if no_body else int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return status, headers, body


def request_bytes(method: str, path: str, headers: dict[str, str], body: bytes = b"", *, port: int) -> bytes:
    """A request as a client sends it: `Host` names the server with its port (G-LOCAL refuses others)."""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@pytest.mark.parametrize(("length", "status"), [("-1", 400), ("abc", 400), (str(MAX_BODY_BYTES + 1), 413)])
def test_S10_bad_or_huge_content_length_is_a_typed_refusal_at_once(
    kb_server: KbServer, length: str, status: int
) -> None:
    got, headers, body = raw_exchange(
        kb_server,
        request_bytes(
            "POST",
            SEARCH,
            {"Authorization": f"Bearer {kb_server.token}", "Content-Length": length},
            port=kb_server.port,
        ),
    )
    assert got == status
    assert headers["content-type"] == "application/json" and headers["cache-control"] == "no-store"
    assert set(json.loads(body)) == {"message"}


def test_S10_chunked_body_needs_a_length(kb_server: KbServer) -> None:
    got, headers, _ = raw_exchange(
        kb_server,
        request_bytes("POST", SEARCH, {"Transfer-Encoding": "chunked"}, b"0\r\n\r\n", port=kb_server.port),
    )
    assert got == 411 and headers["cache-control"] == "no-store"


@pytest.mark.parametrize("method", ["OPTIONS", "HEAD", "TRACE", "BREW"])
def test_S10_other_methods_get_json_with_no_store(kb_server: KbServer, method: str) -> None:
    got, headers, body = raw_exchange(
        kb_server,
        request_bytes(method, SEARCH, {"Content-Length": "0"}, port=kb_server.port),
        no_body=method == "HEAD",
    )
    assert got == 405 and headers["allow"] == "POST"  # a known path: 405 naming its methods (ST204)
    assert headers["content-type"] == "application/json" and headers["cache-control"] == "no-store"
    if method != "HEAD":  # the gateway's own refusal, or the typed error of the catch-all route
        assert set(json.loads(body)) in ({"message"}, {"error"})


def test_S10_gateway_own_404_and_403_carry_no_store(kb_server: KbServer) -> None:
    unknown = kb_server.request("GET", "/nowhere")
    assert unknown.status == 404 and unknown.headers["cache-control"] == "no-store"


def test_S10_invoke_api_never_returns_exception_text(kb_server: KbServer) -> None:
    broken = kb_server.request("POST", "/2015-03-31/functions/SearchFunction/invocations", {"version": "2.0"})
    assert broken.status == 200 and broken.headers.get("x-amz-function-error") == "Unhandled"
    payload = broken.json
    assert payload["errorMessage"] == "the function failed (details in kb serve's log)"
    assert "requestContext" not in broken.raw.decode()


@pytest.mark.parametrize("route", ["demo%2F..", "Demo", "-x", "a" * 64, "%E7%BD%91"])
def test_S10_admin_rejects_route_names_outside_the_pattern(kb_server: KbServer, route: str) -> None:
    response = kb_server.request("PUT", f"/admin/v1/workspaces/{route}", {"agent": "demo-agent@1.0.0"})
    assert response.status == 400 and response.json["error"]["code"] == "invalid_request"
    assert response.json["error"]["message"].startswith("route:")


def test_S10_a_client_that_stops_sending_is_dropped(
    kb_server: KbServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read timeout frees the thread: a body promised but never sent ends in a closed connection."""
    from kb_cli import gateway

    with socket.create_connection(("127.0.0.1", kb_server.port), timeout=gateway.READ_TIMEOUT_S + 15) as sock:
        sock.sendall(request_bytes("POST", SEARCH, {"Content-Length": "100"}, b"{", port=kb_server.port))
        assert sock.recv(65536) == b""  # closed by the server after its read timeout, no answer
    assert kb_server.knowledge("demo", "capabilities").status == 200

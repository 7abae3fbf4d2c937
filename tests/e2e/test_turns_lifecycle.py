"""A-TURN / A-REF / R-ADMIN end to end: turns, runs and the document/source lifecycle over HTTP through
`kb serve` (a subprocess on a free loopback port with its own state), driven by raw HTTP, the `kb` CLI and
the knowledge_client host library."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from knowledge_client import HttpResponse, KnowledgeClient, TransportError, UrllibTransport
from tests.e2e.conftest import running_kb_serve

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_kb_serve(tmp_path_factory.mktemp("kb-state")) as kb, pytest.MonkeyPatch.context() as env:
        env.setenv("KB_STATE", str(kb.state))  # the kb CLI reads this server's operator credential there
        yield kb.endpoint, kb.token, kb.state


def call(endpoint: str, method: str, path: str, body: object = None, token: str | None = None):
    data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(endpoint + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null"), dict(exc.headers)


def kb(endpoint: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kb_cli.main", *args, "--endpoint", endpoint],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ws(route: str, tail: str) -> str:
    return f"/agent-api/v1/workspaces/{route}/{tail}"


def code(body: dict) -> str:
    return body["error"]["code"]


# --- turns ------------------------------------------------------------------------------------------


def test_a_turn_http_modes_validation_and_no_store(server):
    endpoint, token, _ = server
    status, inline, headers = call(
        endpoint,
        "POST",
        ws("demo", "turns"),
        {"turn_id": "e2e-inline", "message": "网关离线怎么排查？"},
        token,
    )
    assert status == 200 and headers.get("Cache-Control") == "no-store"
    assert inline["schema"] == "bailing.agent-turn.v1" and inline["context"]["knowledge"]
    assert "knowledge_delivery" not in inline
    status, od, _ = call(
        endpoint,
        "POST",
        ws("demo", "turns"),
        {"turn_id": "e2e-od", "message": "网关离线怎么排查？", "knowledge_delivery": "on_demand"},
        token,
    )
    assert status == 200 and od["context"]["knowledge"] == [] and od["context"]["knowledge_refs"] == []
    assert od["knowledge_delivery"]["mode"] == "on_demand" and od["knowledge_delivery"]["status"] == "ok"
    assert od["context"]["instructions"] == inline["context"]["instructions"]
    status, err, headers = call(
        endpoint,
        "POST",
        ws("demo", "turns"),
        {"turn_id": "e2e-bad", "message": "x", "knowledge_delivery": "hint"},
        token,
    )
    assert (
        status == 400 and code(err) == "invalid_request" and "knowledge_delivery" in err["error"]["message"]
    )
    assert headers.get("Cache-Control") == "no-store"
    status, err, _ = call(
        endpoint, "POST", ws("demo", "turns"), {"turn_id": "e2e-od", "message": "网关离线怎么排查？"}, token
    )
    assert status == 409 and code(err) == "turn_conflict"  # same turn, mode switched
    assert (
        call(endpoint, "POST", ws("demo", "turns"), {"turn_id": "x", "message": "x"}, "kbt_bogus")[0] == 401
    )


def test_a_turn_retry_after_a_dropped_response_returns_the_same_run(server):
    endpoint, token, _ = server
    body = json.dumps({"turn_id": "e2e-dropped", "message": "网关离线怎么排查？"}).encode()
    host, port = endpoint.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request(
        "POST",
        ws("demo", "turns"),
        body=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    conn.sock.shutdown(socket.SHUT_RDWR)  # the host never sees this response
    conn.close()
    first = call(endpoint, "POST", ws("demo", "turns"), json.loads(body), token)
    again = call(endpoint, "POST", ws("demo", "turns"), json.loads(body), token)
    assert first[0] == again[0] == 200 and first[1] == again[1]
    run_id = first[1]["run_id"]
    assert (
        call(endpoint, "POST", ws("demo", "knowledge/search"), {"query": "网关", "run_id": run_id}, token)[0]
        == 200
    )


def test_a_turn_concurrent_identical_turns_make_one_run(server):
    endpoint, token, _ = server
    body = {
        "turn_id": "e2e-race",
        "message": "How do I rotate device credentials?",
        "knowledge_delivery": "on_demand",
    }
    out: list[tuple] = []
    threads = [
        threading.Thread(target=lambda: out.append(call(endpoint, "POST", ws("demo", "turns"), body, token)))
        for _ in range(5)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s for s, *_ in out] == [200] * 5
    assert len({json.dumps(b, sort_keys=True) for _, b, _ in out}) == 1


def test_a_turn_run_checks_and_kb_run_end(server):
    endpoint, token, _ = server
    _, turn, _ = call(
        endpoint, "POST", ws("demo", "turns"), {"turn_id": "e2e-run", "message": "网关离线"}, token
    )
    run_id = turn["run_id"]
    other = kb(
        endpoint,
        "token",
        "issue",
        "--route",
        "demo",
        "--client",
        "demo-client",
        "--subject",
        "demo-user",
        "--tenant",
        "demo",
        "--session",
        "someone-else",
    )
    assert other.returncode == 0, other.stderr
    other_token = other.stdout.strip()
    status, err, _ = call(
        endpoint, "POST", ws("demo", "knowledge/search"), {"query": "网关", "run_id": run_id}, other_token
    )
    assert status == 404 and code(err) == "run_not_found"
    ref = turn["context"]["knowledge_refs"][0]
    status, err, _ = call(endpoint, "POST", ws("demo", "knowledge/read"), {"ref": ref}, token)
    assert status == 400 and code(err) == "knowledge_reference_invalid"  # minted with the run
    assert (
        call(endpoint, "POST", ws("demo", "knowledge/read"), {"ref": ref, "run_id": run_id}, token)[0] == 200
    )
    done = kb(endpoint, "run", "complete", "--run-id", run_id)
    assert done.returncode == 0 and "completed" in done.stdout
    status, err, _ = call(
        endpoint, "POST", ws("demo", "knowledge/read"), {"ref": ref, "run_id": run_id}, token
    )
    assert status == 409 and code(err) == "run_not_ready"
    status, err, _ = call(
        endpoint,
        "POST",
        ws("demo", "turns"),
        {"turn_id": "e2e-run-2", "message": "x", "run_id": run_id},
        token,
    )
    assert status == 409 and code(err) == "run_not_ready"
    assert kb(endpoint, "run", "cancel", "--run-id", run_id).returncode == 1  # already ended
    _, turn2, _ = call(
        endpoint, "POST", ws("demo", "turns"), {"turn_id": "e2e-run-3", "message": "网关"}, token
    )
    assert kb(endpoint, "run", "cancel", "--run-id", turn2["run_id"]).returncode == 0
    status, err, _ = call(
        endpoint, "POST", ws("demo", "knowledge/search"), {"query": "网关", "run_id": turn2["run_id"]}, token
    )
    assert status == 409 and code(err) == "run_not_ready"


# --- lifecycle through the kb CLI ------------------------------------------------------------------


def _publish_lab(endpoint: str, tmp: Path) -> str:
    """Workspace `lab` -> lab-agent@1.0.0 -> lab-docs@1.0.0 with two documents; returns a token."""
    (tmp / "source.json").write_text(
        json.dumps({"id": "lab-docs", "version": "1.0.0", "description": "lab manuals", "tags": ["lab"]})
    )
    agent = {
        "id": "lab-agent",
        "version": "1.0.0",
        "systemPrompt": "lab v1",
        "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
        "allowedKnowledge": [{"id": "lab-docs", "version": "1.0.0"}],
    }
    (tmp / "agent1.json").write_text(json.dumps(agent))
    (tmp / "agent2.json").write_text(json.dumps({**agent, "version": "2.0.0", "systemPrompt": "lab v2"}))
    (tmp / "pump.md").write_text("# Pump calibration\n\nCalibrate the centrifuge pump every 30 days. " * 20)
    (tmp / "valve.md").write_text("# Valve maintenance\n\nThe centrifuge valve must be greased weekly. " * 20)
    for args in (
        ["publish", "source", str(tmp / "source.json")],
        ["publish", "agent", str(tmp / "agent1.json")],
        ["publish", "agent", str(tmp / "agent2.json")],
        ["workspace", "set", "lab", "--agent", "lab-agent@1.0.0"],
        ["ingest", "--tenant", "lab", "--source", "lab-docs@1.0.0", "--doc-id", "pump", str(tmp / "pump.md")],
        [
            "ingest",
            "--tenant",
            "lab",
            "--source",
            "lab-docs@1.0.0",
            "--doc-id",
            "valve",
            str(tmp / "valve.md"),
        ],
    ):
        done = kb(endpoint, *args)
        assert done.returncode == 0, (args, done.stderr)
    issued = kb(endpoint, "token", "issue", "--route", "lab", "--tenant", "lab")
    assert issued.returncode == 0, issued.stderr
    return issued.stdout.strip()


def _hints(endpoint: str, token: str, run_id: str) -> dict[str, dict]:
    status, body, _ = call(
        endpoint, "POST", ws("lab", "knowledge/search"), {"query": "centrifuge", "run_id": run_id}, token
    )
    assert status == 200, body
    return {h["title"]: h for h in body["hints"]}


def _read(endpoint: str, token: str, ref: str, run_id: str) -> tuple[int, dict]:
    status, body, _ = call(
        endpoint, "POST", ws("lab", "knowledge/read"), {"ref": ref, "run_id": run_id}, token
    )
    return status, body


def test_r_admin_lifecycle_via_kb_cli(server, tmp_path):
    endpoint, _, _ = server
    token = _publish_lab(endpoint, tmp_path)
    _, turn, _ = call(
        endpoint,
        "POST",
        ws("lab", "turns"),
        {"turn_id": "lab-1", "message": "centrifuge", "knowledge_delivery": "on_demand"},
        token,
    )
    run_id = turn["run_id"]
    hints = _hints(endpoint, token, run_id)
    assert set(hints) == {"Pump calibration", "Valve maintenance"}
    pump, valve = hints["Pump calibration"]["ref"], hints["Valve maintenance"]["ref"]
    assert _read(endpoint, token, pump, run_id)[0] == 200

    # kb doc disable / enable: disabled -> 409 knowledge_changed; enabled again -> the same revision reads.
    assert kb(endpoint, "doc", "disable", "--source", "lab-docs@1.0.0", "--doc-id", "pump").returncode == 0
    status, err = _read(endpoint, token, pump, run_id)
    assert status == 409 and code(err) == "knowledge_changed"
    assert "Pump calibration" not in _hints(endpoint, token, run_id)
    assert kb(endpoint, "doc", "enable", "--source", "lab-docs@1.0.0", "--doc-id", "pump").returncode == 0
    assert _read(endpoint, token, pump, run_id)[0] == 200

    # kb ingest replace -> 409 knowledge_changed for the old ref; a new search reads the new body.
    (tmp_path / "pump.md").write_text("# Pump calibration\n\nCalibrate the centrifuge pump every 14 days.")
    assert (
        kb(
            endpoint,
            "ingest",
            "--tenant",
            "lab",
            "--source",
            "lab-docs@1.0.0",
            "--doc-id",
            "pump",
            str(tmp_path / "pump.md"),
        ).returncode
        == 0
    )
    status, err = _read(endpoint, token, pump, run_id)
    assert status == 409 and code(err) == "knowledge_changed"
    fresh = _hints(endpoint, token, run_id)["Pump calibration"]["ref"]
    status, page = _read(endpoint, token, fresh, run_id)
    assert status == 200 and "14 days" in page["content"]

    # kb doc delete -> 409 knowledge_changed.
    assert kb(endpoint, "doc", "delete", "--source", "lab-docs@1.0.0", "--doc-id", "pump").returncode == 0
    status, err = _read(endpoint, token, fresh, run_id)
    assert status == 409 and code(err) == "knowledge_changed"

    # kb workspace set (upgrade, then rollback) -> the scope changed under old refs.
    assert kb(endpoint, "workspace", "set", "lab", "--agent", "lab-agent@2.0.0").returncode == 0
    _, turn2, _ = call(
        endpoint, "POST", ws("lab", "turns"), {"turn_id": "lab-2", "message": "centrifuge valve"}, token
    )
    assert turn2["context"]["instructions"] == "lab v2"
    v2_ref = turn2["context"]["knowledge_refs"][0]
    assert kb(endpoint, "workspace", "set", "lab", "--agent", "lab-agent@1.0.0").returncode == 0
    status, err = _read(endpoint, token, v2_ref, turn2["run_id"])
    assert status == 409 and code(err) == "knowledge_scope_changed"
    status, err = _read(endpoint, token, valve, run_id)  # minted under v1, which is current again
    assert status == 200

    # kb source disable -> 409 knowledge_scope_changed; no source left -> disabled everywhere.
    assert kb(endpoint, "source", "disable", "--source", "lab-docs@1.0.0").returncode == 0
    status, err = _read(endpoint, token, valve, run_id)
    assert status == 409 and code(err) == "knowledge_scope_changed"
    _, caps, _ = call(endpoint, "GET", ws("lab", "knowledge/capabilities"), token=token)
    assert caps["enabled"] is False
    _, found, _ = call(endpoint, "POST", ws("lab", "knowledge/search"), {"query": "centrifuge"}, token)
    assert found["status"] == "disabled" and found["hints"] == []
    _, turn3, _ = call(
        endpoint,
        "POST",
        ws("lab", "turns"),
        {"turn_id": "lab-3", "message": "centrifuge", "knowledge_delivery": "on_demand"},
        token,
    )
    assert turn3["knowledge_delivery"]["status"] == "disabled"
    assert kb(endpoint, "source", "enable", "--source", "lab-docs@1.0.0").returncode == 0
    _, caps, _ = call(endpoint, "GET", ws("lab", "knowledge/capabilities"), token=token)
    assert caps["enabled"] is True


# --- a host using knowledge_client ----------------------------------------------------------------


class DropFirstTurnResponse:
    """Real HTTP; the first turn response is lost after the server produced it (and is kept for the test)."""

    def __init__(self) -> None:
        self.inner = UrllibTransport()
        self.lost: list[HttpResponse] = []
        self.turn_posts = 0

    def __call__(self, method, url, headers, body, timeout):
        resp = self.inner(method, url, headers, body, timeout)
        if url.endswith("/turns"):
            self.turn_posts += 1
            if not self.lost:
                self.lost.append(resp)
                raise TransportError("connection reset while reading the response")
        return resp


def test_a_turn_host_client_end_to_end(server, tmp_path):
    endpoint, demo_token, _ = server
    (tmp_path / "src.json").write_text(
        json.dumps({"id": "host-docs", "version": "1.0.0", "description": "host"})
    )
    (tmp_path / "agent.json").write_text(
        json.dumps(
            {
                "id": "host-agent",
                "version": "1.0.0",
                "systemPrompt": "host agent",
                "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
                "allowedKnowledge": [{"id": "host-docs", "version": "1.0.0"}],
            }
        )
    )
    (tmp_path / "a.md").write_text("# Boiler start\n\nOpen the boiler feed valve before ignition. " * 40)
    (tmp_path / "b.md").write_text("# Boiler stop\n\nClose the boiler burner first, then the feed. " * 40)
    for args in (
        ["publish", "source", str(tmp_path / "src.json")],
        ["publish", "agent", str(tmp_path / "agent.json")],
        ["workspace", "set", "host", "--agent", "host-agent@1.0.0"],
        ["ingest", "--source", "host-docs@1.0.0", "--doc-id", "start", str(tmp_path / "a.md")],
        ["ingest", "--source", "host-docs@1.0.0", "--doc-id", "stop", str(tmp_path / "b.md")],
    ):
        assert kb(endpoint, *args).returncode == 0, args
    token = kb(endpoint, "token", "issue", "--route", "host").stdout.strip()

    transport = DropFirstTurnResponse()
    client = KnowledgeClient(endpoint, "host", token, transport=transport, retry_pause=0.05)
    assert client.negotiate().on_demand
    turn = client.start_turn("boiler", turn_id="host-turn-1")
    assert turn.mode == "on_demand" and turn.instructions == "host agent" and turn.knowledge == []
    assert transport.turn_posts == 2
    assert json.loads(transport.lost[0].body)["run_id"] == turn.run_id  # the retry got the stored response

    found = client.call_tool("search_knowledge", {"query": "boiler"})
    assert found["status"] == "ok" and len(found["hints"]) == 2
    by_title = {h["title"]: h["ref"] for h in found["hints"]}
    text, last = client.read_all(by_title["Boiler start"], max_bytes=4096)
    assert text.startswith("Open the boiler feed valve") and last["next_cursor"] is None

    # Document replaced -> knowledge_changed; source disabled -> knowledge_scope_changed.
    (tmp_path / "a.md").write_text("# Boiler start\n\nNew procedure.")
    assert (
        kb(
            endpoint, "ingest", "--source", "host-docs@1.0.0", "--doc-id", "start", str(tmp_path / "a.md")
        ).returncode
        == 0
    )
    changed = client.call_tool("read_knowledge", {"ref": by_title["Boiler start"]})
    assert changed["error"]["code"] == "knowledge_changed"
    assert kb(endpoint, "source", "disable", "--source", "host-docs@1.0.0").returncode == 0
    scope = client.call_tool("read_knowledge", {"ref": by_title["Boiler stop"]})
    assert scope["error"]["code"] == "knowledge_scope_changed"
    assert client.call_tool("search_knowledge", {"query": "boiler"})["status"] == "disabled"
    next_turn = client.start_turn("boiler again")
    assert next_turn.status == "disabled" and next_turn.run_id != turn.run_id
    assert demo_token  # the demo workspace is untouched by this test

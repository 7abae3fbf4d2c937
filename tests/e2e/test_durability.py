"""The embedded default keeps what it is given (issue: embedded state): `kb serve` restarted on the same
`--state` answers exactly as before — tokens, published sources and agents, workspaces, documents, runs,
turn records and budget ledgers (R-BUDGET, A-TURN, R-ADMIN) — and a `kill -9` in the middle of tool calls
and an ingest loses no committed write and leaves no partial charge; bad state files stop it with one
clear line. Also: concurrent requests of several identities never see one another's request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite.driver import sqlite3

from tests.e2e.conftest import (
    KB,
    ROOT,
    START_TIMEOUT_S,
    KbServer,
    free_port,
    index_integrity,
    running_kb_serve,
)

INVOKE = "/2015-03-31/functions/AgentToolsFunction/invocations"
EVENT = json.loads((ROOT / "events" / "agent_tools" / "knowledge_search.json").read_text(encoding="utf-8"))


def tool_event(root: str, child: str, query: str = "设备安装规范") -> dict:
    """The example two-ancestor event, on a root tree of our own."""
    event = json.loads(json.dumps(EVENT))
    inv = event["invocation"]
    inv["ancestors"] = [{"invocation_id": root, "agent": "demo-agent@1.0.0"}]
    inv["invocation_id"] = child
    event["arguments"]["query"] = query
    return event


def fused(result: dict) -> dict:
    return next(e for e in result["events"] if e["type"] == "knowledge.fused")


def test_restart_keeps_tokens_registry_documents_runs_turns_and_ledgers(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    term = f"zz{uuid.uuid4().hex[:8]}"
    source = {"id": "durable", "version": "1.0.0", "description": f"durable notes {term}"}
    agent = {
        "id": "durable-agent",
        "version": "1.0.0",
        "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
        "allowedKnowledge": [{"id": "durable", "version": "1.0.0"}],
    }
    (tmp_path / "source.json").write_text(json.dumps(source))
    (tmp_path / "agent.json").write_text(json.dumps(agent))
    (tmp_path / "note.md").write_text(f"# Durable note\n\nThe {term} valve is checked weekly.\n")
    turn_body = {"turn_id": "t-durable", "message": "网关离线怎么排查？"}
    with running_kb_serve(state) as kb:
        demo_token = kb.token
        for step in (
            ("publish", "source", str(tmp_path / "source.json")),
            ("publish", "agent", str(tmp_path / "agent.json")),
            ("workspace", "set", "durable", "--agent", "durable-agent@1.0.0"),
            ("ingest", "--source", "durable@1.0.0", "--doc-id", "note", str(tmp_path / "note.md")),
        ):
            assert kb.kb(*step).returncode == 0, step
        issued = kb.kb("token", "issue", "--route", "durable", "--subject", "dora", "--ttl", "3600")
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip()
        before = kb.knowledge("durable", "search", {"query": term}, token=token)
        assert before.status == 200 and [h["title"] for h in before.json["hints"]] == ["Durable note"]
        turn = kb.request("POST", "/agent-api/v1/workspaces/demo/turns", turn_body, kb.token)
        assert turn.status == 200, turn.raw
        first_call = kb.request("POST", INVOKE, tool_event("dur-root", "dur-child")).json
        assert first_call.get("references"), first_call
        spent = fused(first_call)

    with running_kb_serve(state) as kb:
        assert kb.token == demo_token  # the demo token is kept, not reissued
        after = kb.knowledge("durable", "search", {"query": term}, token=token)
        assert after.status == 200
        assert [(h["title"], h["revision"]) for h in after.json["hints"]] == [
            (h["title"], h["revision"]) for h in before.json["hints"]
        ]
        page = kb.knowledge("durable", "read", {"ref": after.json["hints"][0]["ref"]}, token=token)
        assert page.status == 200 and term in page.json["content"]
        # The turn record answers the replay with the stored response; its run is still ready.
        again = kb.request("POST", "/agent-api/v1/workspaces/demo/turns", turn_body, kb.token)
        assert again.status == 200 and again.json == turn.json
        run_id = turn.json["run_id"]
        in_run = kb.knowledge("demo", "search", {"query": "网关离线", "run_id": run_id})
        assert in_run.status == 200 and in_run.json["run_id"] == run_id
        # The ledger remembers the tree: the same invocation spends on from where it was.
        second_call = kb.request("POST", INVOKE, tool_event("dur-root", "dur-child", "网关离线")).json
        assert fused(second_call)["retrievalsUsed"] == spent["retrievalsUsed"] + 1
        assert fused(second_call)["charsUsed"] >= spent["charsUsed"]
        # Published versions are still there (identical re-publish is a no-op).
        republish = kb.kb("publish", "source", str(tmp_path / "source.json"))
        assert republish.returncode == 0 and "already published" in republish.stdout


@contextmanager
def own_group_kb_serve(state: Path) -> Iterator[tuple[KbServer, subprocess.Popen]]:
    """`kb serve` in a process group of its own, so that a test can SIGKILL it and all its workers; its
    directory jobs may read under the state's parent (the test's temporary directory: its corpora)."""
    port = free_port()
    log_path = state / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [*KB, "serve", "--state", str(state), "--port", str(port), "--ingest-root", str(state.parent)],
            cwd=ROOT,
            env={**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while "listening on" not in log_path.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.1)
            token = (state / "demo-token").read_text().strip()
            yield KbServer(f"http://127.0.0.1:{port}", port, token, state), proc
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _committed_trees(state: Path, prefix: str) -> int:
    try:
        with sqlite3.connect(state / "state.sqlite3", timeout=5) as conn:
            return conn.execute(
                "SELECT count(DISTINCT root_id) FROM ledger_entries WHERE root_id LIKE ?", (prefix + "-%",)
            ).fetchone()[0]
    except sqlite3.Error:
        return 0


def test_kill_9_mid_tool_calls_and_ingest_loses_no_commit_and_charges_nothing_partially(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(300):
        (docs / f"d{i:03}.md").write_text(f"# Crash note {i}\n\n" + f"crash {i} recovery text. " * 100)
    root = "crash-root"
    with own_group_kb_serve(state) as (kb, proc):
        stop = threading.Event()

        def tool_calls(n: int) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                try:  # a new tree each call: every call charges and cites (no budget runs out)
                    kb.request("POST", INVOKE, tool_event(f"{root}-{n}-{i}", f"child-{n}-{i}", f"安装 {i}"))
                except OSError:
                    return

        ingest = subprocess.Popen(
            [
                *KB,
                "ingest",
                "--source",
                "demo-docs@1.0.0",
                "--doc-id",
                "crash",
                str(docs),
                "--endpoint",
                kb.endpoint,
            ],
            cwd=ROOT,
            env={**os.environ, "KB_STATE": str(kb.state)},  # the operator credential kb serve keeps there
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        with ThreadPoolExecutor(max_workers=4) as pool:
            for n in range(4):
                pool.submit(tool_calls, n)
            # Kill once tool calls have committed and while they and the ingest are still going.
            deadline = time.monotonic() + 60
            while _committed_trees(state, root) < 20 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.3)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            stop.set()
        ingest.wait(timeout=60)

    # The files agree with themselves: every charge reached the whole chain, every citation its chars.
    with sqlite3.connect(state / "state.sqlite3") as conn:
        entries = conn.execute(
            "SELECT root_id, invocation_id, parent, retrievals, chars FROM ledger_entries "
            "WHERE root_id LIKE ?",
            (root + "-%",),
        ).fetchall()
        cited = dict(
            conn.execute(
                "SELECT root_id, sum(length(content)) FROM ledger_citations "
                "WHERE root_id LIKE ? GROUP BY root_id",
                (root + "-%",),
            ).fetchall()
        )
    trees: dict[str, list[tuple]] = {}
    for row in entries:
        trees.setdefault(row[0], []).append(row)
    assert len(trees) >= 20, "too few tool calls committed before the kill"
    for tree_root, rows in trees.items():
        [top] = [r for r in rows if r[1] == tree_root]
        children = [r for r in rows if r[2] == tree_root]
        assert len(rows) == 2 and len(children) == 1  # both entries of the chain, or neither
        assert top[3] == children[0][3] == 1  # no partial charge
        assert top[4] == children[0][4] == cited.get(tree_root, 0)  # chars are the citations' own
    ingested, orphans, empty, unindexed = index_integrity(state, "crash")
    assert ingested % 50 == 0  # small uniform files: batches of 50, each all or nothing
    assert orphans == empty == unindexed == 0

    # It starts again on the same files and answers; the registry still has every indexed source.
    with running_kb_serve(state) as kb:
        hints = kb.knowledge("demo", "search", {"query": "网关离线"}).json["hints"]
        assert hints
        result = kb.request("POST", INVOKE, tool_event("after-root", "after-restart")).json
        assert "references" in result, result
        if ingested:
            found = kb.knowledge("demo", "search", {"query": "crash recovery"}).json["hints"]
            assert found and found[0]["title"].startswith("Crash note")


def _serve_once(state: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*KB, "serve", "--state", str(state), "--port", str(free_port()), "--no-demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("corrupt", "cannot be opened as a SQLite database"),
        ("foreign", "is not a file of this service"),
        ("newer", "newer than this kb"),
    ],
)
def test_bad_state_file_stops_kb_serve_with_one_clear_line(tmp_path: Path, how: str, says: str) -> None:
    state_file = tmp_path / "state.sqlite3"
    if how == "corrupt":
        state_file.write_bytes(b"this is not a database" * 100)
    else:
        with sqlite3.connect(state_file) as conn:
            conn.execute("CREATE TABLE notes (x)")
            if how == "newer":
                conn.execute("PRAGMA application_id = 1262637908")  # ours
                conn.execute("PRAGMA user_version = 99")
    before = state_file.read_bytes()
    done = _serve_once(tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(state_file) in lines[0] and says in lines[0], done.stderr
    assert state_file.read_bytes() == before  # never re-seeded over what is there


def test_state_of_an_older_kb_serve_says_what_to_do(tmp_path: Path) -> None:
    """An older kb serve kept its registry in memory: its index holds documents of sources that no
    registry knows any more. The new one says which and what to do, and serves."""
    with sqlite3.connect(tmp_path / "search.sqlite3") as conn:
        conn.execute(
            "CREATE TABLE documents (source_key TEXT NOT NULL, doc_id TEXT NOT NULL, title TEXT NOT NULL, "
            "body TEXT NOT NULL, revision TEXT NOT NULL, status TEXT NOT NULL, acl TEXT NOT NULL, "
            "structured_source TEXT, updated_at REAL NOT NULL, PRIMARY KEY (source_key, doc_id))"
        )
        conn.execute(
            "INSERT INTO documents VALUES ('legacy@1.0.0', 'a', 'A', 'old body', 'r', 'ready', '{}', NULL, 0)"
        )
    with running_kb_serve(tmp_path) as kb:
        log = (tmp_path / "serve.log").read_text()
        assert "legacy@1.0.0" in log and "kb publish source" in log
        assert kb.knowledge("demo", "capabilities").status == 200


def test_concurrent_identities_never_see_each_others_request(kb_server: KbServer) -> None:
    """Lambda-style isolation: many identities at once, each sees its own principal, run and route."""
    identities = []
    for n in range(4):
        issued = kb_server.kb(
            "token", "issue", "--route", "demo", "--client", f"iso-{n}", "--subject", f"u{n}"
        )
        assert issued.returncode == 0, issued.stderr
        token = issued.stdout.strip()
        turn = kb_server.request(
            "POST",
            "/agent-api/v1/workspaces/demo/turns",
            {"turn_id": "iso", "message": "hi", "knowledge_delivery": "on_demand"},
            token,
        )
        assert turn.status == 200, turn.raw
        identities.append((token, turn.json["run_id"]))

    def one(k: int) -> tuple[int, int, str | None]:
        n = k % len(identities)
        token, run_id = identities[n]
        own = kb_server.knowledge("demo", "search", {"query": "网关离线", "run_id": run_id}, token=token)
        other_run = identities[(n + 1) % len(identities)][1]
        other = kb_server.knowledge("demo", "search", {"query": "网关", "run_id": other_run}, token=token)
        return own.status, other.status, own.json.get("run_id")

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, range(64)))
    assert all(own == 200 for own, _, _ in results), results
    assert all(other == 404 for _, other, _ in results), results  # another's run is never theirs
    assert [run for _, _, run in results] == [identities[k % 4][1] for k in range(64)]
    log = (kb_server.state / "serve.log").read_text()
    assert "POST /agent-api/v1/workspaces/demo/knowledge/search 200 " in log  # one line per request
    assert '"level"' not in log  # handler logs and metrics stay behind --verbose


@pytest.mark.integration
@pytest.mark.opensearch
@pytest.mark.dynamodb_local
def test_kb_serve_on_the_real_backends_keeps_state_across_restarts(tmp_path: Path) -> None:
    """`--state-backend dynamodb` + OpenSearch: the same handlers, the same answers, state kept."""
    from tests.contract.conftest import real_endpoints_or_skip

    endpoints = real_endpoints_or_skip()
    args = (
        "--search-backend",
        "opensearch",
        "--opensearch-url",
        endpoints["OPENSEARCH_URL"],
        "--state-backend",
        "dynamodb",
        "--dynamodb-endpoint",
        endpoints["DYNAMODB_ENDPOINT"],
    )
    env = {
        "KB_OPENSEARCH_INDEX_PREFIX": f"kbe-{uuid.uuid4().hex[:8]}",
        "KB_TABLE_NAME": f"kbe-{uuid.uuid4().hex[:8]}",
    }
    with running_kb_serve(tmp_path, args=args, env=env) as kb:
        assert "state: DynamoDB at" in (tmp_path / "serve.log").read_text()
        first = kb.knowledge("demo", "search", {"query": "网关离线怎么排查？"})
        assert first.status == 200 and first.json["hints"], first.raw
        tool = kb.request("POST", INVOKE, tool_event("real-root", "real-child")).json
        assert tool.get("references"), tool
        token = kb.token
    with running_kb_serve(tmp_path, args=args, env=env) as kb:
        assert kb.token == token and "kept" in (tmp_path / "serve.log").read_text()
        again = kb.knowledge("demo", "search", {"query": "网关离线怎么排查？"})
        assert [h["title"] for h in again.json["hints"]] == [h["title"] for h in first.json["hints"]]
        tool = kb.request("POST", INVOKE, tool_event("real-root", "real-child", "网关")).json
        assert fused(tool)["retrievalsUsed"] == 2  # the ledger kept the first call's charge
    from knowledge_core.adapters.opensearch import OpenSearchBackend

    from kb_cli.supervisor import ensure_running  # noqa: F401 - the servers outlive this test

    OpenSearchBackend(
        endpoints["OPENSEARCH_URL"], index_prefix=env["KB_OPENSEARCH_INDEX_PREFIX"]
    ).drop_indices()


def test_r_budget_two_kb_serve_on_one_state_never_overspend(tmp_path: Path) -> None:
    """Two `kb serve` processes share one --state: a root's per-source budget (3 for demo-agent) is spent
    exactly once across both, whatever the interleaving; every refusal is the typed budget error."""
    with running_kb_serve(tmp_path) as first, running_kb_serve(tmp_path, demo=False) as second:
        servers = [first, second]

        def call(n: int) -> dict:
            server = servers[n % 2]
            return server.request("POST", INVOKE, tool_event("shared-root", f"shared-child-{n}")).json

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(call, range(12)))
    granted = [r for r in results if r.get("references")]
    refused = [r for r in results if "error" in r]
    assert len(granted) == 3 and len(refused) == 9, results
    assert {r["error"]["code"] for r in refused} == {"KNOWLEDGE_BUDGET_EXCEEDED"}
    with sqlite3.connect(tmp_path / "state.sqlite3") as conn:
        root = conn.execute(
            "SELECT retrievals, per_source FROM ledger_entries WHERE root_id = ? AND invocation_id = ?",
            ("shared-root", "shared-root"),
        ).fetchone()
        children = conn.execute(
            "SELECT sum(retrievals) FROM ledger_entries WHERE root_id = ? AND parent = ?",
            ("shared-root", "shared-root"),
        ).fetchone()[0]
    assert root[0] == children == 3 and json.loads(root[1]) == {"demo-docs@1.0.0": 3}

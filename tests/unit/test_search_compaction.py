"""I-INGEST, A-SEARCH: the search index is compacted when an ingestion job's writes leave it
fragmented, and an operator sees and starts it through the admin API (`GET /admin/v1/search-indices`,
`POST /admin/v1/search-indices/compact`, `kb search-indices`): typed answers, never a failed job."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from knowledge_core import bootstrap
from knowledge_core.adapters.sqlite import fts_compaction
from knowledge_core.bootstrap import Container
from knowledge_core.domain.errors import SourceFailure
from knowledge_core.domain.models import Document, DocumentAcl, SourceDefinition

from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from tests.conftest import FakeClock, embedded_container
from tests.unit.test_ingestion_jobs import request

SOURCE = "manuals@1.0.0"


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Container:
    monkeypatch.setattr(fts_compaction, "QUIET_S", 3600.0)  # only a job's end or an operator compacts
    container = embedded_container(tmp_path, clock)
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container


def _admin(method: str, path: str) -> dict[str, Any]:
    event = load_event("admin/submit-ingestion-job.json")
    event["routeKey"] = event["requestContext"]["routeKey"] = f"{method} {path}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["body"] = None if method == "GET" else "{}"
    return Handlers().invoke("AdminFunction", event)


def _write_in_batches(c: Container, batches: int) -> None:
    """One FTS5 segment per write (automerge folds some)."""
    for b in range(batches):
        doc = Document(
            source_key=SOURCE,
            doc_id=f"d{b}",
            title=f"Pump {b}",
            body=f"The pump {b} needs its valve checked every {b + 1} weeks.",
            acl=DocumentAcl(tenant="acme"),
        )
        c.backend.put_documents([doc])


def test_a_jobs_end_compacts_a_fragmented_index(c: Container) -> None:
    _write_in_batches(c, 6)
    [state] = c.backend.index_states()
    assert state.fragmented and state.segments > 1
    job = c.ingestion.submit(
        SOURCE, request({"documents": [{"doc_id": "n", "title": "Note", "body": "valve torque"}]})
    )
    assert c.ingestion.work("w") == job.job_id
    assert c.backend._compactor.idle(30)  # type: ignore[attr-defined]
    [state] = c.backend.index_states()
    assert (state.segments, state.fragmented) == (1, False)
    assert c.ingestion.status(SOURCE, job.job_id).state == "completed"


def test_a_compaction_failure_never_fails_the_finished_job(
    c: Container, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[bool] = []

    def down(force: bool = False) -> bool:
        calls.append(force)
        raise SourceFailure("unavailable")

    monkeypatch.setattr(c.backend, "compact", down)
    job = c.ingestion.submit(SOURCE, request({"documents": [{"doc_id": "n", "title": "N", "body": "valve"}]}))
    with caplog.at_level(logging.WARNING):
        c.ingestion.work("w")
    status = c.ingestion.status(SOURCE, job.job_id)
    assert calls == [False] and status.state == "completed" and status.counts.done == 1
    assert "not compacted after a job: unavailable" in caplog.text


def test_admin_routes_show_and_start_a_compaction(c: Container, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_in_batches(c, 2)
    bootstrap.reset(c)
    try:
        listed = _admin("GET", "/admin/v1/search-indices")
        assert listed["statusCode"] == 200
        [index] = json.loads(listed["body"])["indices"]
        assert index["index"] == "passages" and index["segments"] == 2 and index["target_segments"] == 1
        assert set(index) == {
            "index", "shards", "segments", "target_segments", "size_bytes", "fragmented", "merging"
        }  # fmt: skip
        started = _admin("POST", "/admin/v1/search-indices/compact")
        body = json.loads(started["body"])
        assert started["statusCode"] == 202 and body["started"] is True
        assert body["indices"][0]["segments"] == 2  # as they were when it started
        assert c.backend._compactor.idle(30)  # type: ignore[attr-defined]
        again = json.loads(_admin("POST", "/admin/v1/search-indices/compact")["body"])
        assert again["started"] is False and again["indices"][0]["segments"] == 1

        def down() -> list[Any]:
            raise SourceFailure("unavailable")

        monkeypatch.setattr(c.backend, "index_states", down)
        failed = _admin("GET", "/admin/v1/search-indices")
        error = json.loads(failed["body"])["error"]
        assert failed["statusCode"] == 503 and error["code"] == "knowledge_unavailable"
    finally:
        bootstrap.reset(None)


def test_cli_search_indices_status_and_compact(c: Container, capsys: pytest.CaptureFixture[str]) -> None:
    """`kb search-indices` prints the admin listing as a table (or `--json`), and says what compact did."""
    from kb_cli.main import build_parser

    _write_in_batches(c, 2)

    def call(endpoint: str, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        if method == "GET":
            return c.admin.search_indices().model_dump()
        return c.admin.compact_search().model_dump() if path.endswith("/compact") else {"prepared": True}

    def run(*argv: str) -> str:
        args = build_parser().parse_args(["search-indices", *argv])
        assert args.func(args, call) == 0
        return capsys.readouterr().out

    status = run("status").splitlines()
    assert status[0].split() == ["INDEX", "SHARDS", "SEGMENTS", "TARGET", "SIZE", "FRAGMENTED", "MERGING"]
    assert status[1].split()[:4] == ["passages", "1", "2", "1"]
    assert "compaction started in the background" in run("compact")
    assert c.backend._compactor.idle(30)  # type: ignore[attr-defined]
    assert json.loads(run("status", "--json"))["indices"][0]["segments"] == 1
    assert "nothing to compact" in run("compact")
    assert run("prepare").strip() == "search indices prepared"


def test_manual_compaction_leaves_it_to_the_operator(tmp_path: Path, clock: FakeClock) -> None:
    """`KB_SEARCH_COMPACTION=manual` (SAM `SearchCompaction`): neither a job's end, nor quiet writes, nor a
    start compacts; `POST /admin/v1/search-indices/compact` still does."""
    from knowledge_core.settings import Settings

    assert Settings.from_env({"KB_SEARCH_COMPACTION": "manual"}).search_compaction == "manual"
    c = embedded_container(tmp_path, clock, search_compaction="manual")
    c.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    _write_in_batches(c, 6)
    compactor = c.backend._compactor  # type: ignore[attr-defined]
    assert not compactor.busy  # no check scheduled by the writes
    c.backend.warm()
    assert not compactor.busy
    job = c.ingestion.submit(SOURCE, request({"documents": [{"doc_id": "n", "title": "N", "body": "valve"}]}))
    c.ingestion.work("w")
    [state] = c.backend.index_states()
    assert (
        state.fragmented and not state.merging and c.ingestion.status(SOURCE, job.job_id).state == "completed"
    )
    assert c.admin.compact_search().started is True
    assert compactor.idle(30) and c.backend.index_states()[0].segments == 1


def test_cli_compact_wait_returns_once_nothing_merges(
    c: Container, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kb search-indices compact --wait` polls the listing until the merge has ended (exit 0, the listing
    shown) — not merely until a poll shows nothing merging: a merge just asked for may be listed a moment
    later — and gives up after `--timeout` (exit 1, saying so)."""
    from kb_cli.commands import indices
    from kb_cli.main import build_parser

    monkeypatch.setattr(indices.time, "sleep", lambda s: None)
    _write_in_batches(c, 2)
    base = c.admin.search_indices().model_dump()["indices"][0]
    polls = iter(
        [
            {"merging": False, "segments": 2},  # asked for, not listed yet
            {"merging": True, "segments": 2},
            {"merging": False, "segments": 1},
        ]
    )

    def call(endpoint: str, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        if method == "POST":
            return {"started": True, "indices": [base]}
        return {"indices": [{**base, **next(polls)}]}

    args = build_parser().parse_args(["search-indices", "compact", "--wait"])
    assert args.func(args, call) == 0
    assert next(polls, None) is None  # polled until it ended
    out = capsys.readouterr().out
    assert out.strip().endswith("compacted") and out.splitlines()[1].split()[:3] == ["passages", "1", "1"]

    def busy(endpoint: str, method: str, path: str, body: Any = None, headers: Any = None) -> Any:
        if method == "POST":
            return {"started": True, "indices": [base]}
        return {"indices": [{**base, "merging": True}]}

    args = build_parser().parse_args(["search-indices", "compact", "--wait", "--timeout", "0"])
    assert args.func(args, busy) == 1
    assert "still merging after 0 s" in capsys.readouterr().err

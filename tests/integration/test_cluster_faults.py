"""A node of a 3-node OpenSearch cluster killed (SIGKILL) under load (R-FAIL, A-SEARCH, I-INGEST):

* `kb services start --nodes 3` in a state dir of its own (never the shared one): three JVMs on loopback,
  green, every index with one replica;
* during a search load, the node holding the passages' primary shard is killed: every answer is typed
  (200 with `status` ok / partial / unavailable), never a 5xx or an untyped error;
* during an ingestion job, the node holding the primary is killed: the job finishes, and every document
  the job reports done is readable and searchable — nothing acknowledged is lost;
* the node comes back (`kb services start` again): the cluster is green with three nodes and every
  document is searchable.

The adapter is given every node's URL (`OPENSEARCH_NODE_URLS`), so a request to the dead node is retried
on another. Bounded: a fixed number of searches and documents; the module takes 2.5–4 min on this 2-core
machine under load (the cluster ~30 s to boot, ~2.3 GB of heap for its three JVMs). Runs with the integration
tests (`make test`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from knowledge_core import bootstrap
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.models import Viewer
from knowledge_core.ports import QueryAnalysis, SourceQuery
from knowledge_core.services.retrieval import Retrieval
from knowledge_core.settings import Settings

from kb_cli import demo, supervisor
from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from tests.conftest import TEST_SECRET, FakeClock
from tests.contract.conftest import doc, ranked, real_endpoints_or_skip

pytestmark = [
    pytest.mark.integration,
    pytest.mark.opensearch,
    pytest.mark.dynamodb_local,
    pytest.mark.filterwarnings("ignore:No application metrics to publish"),
    pytest.mark.timeout(900),
]
NODES = 3
SEARCHES = 120
JOB_DOCUMENTS = 300
TYPED = {"ok", "partial", "unavailable"}
SOURCE_KEY = f"{demo.SOURCE['id']}@{demo.SOURCE['version']}"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Path, dict[str, str]]]:
    state = Path(tempfile.mkdtemp(prefix="kb-cluster-"))
    saved = os.environ.get("KB_OPENSEARCH_JAVA_OPTS")
    os.environ["KB_OPENSEARCH_JAVA_OPTS"] = "-Xms384m -Xmx768m -XX:+ExitOnOutOfMemoryError"
    try:
        try:
            env = supervisor.start(state, (supervisor.OPENSEARCH,), nodes=NODES)
        except Exception as exc:
            if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
                pytest.fail(f"the {NODES}-node cluster could not start: {exc}")
            pytest.skip(f"the {NODES}-node cluster could not start: {exc}")
        yield state, env
    finally:
        supervisor.stop(state)
        if saved is None:
            os.environ.pop("KB_OPENSEARCH_JAVA_OPTS", None)
        else:
            os.environ["KB_OPENSEARCH_JAVA_OPTS"] = saved
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def world(cluster: tuple[Path, dict[str, str]]) -> Iterator[tuple[Container, FakeClock]]:
    """The demo workspace on the cluster (state in the shared DynamoDB-API server, a table of its own)."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    shared = real_endpoints_or_skip()
    settings = Settings.model_validate(
        {
            "state_backend": "dynamodb",
            "dynamodb_endpoint": shared["DYNAMODB_ENDPOINT"],
            "search_backend": "opensearch",
            "opensearch_url": cluster[1]["OPENSEARCH_NODE_URLS"],
            "opensearch_index_prefix": f"kbc-{uuid.uuid4().hex[:10]}",
            "token_secret": TEST_SECRET,
            "table_name": f"kbc-{uuid.uuid4().hex[:12]}",
            "registry_cache_seconds": 0,
        }
    )
    clock = FakeClock()
    container = Container(settings=settings, clock=clock)
    container.table.create()
    demo.seed(container, with_token=False)
    bootstrap.reset(container)
    try:
        yield container, clock
    finally:
        bootstrap.reset(None)
        container.table.delete()


def _node_pids(state: Path) -> dict[str, int]:
    nodes = supervisor.status(state, (supervisor.OPENSEARCH,))[supervisor.OPENSEARCH]["nodes"]
    return {name: int(n["pid"]) for name, n in nodes.items() if n["pid"]}


def _primary_node(url: str, index: str) -> str:
    """The service name (`opensearch`, `opensearch-2`, …) of the node holding the index's primary shard."""
    ids = {nid: n["attributes"]["kb_node"] for nid, n in _get(f"{url}/_nodes")["nodes"].items()}
    routing = _get(f"{url}/_cluster/state/routing_table/{index}")["routing_table"]["indices"]
    shards = next(iter(routing.values()))["shards"]["0"]
    primary = next(s for s in shards if s["primary"])
    number = int(ids[primary["node"]])
    return "opensearch" if number == 1 else f"opensearch-{number}"


def _kill_primary(state: Path, env: dict[str, str], container: Container) -> str:
    """SIGKILL the node that holds the passages' primary (asked of a node that stays)."""
    pids = _node_pids(state)
    victim = _primary_node(_surviving_url(state), container.backend.passages_alias)
    os.kill(pids[victim], signal.SIGKILL)
    return victim


def _surviving_url(state: Path) -> str:
    nodes = supervisor.status(state, (supervisor.OPENSEARCH,))[supervisor.OPENSEARCH]["nodes"]
    return next(n["url"] for n in nodes.values() if n["running"])


def _recover(state: Path) -> dict[str, Any]:
    """`kb services start` again: the killed node rejoins; the cluster is green with every node."""
    supervisor.start(state, (supervisor.OPENSEARCH,), nodes=NODES)
    health = _get(f"{_surviving_url(state)}/_cluster/health?wait_for_status=green&timeout=60s")
    assert health["status"] == "green" and health["number_of_nodes"] == NODES, health
    return health


def _search(handlers: Handlers, query: str) -> tuple[int, dict[str, Any]]:
    event = load_event("search/search.json")
    event["body"] = json.dumps({"query": query, "limit": 3}, ensure_ascii=False)
    result = handlers.invoke("search", event)
    return int(result["statusCode"]), json.loads(result["body"])


def _searchable(container: Container, doc_ids: set[str], token: str) -> set[str]:
    """Which of `doc_ids` a search for their shared token finds (the backend's own search, all pages)."""
    viewer = Viewer(subject="demo-user", tenant="default", groups=())
    query = QueryAnalysis(text=token)
    found: set[str] = set()
    result = container.backend.search([SourceQuery(SOURCE_KEY, 10_000, float("-inf"), 10.0)], query, viewer)
    assert result[0].error is None, result[0].error
    found |= {h.doc_id for h in result[0].hits}
    return found & doc_ids


def test_g_local_three_nodes_green_with_one_replica(cluster, world) -> None:
    """`kb services start --nodes 3`: three nodes, green, and the indices carry one replica each."""
    state, env = cluster
    container, _ = world
    urls = env["OPENSEARCH_NODE_URLS"].split(",")
    assert len(urls) == NODES and env["OPENSEARCH_URL"] == urls[0]
    assert all(u.startswith("http://127.0.0.1:") for u in urls)
    health = _get(f"{urls[1]}/_cluster/health?wait_for_status=green&timeout=30s")
    assert health["status"] == "green" and health["number_of_nodes"] == NODES
    for alias in (container.backend.passages_alias, container.backend.documents_alias):
        settings = next(iter(_get(f"{urls[2]}/{alias}/_settings").values()))["settings"]["index"]
        assert settings["number_of_replicas"] == "1", settings
    assert len(_node_pids(state)) == NODES


def test_k_pipe_replicas_never_show_a_document_the_last_write_disabled(cluster, world) -> None:
    """K-PIPE with replicas: searches are spread over primary and replica copies, and the hits are not read
    back (`live_hits`): right after a disable, a delete or an ACL change is acknowledged, no copy shows the
    document (a write's refresh, `refresh=true` or `_refresh`, covers the replicas too)."""
    container, _ = world
    retrieval = Retrieval(container.backend)
    viewer = Viewer(subject="demo-user", tenant="default", groups=())
    admin = container.admin
    for n in range(12):
        word, name = f"okapi{n}q", f"replica-{n}"
        admin.put_documents([doc(SOURCE_KEY, name, f"Replica {n}", f"The {word} pump.", tenant="default")])
        for _ in range(3):
            assert [h.doc_id for h in ranked(retrieval, SOURCE_KEY, 5, word, viewer)] == [name]
        admin.set_document_status(SOURCE_KEY, name, "disabled")
        for _ in range(3):
            assert ranked(retrieval, SOURCE_KEY, 5, word, viewer) == []
        admin.set_document_status(SOURCE_KEY, name, "ready")
        admin.put_documents([doc(SOURCE_KEY, name, f"Replica {n}", f"The {word} pump.", tenant="other")])
        for _ in range(3):
            assert ranked(retrieval, SOURCE_KEY, 5, word, viewer) == []
        admin.delete_document(SOURCE_KEY, name)
        for _ in range(3):
            assert ranked(retrieval, SOURCE_KEY, 5, word, viewer) == []


def test_r_fail_a_search_node_killed_during_search_load_every_answer_typed(cluster, world) -> None:
    """R-FAIL / A-SEARCH: 120 searches from 3 threads; the primary's node is SIGKILLed after the first
    third. Each answer is 200 with a typed status; after recovery the cluster is green and searches ok."""
    state, env = cluster
    container, _ = world
    bootstrap.reset(container)
    handlers = Handlers()
    assert _search(handlers, "网关离线怎么排查？")[1]["status"] == "ok"
    answers: list[tuple[int, str]] = []
    lock = threading.Lock()
    queries = ["网关离线怎么排查？", "billing invoice", "device firmware update", "告警 通知"]

    def load(n: int) -> None:
        for i in range(SEARCHES // 3):
            status, body = _search(handlers, queries[(n + i) % len(queries)])
            with lock:
                answers.append((status, str(body.get("status", body.get("error", {}).get("code")))))

    threads = [threading.Thread(target=load, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    while len(answers) < SEARCHES // 3:
        time.sleep(0.05)
    victim = _kill_primary(state, env, container)
    for t in threads:
        t.join(timeout=300)
    counts = Counter(status for _, status in answers)
    http = Counter(code for code, _ in answers)
    print(f"\nsearch load: killed {victim}; answers {dict(counts)}; http {dict(http)}")
    assert len(answers) == SEARCHES // 3 * 3
    assert all(code == 200 for code, _ in answers), answers
    assert set(counts) <= TYPED, counts
    _recover(state)
    assert _search(handlers, "网关离线怎么排查？")[1]["status"] == "ok"


def test_i_ingest_node_killed_during_ingestion_job_no_acknowledged_document_lost(cluster, world) -> None:
    """I-INGEST / R-FAIL: a job of 300 documents (6 bulk writes); the primary's node is SIGKILLed after the
    first write, while the worker writes. The job completes (a worker that meets a backend failure tries
    again), every document it counts done is readable and searchable, before and after the node returns."""
    state, env = cluster
    container, clock = world
    token = f"zq{uuid.uuid4().hex[:8]}"
    docs = [
        {
            "doc_id": f"fault-{n:04d}",
            "title": f"Fault run {n}",
            "body": f"Cluster fault document {n} carries the marker {token}. " + "filler text " * 200,
            "acl": {"tenant": "default"},
        }
        for n in range(JOB_DOCUMENTS)
    ]
    ingestion = container.ingestion
    job = ingestion.submit(SOURCE_KEY, IngestionJobRequest.model_validate({"documents": docs}))
    errors: list[str] = []
    killed: list[str] = []
    done_at_kill: list[int] = []

    def kill_mid_job() -> None:
        while ingestion.status(SOURCE_KEY, job.job_id).counts.done < JOB_DOCUMENTS // 6:
            time.sleep(0.02)
        killed.append(_kill_primary(state, env, container))
        done_at_kill.append(ingestion.status(SOURCE_KEY, job.job_id).counts.done)

    killer = threading.Thread(target=kill_mid_job)
    killer.start()
    deadline = time.monotonic() + 240
    while ingestion.status(SOURCE_KEY, job.job_id).state not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, ingestion.status(SOURCE_KEY, job.job_id)
        try:
            if ingestion.work("fault-worker", job_id=job.job_id) is None:
                clock.advance(31)  # the job waits out its backend-failure pause
        except Exception as exc:  # an untyped failure of the worker is a finding
            errors.append(type(exc).__name__)
            clock.advance(31)
    killer.join(timeout=60)
    final = ingestion.status(SOURCE_KEY, job.job_id)
    print(f"\ningestion: killed {killed} at {done_at_kill} done; {final.state} {final.counts}; {errors}")
    assert done_at_kill and done_at_kill[0] < JOB_DOCUMENTS, done_at_kill  # killed mid-job
    assert final.state == "completed" and final.counts.done == JOB_DOCUMENTS, final
    assert not errors, errors
    done = {d["doc_id"] for d in docs}
    readable = {i for i in done if container.backend.get_document(SOURCE_KEY, i) is not None}
    assert readable == done
    assert _searchable(container, done, token) == done
    _recover(state)
    assert _searchable(container, done, token) == done

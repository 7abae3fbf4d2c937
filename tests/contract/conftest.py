"""The one contract suite over every backend: each test gets a `world` on

* `embedded`: moto DynamoDB in-process + SQLite FTS5 in a temp dir, and
* `real`: the OpenSearch node and the DynamoDB-API server on loopback (`kb services`, started here when
  they are not running; state dir $KB_SERVICES_STATE, default ./.kb-state). Markers `integration`,
  `opensearch`, `dynamodb_local`. Skipped when the servers cannot run here, unless
  KB_REQUIRE_REAL_BACKENDS=1 (then the run fails).

Parallel runs never collide: the real backend uses an index prefix unique to the test session (indices
and templates dropped at the end) and a DynamoDB table unique to each test; source ids are unique per test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.models import (
    AgentDefinition,
    Document,
    DocumentAcl,
    Principal,
    SourceDefinition,
    Viewer,
)
from knowledge_core.domain.wire import ReadRequest, SearchRequest
from knowledge_core.ports import Hit
from knowledge_core.services.retrieval import Retrieval, SourceAsk
from knowledge_core.settings import Settings

from tests.conftest import TEST_SECRET, FakeClock, embedded_container

REAL_MARKS = [pytest.mark.integration, pytest.mark.opensearch, pytest.mark.dynamodb_local]
BACKENDS = [pytest.param("embedded", id="embedded"), pytest.param("real", id="real", marks=REAL_MARKS)]
PRINCIPAL = Principal(
    client_id="contract", session_id="s-1", subject="alice", tenant="acme", routes=["kb"], groups=["eng"]
)


def services_state() -> Path:
    return Path(os.environ.get("KB_SERVICES_STATE", ".kb-state"))


def real_endpoints_or_skip() -> dict[str, str]:
    try:
        from kb_cli import supervisor

        # OpenSearch and DynamoDB only: a suite that needs the S3-API server asks for it (s3_endpoint).
        return supervisor.ensure_running(services_state(), (supervisor.OPENSEARCH, supervisor.DYNAMODB))
    except Exception as exc:  # any reason the servers cannot run here
        message = f"real backends unavailable: {type(exc).__name__}: {exc}"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)


def s3_endpoint_or_skip() -> dict[str, str]:
    """The S3-API server (its state: KB_S3_SERVICES_STATE, else KB_SERVICES_STATE): endpoint and keys as
    boto3 reads them from the environment."""
    state = Path(os.environ.get("KB_S3_SERVICES_STATE") or services_state())
    try:
        from kb_cli import supervisor

        endpoint = supervisor.ensure_running(state, (supervisor.S3,))["S3_ENDPOINT"]
        return {"AWS_ENDPOINT_URL_S3": endpoint} | supervisor.s3_credentials(state)
    except Exception as exc:  # any reason the server cannot run here
        message = f"S3-API server unavailable: {type(exc).__name__}: {exc}"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def real_endpoints() -> dict[str, str]:
    # The DynamoDB-API server does not check signatures, but botocore needs some credentials to sign.
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    return real_endpoints_or_skip()


@pytest.fixture(scope="session")
def index_prefix(real_endpoints: dict[str, str]) -> Iterator[str]:
    from knowledge_core.adapters.opensearch import OpenSearchBackend

    prefix = f"kbt-{uuid.uuid4().hex[:10]}"
    yield prefix
    OpenSearchBackend(real_endpoints["OPENSEARCH_URL"], index_prefix=prefix).drop_indices()


def real_container(
    endpoints: dict[str, str], prefix: str, clock: FakeClock, **overrides: object
) -> Container:
    settings = Settings(
        state_backend="dynamodb",
        dynamodb_endpoint=endpoints["DYNAMODB_ENDPOINT"],
        search_backend="opensearch",
        opensearch_url=endpoints["OPENSEARCH_URL"],
        opensearch_index_prefix=prefix,
        token_secret=TEST_SECRET,
        table_name=f"kbt-{uuid.uuid4().hex[:12]}",
        registry_cache_seconds=0,
        **overrides,
    )
    container = Container(settings=settings, clock=clock)
    container.table.create()
    container.admin.prepare_search()  # deploy time: searching never creates indices (S2)
    return container


@pytest.fixture(params=BACKENDS)
def backend_container(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> Iterator[Container]:
    if request.param == "embedded":
        yield embedded_container(tmp_path, clock)
        return
    container = real_container(
        request.getfixturevalue("real_endpoints"), request.getfixturevalue("index_prefix"), clock
    )
    yield container
    container.table.delete()


@dataclass
class World:
    """One workspace route over sources published for this test only (unique ids on a shared index)."""

    c: Container
    clock: FakeClock
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    route: str = "kb"
    agents: int = 0

    def key(self, name: str, version: str = "1.0.0") -> str:
        return f"{name}-{self.tag}@{version}"

    def publish(self, sources: dict[str, dict], *, route: str = "kb") -> list[str]:
        """Publish `sources` (name or name@version -> definition fields), an agent allowing them all in
        that order, and point `route` at it. Returns the source keys."""
        keys = []
        for name, fields in sources.items():
            base, _, version = name.partition("@")
            key = self.key(base, version or "1.0.0")
            id_, version = key.split("@")
            self.c.admin.publish_source(
                SourceDefinition.model_validate({"id": id_, "version": version, **fields})
            )
            keys.append(key)
        self.agents += 1
        agent_id = f"agent-{self.tag}"
        agent_version = f"{self.agents}.0.0"
        self.c.admin.publish_agent(
            AgentDefinition.model_validate(
                {
                    "id": agent_id,
                    "version": agent_version,
                    "modelProfile": {"candidates": [{"model": "m"}]},
                    "allowedKnowledge": [{"id": k.split("@")[0], "version": k.split("@")[1]} for k in keys],
                    "knowledgeRouting": {"maxSources": 16},
                }
            )
        )
        self.c.admin.set_workspace(route, f"{agent_id}@{agent_version}")
        self.route = route
        return keys

    def ingest(self, *docs: Document) -> None:
        self.c.admin.put_documents(list(docs))

    def search(self, query: str, limit: int = 3, principal: Principal = PRINCIPAL) -> dict:
        return self.c.knowledge.search(principal, self.route, SearchRequest(query=query, limit=limit)).wire()

    def read(
        self, ref: str, principal: Principal = PRINCIPAL, max_bytes: int = 16384, cursor: str | None = None
    ) -> dict:
        return self.c.knowledge.read(
            principal, self.route, ReadRequest(ref=ref, max_bytes=max_bytes, cursor=cursor)
        ).wire()

    def read_all(self, ref: str, max_bytes: int = 4096) -> tuple[bytes, int]:
        content, cursor, pages = b"", None, 0
        while True:
            page = self.read(ref, max_bytes=max_bytes, cursor=cursor)
            content += page["content"].encode("utf-8")
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                return content, pages


def ranked(
    retrieval: Retrieval,
    key: str,
    top_k: int,
    query: str,
    viewer: Viewer,
    min_score: float = 0.0,
    expansion: str | None = None,
    cut: bool = False,
    cite: bool = True,
) -> list[Hit]:
    """One source's ranked, live-checked hits through the retrieval step every door runs (K-PIPE) — the
    ranking itself, before the doors' relevance cut unless `cut`, as `kb eval` measures it;
    each showing its cited passage (domain.citing) unless `cite` is off."""
    analysed = retrieval.analyse(query, expansion)
    ask = SourceAsk(key, top_k, min_score, cut=cut, cite=cite)
    [outcome] = retrieval.run([ask], analysed, viewer, 15.0).outcomes
    assert outcome.error is None, outcome.error
    return outcome.hits


def doc(key: str, doc_id: str, title: str, body: str, **acl: object) -> Document:
    """A document of the principal's tenant unless `tenant=` says otherwise (it always names one)."""
    acl = {"tenant": PRINCIPAL.tenant} | acl
    return Document(source_key=key, doc_id=doc_id, title=title, body=body, acl=DocumentAcl(**acl))


@pytest.fixture
def world(backend_container: Container, clock: FakeClock) -> World:
    return World(backend_container, clock)


def _hybrid_world(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    clock: FakeClock,
    model_dir: str | None,
    **settings: object,
) -> Iterator[World]:
    if request.param == "embedded":
        yield World(embedded_container(tmp_path, clock, embedding_model_dir=model_dir, **settings), clock)
        return
    container = real_container(
        request.getfixturevalue("real_endpoints"),
        request.getfixturevalue("index_prefix"),
        clock,
        embedding_model_dir=model_dir,
        **settings,
    )
    yield World(container, clock)
    container.table.delete()


@pytest.fixture(params=BACKENDS)
def hybrid_world(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, embedding_model_dir: str
) -> Iterator[World]:
    """A `world` whose backend ranks hybrid (BM25 + the default models, English and Chinese)."""
    yield from _hybrid_world(request, tmp_path, clock, embedding_model_dir)


@pytest.fixture(params=BACKENDS)
def english_world(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, embedding_model_dir: str
) -> Iterator[World]:
    """A hybrid `world` with the English model only (CJK text is no model's)."""
    yield from _hybrid_world(request, tmp_path, clock, f"{embedding_model_dir}/bge-small-en-v1.5-q")


@pytest.fixture(params=BACKENDS)
def translated_world(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock, lexicon_dir: str
) -> Iterator[World]:
    """A BM25 `world` whose queries are expanded across Chinese and English (the compiled lexicon)."""
    yield from _hybrid_world(request, tmp_path, clock, None, lexicon_dir=lexicon_dir)


@pytest.fixture(params=BACKENDS)
def translated_hybrid_world(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    clock: FakeClock,
    embedding_model_dir: str,
    lexicon_dir: str,
) -> Iterator[World]:
    """A hybrid `world` (both default models) whose queries are expanded across Chinese and English."""
    yield from _hybrid_world(request, tmp_path, clock, embedding_model_dir, lexicon_dir=lexicon_dir)

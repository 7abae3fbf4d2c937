"""Settings of every function, from the environment, checked once at cold start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from .domain.hybrid import HybridRanking
from .domain.metadata_quota import DEFAULT_METADATA_KEYS_PER_SOURCE, DEFAULT_METADATA_KEYS_PER_TENANT
from .domain.models import Model


class Settings(Model):
    table_name: str = Field("agent-knowledge", min_length=3)
    # State: the DynamoDB table (Lambda), or a SQLite file (the embedded default of `kb serve`).
    state_backend: Literal["dynamodb", "sqlite"] = "dynamodb"
    state_path: str = "/tmp/agent-knowledge-state.sqlite3"
    dynamodb_endpoint: str | None = None
    search_backend: Literal["sqlite", "opensearch"] = "opensearch"
    sqlite_path: str = "/tmp/agent-knowledge.sqlite3"
    # How many id ranges of a large source (50k+ passages) one embedded search reads at once, each in its own
    # thread (adapters/sqlite/candidates.py); 0: one statement when ranked by kb_bm25, else the CPUs this
    # process may use, at most 4; 1: one statement.
    sqlite_search_slices: int = Field(0, ge=0, le=8)
    opensearch_url: str | None = None
    opensearch_index_prefix: str = Field("kb", pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    # Primary shards of the passages index (docs/operations.md, "Real backends locally"). A change takes
    # effect at the next `prepare` (POST /admin/v1/search-indices): a new index, the rows copied, the alias
    # moved, as for a version upgrade. Every process of a deployment must use the same value.
    opensearch_passage_shards: int = Field(1, ge=1, le=64)
    # When the passages index is merged into few segments (domain/segments.py): "auto" after the writes that
    # leave it fragmented (an ingestion job's end; the embedded backend also once its writes are quiet and
    # at start), "manual" only when an operator asks (POST /admin/v1/search-indices/compact).
    search_compaction: Literal["auto", "manual"] = "auto"
    token_secret: str | None = Field(None, repr=False)
    token_secret_arn: str | None = None
    # Rotation (S9): verify with the previous secret too; re-read both at most this often.
    token_secret_previous: str | None = Field(None, repr=False)
    token_secret_file: str | None = None  # local: the current secret; `<file>.previous` the previous one
    secret_refresh_seconds: float = Field(60.0, ge=1, le=3600)
    registry_cache_seconds: float = Field(2.0, ge=0, le=60)
    region: str = "us-east-1"
    # Hybrid ranking (domain.hybrid): a model directory from `kb models fetch` turns it on (or several,
    # joined by os.pathsep: kb serve passes the cache's usable ones when its multilingual model is not).
    embedding_model_dir: str | None = None
    embedding_cache: str | None = None  # a SQLite file remembering passage vectors (local use)
    # The `embed` function (name or ARN): set, this process reaches the models through it
    # (adapters/remote_embedding) instead of loading them; the embed function itself runs
    # `embedding_model_dir`. `embed_endpoint`: the Lambda Invoke API it is reached at (kb serve's own, on
    # loopback, with the operator credential of `embed_operator_file`); none: AWS Lambda's.
    embed_function: str | None = None
    embed_endpoint: str | None = None
    embed_operator_file: str | None = None
    # The embed function's `describe` answer (JSON), when the caller already has it (kb serve's workers):
    # no request at a cold start.
    embed_description: str | None = None
    # Where the embed function copies its models from at a cold start (s3://bucket/prefix/, the directory
    # `kb models fetch` fills) into `embedding_model_dir`: they do not fit a layer beside their runtime.
    embed_models_s3_uri: str | None = None
    # Passages embedded by every covering model, not only the one for their script (adapters.embedding).
    embedding_cross_script: bool = False
    # The deadline of one write's embedding (a batch of documents, or one document retried alone): past it
    # the write is refused as `embedding_timeout` and stores nothing, so one huge document cannot hold the
    # ingestion worker (and every job behind it) indefinitely.
    embedding_deadline_seconds: float = Field(300.0, ge=1, le=3600)
    # Cross-lingual query expansion (domain/translation.py) with the lexicon `kb models fetch` compiles.
    query_translation: bool = True
    lexicon_dir: str | None = None
    semantic_weight: float = Field(HybridRanking.weight, ge=0, le=1)
    semantic_pool: int = Field(HybridRanking.pool, ge=1, le=100)
    semantic_dense: int = Field(HybridRanking.dense, ge=0, le=200)  # vector candidates; 0: re-score only
    semantic_fusion: Literal["blend", "blend-norm", "rrf"] = HybridRanking.fusion
    semantic_rrf_k: int = Field(HybridRanking.rrf_k, ge=1, le=1000)
    # With no BM25 match in a source, the raw cosine its dense candidates need (Latin, CJK); 0 turns it off.
    semantic_no_match_floor: float = Field(HybridRanking.no_match_floor, ge=0, le=1)
    semantic_no_match_floor_cjk: float = Field(HybridRanking.no_match_floor_cjk, ge=0, le=1)
    # Metadata key quotas (domain/metadata_quota.py): the distinct metadata keys the stored documents of one
    # source, and of one tenant across its sources, may hold; a document that would add more is refused at
    # write time (every key is a field of the search index's shared mapping: OpenSearch's 1,000 by default).
    metadata_keys_per_source: int = Field(DEFAULT_METADATA_KEYS_PER_SOURCE, ge=1, le=10_000)
    metadata_keys_per_tenant: int = Field(DEFAULT_METADATA_KEYS_PER_TENANT, ge=1, le=10_000)
    # Ingestion jobs: the worker's SQS queue (AWS); directories readable by the service (kb serve only).
    ingest_queue_url: str | None = None
    ingest_directories: bool = False
    # The directories a directory job may read under (os.pathsep-separated; none: every one is refused).
    ingest_roots: str = ""
    ingest_lease_seconds: float = Field(15.0, ge=1, le=900)
    # Extraction of one file: in a resource-limited child process ("process") or, where no
    # child can be started, in this one ("inline": the in-process bounds only); its time and memory bounds.
    ingest_extraction: Literal["process", "inline"] = "process"
    ingest_extraction_seconds: float = Field(30.0, ge=1, le=600)
    ingest_extraction_memory_mb: int = Field(1024, ge=256, le=65536)
    # S3 as a data source (AWS): the one prefix the worker may read (`s3://bucket/prefix`), the source its
    # object events and scheduled syncs feed, under which doc_id prefix and for which tenant. `kb serve`
    # (ingest_directories) may read any prefix its credentials reach.
    ingest_s3_uri: str | None = None
    ingest_s3_source: str | None = None
    ingest_s3_doc_id_prefix: str = Field("s3", min_length=1)  # a sync under "" is refused (SPEC §7)
    ingest_s3_tenant: str = "default"

    # MCP authorization (services/oauth.py): access tokens of this issuer are accepted on the MCP endpoint,
    # beside the service's own tokens, when both the issuer and the audience (this MCP endpoint's canonical
    # URL, the RFC 8707 resource; or its path, below) are set. The JWKS URL is discovered from the issuer
    # when not given. A scope `<prefix><route>` grants the route; `oauth_routes` (comma-separated) lists the
    # routes offered (empty: any route a scope names) and OAuth callers belong to `oauth_tenant`.
    oauth_issuer: str | None = Field(None, pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$")
    # A path alone ("/mcp"): the resource is that path on the domain the request came to (API Gateway's
    # requestContext.domainName: the API's own or a mapped custom domain), https.
    oauth_audience: str | None = Field(None, pattern=r"^(https?://[^\s/?#]+)?(/[^\s?#]*)?$")
    oauth_jwks_url: str | None = Field(None, pattern=r"^https?://[^\s]+$")
    oauth_scope_prefix: str = Field("knowledge/", pattern=r"^[\x21\x23-\x5b\x5d-\x7e]{0,64}$")
    oauth_routes: str = ""
    oauth_tenant: str = "default"

    @model_validator(mode="after")
    def _oauth_complete(self) -> Settings:
        if bool(self.oauth_issuer) != bool(self.oauth_audience):
            field = "oauth_audience" if self.oauth_issuer else "oauth_issuer"
            raise ValueError(f"{field}: OAuth needs both KB_OAUTH_ISSUER and KB_OAUTH_AUDIENCE")
        return self

    def oauth_route_list(self) -> tuple[str, ...]:
        return tuple(route.strip() for route in self.oauth_routes.split(",") if route.strip())

    def directory_roots(self) -> tuple[str, ...]:
        return tuple(root for root in self.ingest_roots.split(os.pathsep) if root)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """The settings the environment names (`ENV`); unset and empty variables keep the defaults."""
        env = os.environ if env is None else env
        values = {field: _first(env, names) for field, names in ENV.items()}
        return cls.model_validate({k: v for k, v in values.items() if v not in (None, "")})

    def to_env(self) -> dict[str, str]:
        """The environment that makes `from_env` give these settings back: how `kb serve` hands them to
        the worker processes that run its functions (the one use of the environment locally)."""
        dumped = self.model_dump()
        env: dict[str, str] = {}
        for field, names in ENV.items():
            value = dumped[field]
            if value is not None:
                env[names[0]] = str(value).lower() if isinstance(value, bool) else str(value)
        return env


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


# The one table of setting -> environment variable(s) (the first is the one written; later ones are read too).
ENV: dict[str, tuple[str, ...]] = {
    field: (f"KB_{field.upper()}",) for field in Settings.model_fields if field != "region"
} | {"region": ("AWS_REGION", "AWS_DEFAULT_REGION")}

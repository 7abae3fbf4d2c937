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
    """Each field is one environment variable (`ENV`); its description is the settings reference's
    (docs/reference/settings.md, generated)."""

    table_name: str = Field("agent-knowledge", min_length=3, description="The DynamoDB state table.")
    state_backend: Literal["dynamodb", "sqlite"] = Field(
        "dynamodb", description="State: the DynamoDB table (Lambda), or a SQLite file (`kb serve`'s default)."
    )
    state_path: str = Field("/tmp/agent-knowledge-state.sqlite3", description="The SQLite state file.")
    dynamodb_endpoint: str | None = Field(None, description="A DynamoDB-API endpoint other than AWS's.")
    search_backend: Literal["sqlite", "opensearch"] = Field(
        "opensearch", description="Search: OpenSearch, or SQLite FTS5 (`kb serve`'s default)."
    )
    sqlite_path: str = Field("/tmp/agent-knowledge.sqlite3", description="The SQLite search file.")
    sqlite_search_slices: int = Field(
        0,
        ge=0,
        le=8,
        description="How many id ranges of a large source (50k+ passages) one embedded search reads at "
        "once, each in its own thread; 0: one statement when ranked by kb_bm25, else the CPUs this process "
        "may use, at most 4; 1: one statement.",
    )
    opensearch_url: str | None = Field(None, description="The OpenSearch endpoint (SigV4-signed on AWS).")
    opensearch_index_prefix: str = Field(
        "kb", pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$", description="The prefix of this deployment's indices."
    )
    opensearch_passage_shards: int = Field(
        1,
        ge=1,
        le=64,
        description="Primary shards of the passages index; a change takes effect at the next prepare "
        "(POST /admin/v1/search-indices: a new index, the rows copied, the alias moved). Every process of a "
        "deployment must use the same value.",
    )
    search_compaction: Literal["auto", "manual"] = Field(
        "auto",
        description="When the passages index is merged into few segments: `auto` after the writes that leave "
        "it fragmented, `manual` only when an operator asks (POST /admin/v1/search-indices/compact).",
    )
    token_secret: str | None = Field(None, repr=False, description="The token signing secret (local use).")
    token_secret_arn: str | None = Field(None, description="The Secrets Manager secret holding it (AWS).")
    token_secret_previous: str | None = Field(
        None, repr=False, description="Rotation: tokens signed with the previous secret are accepted too."
    )
    token_secret_file: str | None = Field(
        None, description="Local: the file of the current secret; `<file>.previous` holds the previous one."
    )
    secret_refresh_seconds: float = Field(
        60.0, ge=1, le=3600, description="Both secrets are re-read at most this often."
    )
    registry_cache_seconds: float = Field(
        2.0, ge=0, le=60, description="How long a published agent, source or workspace is cached."
    )
    region: str = Field("us-east-1", description="The AWS region.")
    embedding_model_dir: str | None = Field(
        None,
        description="Hybrid ranking: a model directory from `kb models fetch` turns it on (several, joined "
        "by the path separator: `kb serve` passes the cache's usable ones).",
    )
    embedding_cache: str | None = Field(
        None, description="A SQLite file remembering passage vectors (local use)."
    )
    embed_function: str | None = Field(
        None,
        description="The `embed` function (name or ARN): set, this process reaches the models through it "
        "instead of loading them; the embed function itself runs `embedding_model_dir`.",
    )
    embed_endpoint: str | None = Field(
        None,
        description="The Lambda Invoke API the embed function is reached at (kb serve's own, on loopback); "
        "none: AWS Lambda's.",
    )
    embed_operator_file: str | None = Field(
        None, description="The operator credential file sent to that endpoint (kb serve)."
    )
    embed_description: str | None = Field(
        None,
        description="The embed function's `describe` answer (JSON), when the caller already has it (kb "
        "serve's workers): no request at a cold start.",
    )
    embed_models_s3_uri: str | None = Field(
        None,
        description="Where the embed function copies its models from at a cold start (s3://bucket/prefix/, "
        "the directory `kb models fetch` fills): they do not fit a layer beside their runtime.",
    )
    embedding_cross_script: bool = Field(
        False, description="Passages embedded by every covering model, not only the one for their script."
    )
    embedding_deadline_seconds: float = Field(
        300.0,
        ge=1,
        le=3600,
        description="The deadline of one write's embedding: past it the write is refused as "
        "`embedding_timeout` and stores nothing, so one huge document cannot hold the ingestion worker.",
    )
    query_translation: bool = Field(
        True, description="Cross-lingual query expansion with the lexicon `kb models fetch` compiles."
    )
    lexicon_dir: str | None = Field(None, description="The compiled lexicon's directory.")
    semantic_weight: float = Field(
        HybridRanking.weight, ge=0, le=1, description="The semantic share of the blended score."
    )
    semantic_pool: int = Field(
        HybridRanking.pool, ge=1, le=100, description="BM25 candidates re-scored by the models."
    )
    semantic_dense: int = Field(
        HybridRanking.dense, ge=0, le=200, description="Vector candidates per model; 0: re-score only."
    )
    semantic_fusion: Literal["blend", "blend-norm", "rrf"] = Field(
        HybridRanking.fusion, description="How BM25 and the models' scores are fused."
    )
    semantic_rrf_k: int = Field(
        HybridRanking.rrf_k, ge=1, le=1000, description="The `k` of reciprocal rank fusion."
    )
    semantic_no_match_floor: float = Field(
        HybridRanking.no_match_floor,
        ge=0,
        le=1,
        description="With no BM25 match in a source, the raw cosine its Latin-script dense candidates need; "
        "0 turns it off.",
    )
    semantic_no_match_floor_cjk: float = Field(
        HybridRanking.no_match_floor_cjk,
        ge=0,
        le=1,
        description="The same for CJK dense candidates.",
    )
    metadata_keys_per_source: int = Field(
        DEFAULT_METADATA_KEYS_PER_SOURCE,
        ge=1,
        le=10_000,
        description="The distinct metadata keys the stored documents of one source may hold; a document that "
        "would add more is refused at write time (every key is a field of the index's shared mapping).",
    )
    metadata_keys_per_tenant: int = Field(
        DEFAULT_METADATA_KEYS_PER_TENANT,
        ge=1,
        le=10_000,
        description="The same for one tenant across its sources.",
    )
    ingest_queue_url: str | None = Field(None, description="The ingestion worker's SQS queue (AWS).")
    ingest_directories: bool = Field(
        False, description="Directory ingestion jobs are allowed (`kb serve` only)."
    )
    ingest_roots: str = Field(
        "",
        description="The directories a directory job may read under (path-separator-separated; none: every "
        "one is refused).",
    )
    ingest_lease_seconds: float = Field(15.0, ge=1, le=900, description="An ingestion job's lease.")
    ingest_extraction: Literal["process", "inline"] = Field(
        "process",
        description="Extraction of one file in a resource-limited child process, or `inline` where no child "
        "can be started (the in-process bounds only).",
    )
    ingest_extraction_seconds: float = Field(
        30.0, ge=1, le=600, description="One file's extraction time bound."
    )
    ingest_extraction_memory_mb: int = Field(
        1024, ge=256, le=65536, description="One file's extraction memory bound."
    )
    ingest_s3_uri: str | None = Field(
        None,
        description="S3 as a data source (AWS): the one prefix the worker may read (`s3://bucket/prefix`).",
    )
    ingest_s3_source: str | None = Field(None, description="The source its object events and syncs feed.")
    ingest_s3_doc_id_prefix: str = Field(
        "s3", min_length=1, description='The doc_id prefix its documents get (a sync under "" is refused).'
    )
    ingest_s3_tenant: str = Field("default", description="The tenant its documents belong to.")
    oauth_issuer: str | None = Field(
        None,
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        description="MCP authorization: access tokens of this issuer are accepted on the MCP endpoint, "
        "beside the service's own, when the audience is set too.",
    )
    oauth_audience: str | None = Field(
        None,
        pattern=r"^(https?://[^\s/?#]+)?(/[^\s?#]*)?$",
        description="This MCP endpoint's canonical URL (the RFC 8707 resource), or its path alone: that "
        "path on the domain the request came to, https.",
    )
    oauth_jwks_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s]+$",
        description="The issuer's JWKS (discovered from the issuer when unset).",
    )
    oauth_scope_prefix: str = Field(
        "knowledge/",
        pattern=r"^[\x21\x23-\x5b\x5d-\x7e]{0,64}$",
        description="A scope `<prefix><route>` grants the route.",
    )
    oauth_routes: str = Field(
        "", description="The routes offered to OAuth callers (comma-separated; empty: any)."
    )
    oauth_tenant: str = Field("default", description="The tenant OAuth callers belong to.")

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

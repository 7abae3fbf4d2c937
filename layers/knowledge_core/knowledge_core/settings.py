"""Settings of every function, from the environment, checked once at cold start."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, Field

from .domain.hybrid import HybridRanking


class Settings(BaseModel):
    table_name: str = Field("agent-knowledge", min_length=3)
    # State: the DynamoDB table (Lambda), or a SQLite file (the embedded default of `kb serve`).
    state_backend: Literal["dynamodb", "sqlite"] = "dynamodb"
    state_path: str = "/tmp/agent-knowledge-state.sqlite3"
    dynamodb_endpoint: str | None = None
    search_backend: Literal["sqlite", "opensearch"] = "opensearch"
    sqlite_path: str = "/tmp/agent-knowledge.sqlite3"
    opensearch_url: str | None = None
    opensearch_index_prefix: str = Field("kb", pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    token_secret: str | None = Field(None, repr=False)
    token_secret_arn: str | None = None
    # Rotation (S9): verify with the previous secret too; re-read both at most this often.
    token_secret_previous: str | None = Field(None, repr=False)
    token_secret_file: str | None = None  # local: the current secret; `<file>.previous` the previous one
    secret_refresh_seconds: float = Field(60.0, ge=1, le=3600)
    registry_cache_seconds: float = Field(2.0, ge=0, le=60)
    region: str = "us-east-1"
    # Hybrid ranking (domain.hybrid): a model directory from `kb models fetch` turns it on.
    embedding_model_dir: str | None = None
    embedding_cache: str | None = None  # a SQLite file remembering passage vectors (local use)
    # Passages embedded by every covering model, not only the one for their script (adapters.embedding).
    embedding_cross_script: bool = False
    # Cross-lingual query expansion (domain/translation.py) with the lexicon `kb models fetch` compiles.
    query_translation: bool = True
    lexicon_dir: str | None = None
    semantic_weight: float = Field(HybridRanking.weight, ge=0, le=1)
    semantic_pool: int = Field(HybridRanking.pool, ge=1, le=100)
    semantic_dense: int = Field(HybridRanking.dense, ge=0, le=200)  # vector candidates; 0: re-score only
    semantic_fusion: Literal["blend", "blend-norm", "rrf"] = HybridRanking.fusion
    semantic_rrf_k: int = Field(HybridRanking.rrf_k, ge=1, le=1000)
    # Ingestion jobs: the worker's SQS queue (AWS); directories readable by the service (kb serve only).
    ingest_queue_url: str | None = None
    ingest_directories: bool = False
    ingest_lease_seconds: float = Field(15.0, ge=1, le=900)
    # Extraction of one file (issue 26 M2): in a resource-limited child process ("process") or, where no
    # child can be started, in this one ("inline": the in-process bounds only); its time and memory bounds.
    ingest_extraction: Literal["process", "inline"] = "process"
    ingest_extraction_seconds: float = Field(30.0, ge=1, le=600)
    ingest_extraction_memory_mb: int = Field(1024, ge=256, le=65536)

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        values = {
            "table_name": env.get("KB_TABLE_NAME"),
            "state_backend": env.get("KB_STATE_BACKEND"),
            "state_path": env.get("KB_STATE_PATH"),
            "dynamodb_endpoint": env.get("KB_DYNAMODB_ENDPOINT"),
            "search_backend": env.get("KB_SEARCH_BACKEND"),
            "sqlite_path": env.get("KB_SQLITE_PATH"),
            "opensearch_url": env.get("KB_OPENSEARCH_URL"),
            "opensearch_index_prefix": env.get("KB_OPENSEARCH_INDEX_PREFIX"),
            "token_secret": env.get("KB_TOKEN_SECRET"),
            "token_secret_arn": env.get("KB_TOKEN_SECRET_ARN"),
            "token_secret_previous": env.get("KB_TOKEN_SECRET_PREVIOUS"),
            "token_secret_file": env.get("KB_TOKEN_SECRET_FILE"),
            "secret_refresh_seconds": env.get("KB_SECRET_REFRESH_SECONDS"),
            "registry_cache_seconds": env.get("KB_REGISTRY_CACHE_SECONDS"),
            "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            "embedding_model_dir": env.get("KB_EMBEDDING_MODEL_DIR"),
            "embedding_cache": env.get("KB_EMBEDDING_CACHE"),
            "embedding_cross_script": env.get("KB_EMBEDDING_CROSS_SCRIPT"),
            "query_translation": env.get("KB_QUERY_TRANSLATION"),
            "lexicon_dir": env.get("KB_LEXICON_DIR"),
            "semantic_weight": env.get("KB_SEMANTIC_WEIGHT"),
            "semantic_pool": env.get("KB_SEMANTIC_POOL"),
            "semantic_dense": env.get("KB_SEMANTIC_DENSE"),
            "semantic_fusion": env.get("KB_SEMANTIC_FUSION"),
            "semantic_rrf_k": env.get("KB_SEMANTIC_RRF_K"),
            "ingest_queue_url": env.get("KB_INGEST_QUEUE_URL"),
            "ingest_directories": env.get("KB_INGEST_DIRECTORIES"),
            "ingest_lease_seconds": env.get("KB_INGEST_LEASE_SECONDS"),
            "ingest_extraction": env.get("KB_INGEST_EXTRACTION"),
            "ingest_extraction_seconds": env.get("KB_INGEST_EXTRACTION_SECONDS"),
            "ingest_extraction_memory_mb": env.get("KB_INGEST_EXTRACTION_MEMORY_MB"),
        }
        return cls.model_validate({k: v for k, v in values.items() if v not in (None, "")})

"""The composition root: the one place that builds adapters and services, lazily, once per process.

`Container(settings, clock=…, state=…, backend=…, ledger=…, embedder=…, translator=…)` takes
port-typed overrides (tests, eval and bench swap an adapter here, never by reaching into the container) and
builds the rest from settings: state on DynamoDB (Lambda) or SQLite (the embedded default), search on
OpenSearch or SQLite FTS5."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, replace
from functools import cached_property, partial
from typing import TYPE_CHECKING

from .codec import RotatingTokenCodec, SecretSource, TokenCodec
from .domain.hybrid import HybridRanking
from .domain.metadata_quota import MetadataQuota
from .ports import (
    BudgetLedger,
    Clock,
    Embedder,
    JobQueue,
    ObjectStore,
    QueryTranslator,
    SearchBackend,
    StateStores,
    SystemClock,
)
from .settings import Settings

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .adapters.dynamodb import DynamoTable
    from .adapters.remote_embedding import Invoke
    from .extraction import Extracted
    from .services.access import AccessService, RunGuard
    from .services.admin import AdminService
    from .services.embed import EmbedService
    from .services.ingestion import IngestionService
    from .services.knowledge import KnowledgeService
    from .services.oauth import OAuthResource
    from .services.retrieval import Retrieval
    from .services.s3_events import S3Events
    from .services.s3_ingestion import S3Origin
    from .services.scope import ScopeResolver
    from .services.tools import ToolsService
    from .services.turns import TurnService


class Container:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        state: StateStores | None = None,
        backend: SearchBackend | None = None,
        ledger: BudgetLedger | None = None,
        embedder: Embedder | None = None,
        embed_invoke: Invoke | None = None,
        job_queue: JobQueue | None = None,
        translator: QueryTranslator | None = None,
        object_store: ObjectStore | None = None,
    ) -> None:
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self._state = state
        self._backend = backend
        self._ledger = ledger
        self._embedder = embedder
        self._embed_invoke = embed_invoke
        self._job_queue = job_queue
        self._translator = translator
        self._object_store = object_store
        self.embedding_error: str | None = None  # why a configured model directory is not used
        self.translation_error: str | None = None  # why a configured lexicon directory is not used

    def close(self) -> None:
        """At the process's end: the search backend, when one was given or built, finishes its pending
        work (bounded; never raises). Nothing is built for it."""
        if self._backend is not None or "backend" in self.__dict__:  # (a cached_property once read)
            self.backend.close()

    # --- adapters ---------------------------------------------------------------------------------
    @cached_property
    def table(self) -> DynamoTable | None:
        """The DynamoDB table when state lives there (and was not given)."""
        if self._state is not None or self.settings.state_backend != "dynamodb":
            return None
        import boto3
        from botocore.config import Config

        from .adapters.dynamodb import DynamoTable

        config = Config(
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=2,
            read_timeout=5,
            max_pool_connections=32,
        )
        client = boto3.client(
            "dynamodb",
            region_name=self.settings.region,
            endpoint_url=self.settings.dynamodb_endpoint,
            config=config,
        )
        return DynamoTable(client, self.settings.table_name)

    @cached_property
    def state(self) -> StateStores:
        stores = self._state
        if stores is None:
            if self.table is not None:
                stores = self.table.stores()
            else:
                from .adapters.sqlite import sqlite_stores

                stores = sqlite_stores(self.settings.state_path)
        return stores if self._ledger is None else replace(stores, ledger=self._ledger)

    @property
    def ledger(self) -> BudgetLedger:
        return self.state.ledger

    @cached_property
    def job_queue(self) -> JobQueue | None:
        """The ingestion worker's queue on AWS (SQS); None where a worker polls the job store."""
        if self._job_queue is not None or not self.settings.ingest_queue_url:
            return self._job_queue
        from .adapters.sqs_queue import SqsJobQueue

        return SqsJobQueue(self.settings.ingest_queue_url, region=self.settings.region)

    @cached_property
    def models(self) -> Embedder | None:
        """The embedding models run in this process, when a model directory is configured (their runtime
        loads lazily): the embed function's, or every function's own where there is no embed function. A
        directory that cannot be used is logged once (`embedding_error` keeps why; kb serve checks the
        directory before it starts and its banner says how it ranks)."""
        s = self.settings
        if not s.embedding_model_dir:
            return None
        from .adapters.embedding import ModelError, OnnxEmbedder

        try:
            if s.embed_models_s3_uri:  # copied into this instance's /tmp, then checked against digests
                from .adapters.model_store import fetch_models
                from .adapters.s3_objects import S3ObjectStore

                store = self._object_store or S3ObjectStore(region=s.region)
                fetch_models(store, s.embed_models_s3_uri, s.embedding_model_dir.split(os.pathsep)[0])
            models = OnnxEmbedder(
                s.embedding_model_dir.split(os.pathsep), cross_script=s.embedding_cross_script
            )
            if s.embed_models_s3_uri:
                models.check()
        except Exception as exc:  # ModelError, or the object store's typed error
            self.embedding_error = str(exc) if isinstance(exc, ModelError) else type(exc).__name__
            logger.warning("embedding models unusable, BM25 only: %s", self.embedding_error)
            return None
        return models

    @cached_property
    def embedder(self) -> Embedder | None:
        """How this process embeds queries and passages: through the embed function when one is configured
        (`embed_function`, or an `embed_invoke` transport given), else with its own models (`models`);
        None: BM25. An embed function that cannot describe its models is logged once and leaves ranking to
        BM25 (`embedding_error`). Passage vectors are remembered in `embedding_cache` when set."""
        s = self.settings
        if self._embedder is not None:
            return self._embedder
        inner: Embedder | None
        if self._embed_invoke is not None or s.embed_function:
            from .adapters.remote_embedding import EmbedUnavailable, RemoteEmbedder
            from .domain.embed_wire import Description

            try:
                described = s.embed_description
                inner = RemoteEmbedder(
                    self._embed_invoke or self.embed_transport(),
                    description=Description.model_validate_json(described) if described else None,
                )
            except EmbedUnavailable as exc:
                self.embedding_error = str(exc)
                logger.warning("hybrid ranking off, BM25 only: %s", exc)
                return None
        else:
            inner = self.models
        if inner is None:
            return None
        from .adapters.embedding import CachedEmbedder

        return CachedEmbedder(inner, s.embedding_cache) if s.embedding_cache else inner

    def embed_transport(self) -> Invoke:
        """The embed function's transport: the Invoke API at `embed_endpoint` (kb serve), else Lambda's."""
        from .adapters.remote_embedding import InvokeApi, LambdaInvoke

        s = self.settings
        if not s.embed_function:
            raise RuntimeError("KB_EMBED_FUNCTION is required to reach the embed function")
        if s.embed_endpoint:
            return InvokeApi(s.embed_endpoint, s.embed_function, s.embed_operator_file)
        return LambdaInvoke(s.embed_function, s.region)

    @cached_property
    def embed(self) -> EmbedService:
        """The embed function's work, on this process's models."""
        from .services.embed import EmbedService

        models = self.models
        return EmbedService(models, self.embedding_error)

    @cached_property
    def translator(self) -> QueryTranslator | None:
        """Cross-lingual query expansion (Chinese <-> English) when it is on and a lexicon directory is
        configured; None leaves BM25 monolingual. A directory that cannot be used is logged once
        (`translation_error` keeps why; kb serve checks the directory before it starts, and its banner
        says whether queries are translated)."""
        s = self.settings
        if self._translator is not None or not s.query_translation or not s.lexicon_dir:
            return self._translator
        from .adapters.lexicon import DictionaryTranslator, LexiconError

        try:
            return DictionaryTranslator(s.lexicon_dir)
        except LexiconError as exc:
            self.translation_error = str(exc)
            logger.warning("query translation off: %s", exc)
            return None

    @cached_property
    def hybrid(self) -> HybridRanking:
        s = self.settings
        return HybridRanking(
            weight=s.semantic_weight,
            pool=s.semantic_pool,
            dense=s.semantic_dense,
            fusion=s.semantic_fusion,
            rrf_k=s.semantic_rrf_k,
            no_match_floor=s.semantic_no_match_floor,
            no_match_floor_cjk=s.semantic_no_match_floor_cjk,
        )

    @cached_property
    def backend(self) -> SearchBackend:
        if self._backend is not None:
            return self._backend
        if self.settings.search_backend == "sqlite":
            from .adapters.sqlite.search import SqliteFtsBackend

            return SqliteFtsBackend(
                self.settings.sqlite_path,
                embedder=self.embedder,
                slices=self.settings.sqlite_search_slices or None,
                auto_compact=self.settings.search_compaction == "auto",
                embedding_seconds=self.settings.embedding_deadline_seconds,
            )
        from .adapters.opensearch import OpenSearchBackend

        if not self.settings.opensearch_url:
            raise RuntimeError("KB_OPENSEARCH_URL is required for the opensearch backend")
        return OpenSearchBackend(
            self.settings.opensearch_url,
            region=self.settings.region,
            index_prefix=self.settings.opensearch_index_prefix,
            embedder=self.embedder,
            passage_shards=self.settings.opensearch_passage_shards,
            embedding_seconds=self.settings.embedding_deadline_seconds,
        )

    @cached_property
    def codec(self) -> TokenCodec:
        settings = self.settings
        if settings.token_secret:  # fixed by the environment: nothing to re-read
            previous = settings.token_secret_previous
            return TokenCodec(
                settings.token_secret.encode("utf-8"),
                self.clock,
                previous=previous.encode("utf-8") if previous else None,
            )
        return RotatingTokenCodec(
            token_secret_source(settings), self.clock, refresh_seconds=settings.secret_refresh_seconds
        )

    # --- services ---------------------------------------------------------------------------------
    @cached_property
    def retrieval(self) -> Retrieval:
        """The one retrieval step every door runs (K-PIPE): this backend, translator, models and fusion."""
        from .services.retrieval import Retrieval

        return Retrieval(
            self.backend, translator=self.translator, embedder=self.embedder, ranking=self.hybrid
        )

    @cached_property
    def scopes(self) -> ScopeResolver:
        from .services.scope import ScopeResolver

        return ScopeResolver(self.state.registry, self.clock, self.settings.registry_cache_seconds)

    @cached_property
    def run_guard(self) -> RunGuard:
        from .services.access import RunGuard

        return RunGuard(self.state.runs, self.clock, self.settings.registry_cache_seconds)

    @cached_property
    def access(self) -> AccessService:
        from .services.access import AccessService

        return AccessService(self.state.sessions, self.clock)

    @cached_property
    def oauth(self) -> OAuthResource | None:
        """The MCP endpoint's OAuth resource server, when the settings name an issuer and audience."""
        from .services.oauth import OAuthResource

        return OAuthResource.from_settings(self.settings)

    @cached_property
    def knowledge(self) -> KnowledgeService:
        from .services.knowledge import KnowledgeService

        return KnowledgeService(
            scopes=self.scopes,
            backend=self.backend,
            codec=self.codec,
            runs=self.run_guard,
            clock=self.clock,
            retrieval=self.retrieval,
        )

    @cached_property
    def admin(self) -> AdminService:
        from .services.admin import AdminService

        return AdminService(
            registry=self.state.registry,
            backend=self.backend,
            scopes=self.scopes,
            runs=self.state.runs,
            run_guard=self.run_guard,
            ledger=self.ledger,
            metadata_quota=self.metadata_quota,
            ranking=lambda: self.retrieval.ranking_state(),  # built on first use: admin rarely asks
        )

    @cached_property
    def ingestion(self) -> IngestionService:
        from .services.ingestion import IngestionService

        return IngestionService(
            registry=self.state.registry,
            jobs=self.state.jobs,
            backend=self.backend,
            clock=self.clock,
            queue=self.job_queue,
            allow_directories=self.settings.ingest_directories,
            directory_roots=self.settings.directory_roots(),
            lease_s=self.settings.ingest_lease_seconds,
            extractor=self.extractor,
            s3=self.s3_origin,
            compact_after_jobs=self.settings.search_compaction == "auto",
            metadata_quota=self.metadata_quota,
        )

    @cached_property
    def metadata_quota(self) -> MetadataQuota:
        return MetadataQuota(self.settings.metadata_keys_per_source, self.settings.metadata_keys_per_tenant)

    @cached_property
    def s3_events(self) -> S3Events | None:
        """The deployment's S3 feed (object events, scheduled syncs); None when the template sets none."""
        from .domain.s3_source import parse_s3_uri
        from .services.s3_events import S3Events, S3Feed

        s = self.settings
        if not (s.ingest_s3_uri and s.ingest_s3_source):
            return None
        feed = S3Feed(
            parse_s3_uri(s.ingest_s3_uri, field="KB_INGEST_S3_URI"),
            s.ingest_s3_source,
            s.ingest_s3_doc_id_prefix,
            s.ingest_s3_tenant,
        )
        return S3Events(feed, self.ingestion, self.s3_origin, self.backend)

    @cached_property
    def s3_origin(self) -> S3Origin:
        """S3 prefixes as job origins: any on `kb serve`, the template's one on AWS (none: refused)."""
        from .adapters.s3_objects import S3ObjectStore
        from .domain.s3_source import parse_s3_uri
        from .services.s3_ingestion import S3Origin

        allowed = self.settings.ingest_s3_uri
        return S3Origin(
            self._object_store or S3ObjectStore(region=self.settings.region),
            allow_any=self.settings.ingest_directories,
            allowed=parse_s3_uri(allowed, field="KB_INGEST_S3_URI") if allowed else None,
        )

    @cached_property
    def extractor(self) -> Callable[[str, bytes], Extracted]:
        """Where a file is extracted: a resource-limited child process unless told not to."""
        from .extraction import DEFAULT_LIMITS, ExtractionLimits, extract
        from .extraction_sandbox import ProcessExtractor

        s = self.settings
        limits = ExtractionLimits(
            **{
                **asdict(DEFAULT_LIMITS),
                "wall_seconds": s.ingest_extraction_seconds,
                "memory_bytes": s.ingest_extraction_memory_mb * 1024 * 1024,
            }
        )
        if s.ingest_extraction == "inline":
            return partial(extract, limits=limits)
        return ProcessExtractor(limits)

    @cached_property
    def turns(self) -> TurnService:
        from .services.turns import TurnService

        return TurnService(
            scopes=self.scopes,
            knowledge=self.knowledge,
            runs=self.state.runs,
            run_guard=self.run_guard,
            turns=self.state.turns,
            clock=self.clock,
        )

    @cached_property
    def tools(self) -> ToolsService:
        from .services.tools import ToolsService

        return ToolsService(
            agents=self.scopes,
            backend=self.backend,
            ledger=self.ledger,
            clock=self.clock,
            retrieval=self.retrieval,
        )


def token_secret_source(settings: Settings) -> SecretSource:
    """(current, previous) token secrets from a local file pair or Secrets Manager's AWSCURRENT and
    AWSPREVIOUS stages (one Powertools provider per stage: its cache key ignores the stage)."""
    if settings.token_secret_file:
        from pathlib import Path

        current_file = Path(settings.token_secret_file)
        previous_file = current_file.with_name(current_file.name + ".previous")

        def from_files() -> tuple[bytes, bytes | None]:
            previous = previous_file.read_bytes().strip() if previous_file.exists() else None
            return current_file.read_bytes().strip(), previous or None

        return from_files
    if settings.token_secret_arn:
        from aws_lambda_powertools.utilities.parameters import SecretsProvider
        from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

        arn, max_age = settings.token_secret_arn, int(settings.secret_refresh_seconds)
        current_stage, previous_stage = SecretsProvider(), SecretsProvider()

        def from_secrets_manager() -> tuple[bytes, bytes | None]:
            current = str(current_stage.get(arn, max_age=max_age)).encode("utf-8")
            try:
                previous = str(previous_stage.get(arn, max_age=max_age, VersionStage="AWSPREVIOUS"))
            except GetParameterError:  # never rotated: there is no AWSPREVIOUS version
                return current, None
            return current, previous.encode("utf-8")

        return from_secrets_manager
    raise RuntimeError(
        "no token secret configured (KB_TOKEN_SECRET, KB_TOKEN_SECRET_FILE or KB_TOKEN_SECRET_ARN)"
    )


_container: Container | None = None
_container_lock = threading.Lock()


def container() -> Container:
    global _container
    if _container is None:
        with _container_lock:
            if _container is None:
                _container = Container(Settings.from_env())
    return _container


def close() -> None:
    """At the process's end (a `kb serve` instance): close the process container, when one was made."""
    if _container is not None:
        _container.close()


def reset(new: Container | None = None) -> None:
    """Tests and `kb` swap the process container."""
    global _container
    with _container_lock:
        _container = new

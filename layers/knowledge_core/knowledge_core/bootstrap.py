"""The one place that builds adapters and services from settings: lazily, once per process."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .codec import TokenCodec
from .domain.hybrid import HybridRanking
from .ports import Clock, Embedder, SearchBackend, SystemClock
from .settings import Settings


@dataclass
class Container:
    settings: Settings
    clock: Clock

    @cached_property
    def state(self) -> Any:  # DynamoState: Registry + SessionStore + RunStore
        import boto3
        from botocore.config import Config

        from .adapters.dynamodb import DynamoState

        if self.settings.state_backend == "embedded":
            _start_embedded_aws()
        config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=2, read_timeout=5)
        client = boto3.client(
            "dynamodb",
            region_name=self.settings.region,
            endpoint_url=self.settings.dynamodb_endpoint,
            config=config,
        )
        if self.settings.state_backend == "embedded":
            from .adapters.ledger_dynamodb import SerializedClient

            client = SerializedClient(client)  # moto in-process is not safe for concurrent transactions
        state = DynamoState(client, self.settings.table_name)
        if self.settings.state_backend == "embedded":
            state.create_table()
        return state

    @cached_property
    def embedder(self) -> Embedder | None:
        """The hybrid ranking model, when a model directory is configured (its runtime loads lazily)."""
        if not self.settings.embedding_model_dir:
            return None
        from .adapters.embedding import CachedEmbedder, OnnxEmbedder

        model = OnnxEmbedder(self.settings.embedding_model_dir)
        return (
            CachedEmbedder(model, self.settings.embedding_cache) if self.settings.embedding_cache else model
        )

    @cached_property
    def hybrid(self) -> HybridRanking:
        return HybridRanking(weight=self.settings.semantic_weight, pool=self.settings.semantic_pool)

    @cached_property
    def backend(self) -> SearchBackend:
        if self.settings.search_backend == "sqlite":
            from .adapters.sqlite_fts import SqliteFtsBackend

            return SqliteFtsBackend(self.settings.sqlite_path, embedder=self.embedder, hybrid=self.hybrid)
        from .adapters.opensearch import OpenSearchBackend  # type: ignore[import-not-found]

        if not self.settings.opensearch_url:
            raise RuntimeError("KB_OPENSEARCH_URL is required for the opensearch backend")
        return OpenSearchBackend(
            self.settings.opensearch_url,
            region=self.settings.region,
            index_prefix=self.settings.opensearch_index_prefix,
            embedder=self.embedder,
            hybrid=self.hybrid,
        )

    @cached_property
    def codec(self) -> TokenCodec:
        return TokenCodec(_token_secret(self.settings), self.clock)

    @cached_property
    def scopes(self) -> Any:
        from .services.scope import ScopeResolver

        return ScopeResolver(self.state, self.clock, self.settings.registry_cache_seconds)

    @cached_property
    def run_guard(self) -> Any:
        from .services.access import RunGuard

        return RunGuard(self.state, self.clock, self.settings.registry_cache_seconds)

    @cached_property
    def access(self) -> Any:
        from .services.access import AccessService

        return AccessService(self.state, self.clock)

    @cached_property
    def knowledge(self) -> Any:
        from .services.knowledge import KnowledgeService

        return KnowledgeService(self.scopes, self.backend, self.codec, self.run_guard, self.clock)

    @cached_property
    def admin(self) -> Any:
        from .services.admin import AdminService

        return AdminService(self.state, self.backend, self.scopes, self.state, self.run_guard)

    @cached_property
    def turn_store(self) -> Any:
        from .adapters.turns_dynamodb import DynamoTurnStore

        return DynamoTurnStore(self.state.client, self.state.table_name)

    @cached_property
    def turns(self) -> Any:
        from .services.turns import TurnService

        return TurnService(
            self.scopes, self.knowledge, self.backend, self.state, self.run_guard, self.turn_store, self.clock
        )

    @cached_property
    def ledger(self) -> Any:
        from .adapters.ledger_dynamodb import DynamoLedger

        return DynamoLedger(self.state.client, self.state.table_name)

    @cached_property
    def tools(self) -> Any:
        from .services.tools import ToolsService

        return ToolsService(self.state, self.scopes, self.backend, self.ledger, self.clock)


def _token_secret(settings: Settings) -> bytes:
    if settings.token_secret:
        return settings.token_secret.encode("utf-8")
    if settings.token_secret_arn:
        from aws_lambda_powertools.utilities import parameters

        return str(parameters.get_secret(settings.token_secret_arn, max_age=300)).encode("utf-8")
    raise RuntimeError("no token secret configured (KB_TOKEN_SECRET or KB_TOKEN_SECRET_ARN)")


_embedded_lock = threading.Lock()
_embedded_mock: Any = None


def _start_embedded_aws() -> None:
    """moto in-process for the embedded local mode: one mock for the whole process."""
    global _embedded_mock
    with _embedded_lock:
        if _embedded_mock is None:
            import os

            from moto import mock_aws

            os.environ.setdefault("AWS_ACCESS_KEY_ID", "embedded")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "embedded")
            _embedded_mock = mock_aws()
            _embedded_mock.start()


_container: Container | None = None
_container_lock = threading.Lock()


def container() -> Container:
    global _container
    if _container is None:
        with _container_lock:
            if _container is None:
                _container = Container(settings=Settings.from_env(), clock=SystemClock())
    return _container


def reset(new: Container | None = None) -> None:
    """Tests and the local gateway swap the process container."""
    global _container
    with _container_lock:
        _container = new

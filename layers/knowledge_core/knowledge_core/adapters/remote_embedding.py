"""The `embed` function as an `Embedder` (SPEC §0): the other functions and the ingestion worker reach the
models through it instead of loading them, so they are loaded once per embed instance.

`RemoteEmbedder(invoke)` asks the function once for its models (`describe`: ids, dimensions, which models
embed a passage of each script), then sends queries one at a time and passages in batches. `invoke` is the
transport: `LambdaInvoke` (boto3's Lambda `invoke` on AWS), `InvokeApi` (the Lambda Invoke API of a local
gateway: `kb serve`'s function workers), or any callable (kb serve's own process calls its embed worker
directly). A function that cannot answer raises `EmbedUnavailable`: a query then ranks by BM25 (services/
retrieval), a write fails as a model failure would."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..domain.analyzer import has_cjk
from ..domain.cache import BoundedCache, approx_bytes
from ..domain.embed_wire import (
    MAX_BATCH_CHARS,
    Description,
    ErrorAnswer,
    PassagesAnswer,
    QueryAnswer,
)
from ..ports import Embedder, Vector

Invoke = Callable[[dict[str, Any], float], Any]
QUERY_SECONDS = 15.0  # a query's round trip, a cold embed instance's model load included
PASSAGE_SECONDS = 120.0  # a batch's round trip
# Passages per request: a batch of window-long passages through three models stays well inside a request's
# time on a busy 2-core machine, and a query waiting behind it (one embed instance) waits little.
PASSAGE_BATCH = 16
QUERY_CACHE_BYTES = 2 * 1024 * 1024


class EmbedUnavailable(RuntimeError):
    """The embed function did not answer, failed, or refused the request (the reason, never the text)."""


class RemoteEmbedder(Embedder):
    """The models of the `embed` function: `description` when given (kb serve hands its workers the one it
    asked for), else asked for once at construction (raises EmbedUnavailable)."""

    def __init__(
        self, invoke: Invoke, *, description: Description | None = None, batch: int = PASSAGE_BATCH
    ) -> None:
        self._invoke = invoke
        self._batch = batch
        if description is None:  # (as long as a batch: a busy instance answers after the batch under way)
            description = Description.model_validate(self._call({"op": "describe"}, PASSAGE_SECONDS))
        self._describe = description
        self.models = tuple(self._describe.models)
        self._scripts = {True: tuple(self._describe.cjk), False: tuple(self._describe.latin)}
        self._queries: BoundedCache[tuple[str, bool], QueryAnswer] = BoundedCache(
            QUERY_CACHE_BYTES, size=_cache_bytes
        )

    @property
    def model_id(self) -> str:
        return self._describe.model_id

    def dimensions(self, model: str) -> int:
        return self._describe.dimensions[model]

    def models_for(self, text: str) -> tuple[str, ...]:
        return self._scripts[has_cjk(text)]

    def embed_query(self, text: str) -> Vector | None:
        answer = self._query(text, across=False)
        return answer.vector.vector() if answer.vector is not None else None

    def embed_across(self, text: str) -> tuple[Vector, Vector] | None:
        if not self._describe.across:
            return None
        answer = self._query(text, across=True)
        if answer.across is None:
            return None
        other, own = answer.across
        return other.vector(), own.vector()

    def _query(self, text: str, *, across: bool) -> QueryAnswer:
        """One query's answer, remembered (bounded): a search asks for its text's own vector and the
        multilingual pair in one request, and a repeated query sends none."""
        cached = self._queries.get((text, True)) or self._queries.get((text, across))
        if cached is not None:
            return cached
        raw = self._call({"op": "query", "text": text, "across": across}, QUERY_SECONDS)
        answer = QueryAnswer.model_validate(raw)
        self._queries.put((text, across), answer)
        return answer

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        out: list[list[Vector]] = []
        for batch in _batches(texts, self._batch, MAX_BATCH_CHARS // 2):
            request: dict[str, Any] = {"op": "passages", "texts": batch}
            if models is not None:
                request["models"] = list(models)
            answer = PassagesAnswer.model_validate(self._call(request, PASSAGE_SECONDS))
            if len(answer.vectors) != len(batch):
                raise EmbedUnavailable("embed function answered another number of passages")
            out += [[v.vector() for v in row] for row in answer.vectors]
        return out

    def _call(self, request: dict[str, Any], timeout: float) -> Any:
        try:
            raw = self._invoke(request, timeout)
        except EmbedUnavailable:
            raise
        except Exception as exc:  # the transport's own errors (connection, timeout, throttling)
            raise EmbedUnavailable(f"embed function unreachable ({type(exc).__name__})") from None
        if isinstance(raw, dict) and "error" in raw:
            error = ErrorAnswer.model_validate(raw).error
            raise EmbedUnavailable(f"embed function refused the request ({error.code}: {error.message})")
        return raw


def _cache_bytes(value: object) -> int:
    """What a query-cache key (the query) or answer (mostly its base64 vectors) holds."""
    if isinstance(value, QueryAnswer):
        vectors = [value.vector, *(value.across or ())]
        return 200 + sum(len(v.data) + len(v.model) for v in vectors if v is not None)
    return approx_bytes(value)


def _batches(texts: Sequence[str], size: int, max_chars: int) -> list[list[str]]:
    """`texts` in order, in batches of at most `size` texts and about `max_chars` characters (one longer
    text goes alone)."""
    batches: list[list[str]] = []
    current: list[str] = []
    chars = 0
    for text in texts:
        if current and (len(current) >= size or chars + len(text) > max_chars):
            batches.append(current)
            current, chars = [], 0
        current.append(text)
        chars += len(text)
    if current:
        batches.append(current)
    return batches


class LambdaInvoke:
    """boto3's Lambda `invoke` (RequestResponse) of the embed function, by name or ARN; the client is made
    at the first call."""

    def __init__(self, function: str, region: str) -> None:
        self._function = function
        self._region = region
        self._client: Any = None
        self._lock = threading.Lock()

    def _lambda(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import boto3
                    from botocore.config import Config

                    config = Config(
                        connect_timeout=2,
                        read_timeout=PASSAGE_SECONDS,
                        retries={"max_attempts": 3, "mode": "standard"},
                        max_pool_connections=16,
                    )
                    self._client = boto3.client("lambda", region_name=self._region, config=config)
        return self._client

    def __call__(self, request: dict[str, Any], timeout: float) -> Any:
        response = self._lambda().invoke(
            FunctionName=self._function, Payload=json.dumps(request, ensure_ascii=False).encode("utf-8")
        )
        body = json.loads(response["Payload"].read() or b"null")
        if response.get("FunctionError"):
            kind = body.get("errorType") if isinstance(body, dict) else None
            raise EmbedUnavailable(f"embed function failed ({kind or response['FunctionError']})")
        return body


class InvokeApi:
    """The Lambda Invoke API of a local gateway (`kb serve`): `POST {endpoint}/2015-03-31/functions/
    {function}/invocations`, with the local operator credential read from `operator_file` (G-LOCAL)."""

    def __init__(self, endpoint: str, function: str, operator_file: str | None = None) -> None:
        from urllib.parse import quote

        self._url = f"{endpoint.rstrip('/')}/2015-03-31/functions/{quote(function, safe='')}/invocations"
        self._headers = {"Content-Type": "application/json"}
        if operator_file:
            with open(operator_file, encoding="utf-8") as fh:
                self._headers["X-Kb-Operator"] = fh.read().strip()

    def __call__(self, request: dict[str, Any], timeout: float) -> Any:
        import urllib.request

        data = json.dumps(request, ensure_ascii=False).encode("utf-8")
        req = urllib.request.Request(self._url, data=data, headers=self._headers, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as response:
            body = json.loads(response.read() or b"null")
            if response.headers.get("X-Amz-Function-Error"):
                kind = body.get("errorType") if isinstance(body, dict) else None
                raise EmbedUnavailable(f"embed function failed ({kind or 'Unhandled'})")
        return body

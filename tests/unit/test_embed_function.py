"""The embed function (SPEC §0, K-REL): its wire, its service over the models, and `RemoteEmbedder`, which
every other function and the ingestion worker embed through: the same vectors and the same routing as the
models in-process, queries one at a time, passages in batches, refusals naming the field."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.adapters.embedding import CachedEmbedder, cosines, plain_cosines
from knowledge_core.adapters.model_store import fetch_models
from knowledge_core.adapters.remote_embedding import EmbedUnavailable, RemoteEmbedder, _batches
from knowledge_core.bootstrap import Container
from knowledge_core.domain.s3_source import StoredObject
from knowledge_core.ports import ObjectStore, Vector
from knowledge_core.services.embed import EmbedService
from knowledge_core.settings import Settings

from tests.conftest import TEST_SECRET
from tests.fake_embedder import MixedEmbedder

TEXTS = ["battery life", "电池续航", "the garden in spring", "河流的长度", "nothing in particular"]


class Wire:
    """The embed function behind a JSON round trip (as Lambda's Invoke treats a payload), counting calls."""

    def __init__(self, service: EmbedService) -> None:
        self.service = service
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any], timeout: float) -> Any:
        self.requests.append(request)
        return json.loads(json.dumps(self.service.answer(json.loads(json.dumps(request)))))


def remote(batch: int = 64) -> tuple[RemoteEmbedder, Wire]:
    wire = Wire(EmbedService(MixedEmbedder()))
    return RemoteEmbedder(wire, batch=batch), wire


def test_remote_embedder_gives_the_models_vectors_and_routing_K_REL() -> None:
    """Every Embedder answer through the function equals the models' own, the multilingual pair included."""
    models, (embedder, _) = MixedEmbedder(), remote()
    assert embedder.models == models.models and embedder.model_id == models.model_id
    assert all(embedder.dimensions(m) == 4 for m in models.models)
    for text in TEXTS:
        assert embedder.models_for(text) == models.models_for(text)
        assert embedder.embed_query(text) == models.embed_query(text)
        assert embedder.embed_across(text) == models.embed_across(text)
    assert embedder.embed_passages(TEXTS) == models.embed_passages(TEXTS)
    assert embedder.embed_passages(TEXTS, ["lat"]) == models.embed_passages(TEXTS, ["lat"])
    assert [embedder.cjk_model(m) for m in embedder.models] == [models.cjk_model(m) for m in models.models]


def test_queries_one_at_a_time_passages_in_batches_K_REL() -> None:
    """A search's own vector and the multilingual pair come in one request, a repeated query in none;
    passages go in batches of the given size."""
    embedder, wire = remote(batch=2)
    wire.requests.clear()
    embedder.embed_across("battery life")
    embedder.embed_query("battery life")
    embedder.embed_query("battery life")
    assert [r["op"] for r in wire.requests] == ["query"]
    assert wire.requests[0] == {"op": "query", "text": "battery life", "across": True}
    wire.requests.clear()
    embedder.embed_passages(TEXTS)
    assert [len(r["texts"]) for r in wire.requests] == [2, 2, 1]
    assert _batches(["a" * 10, "b" * 10, "c"], 8, 15) == [["a" * 10], ["b" * 10, "c"]]


def test_description_given_makes_no_request() -> None:
    """kb serve hands its workers the description it asked for: they send nothing at their start."""
    embedder, wire = remote()
    described = embedder._describe
    calls = len(wire.requests)
    again = RemoteEmbedder(wire, description=described)
    assert len(wire.requests) == calls and again.models == embedder.models


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"op": "query", "text": "x" * 40_000}, "query.text"),
        ({"op": "passages", "texts": ["ok", "y" * 70_000]}, "passages.texts.1"),
        ({"op": "passages", "texts": ["ok"] * 300}, "passages.texts"),
        ({"op": "query", "text": "a", "extra": 1}, "query.extra"),
        ({"op": "translate", "text": "a"}, "op"),
        ("not an object", "request"),
    ],
)
def test_refusals_name_the_field_never_the_text(event: Any, field: str) -> None:
    answer = EmbedService(MixedEmbedder()).answer(event)
    assert answer["error"]["code"] == "invalid_request"
    assert answer["error"]["message"].startswith(field) or field in answer["error"]["message"]
    assert "xxxxxxxx" not in answer["error"]["message"] and "yyyyyyyy" not in answer["error"]["message"]


def test_unknown_model_and_no_model_are_typed() -> None:
    answer = EmbedService(MixedEmbedder()).answer({"op": "passages", "texts": ["a"], "models": ["nope"]})
    assert answer["error"]["code"] == "invalid_request" and answer["error"]["message"].startswith("models")
    none = EmbedService(None, "no directory").answer({"op": "describe"})
    assert none["error"]["code"] == "model_unavailable" and "directory" not in none["error"]["message"]


def test_a_failing_function_raises_embed_unavailable() -> None:
    """A refusal, an error answer or a transport failure is EmbedUnavailable (retrieval: BM25 then)."""
    with pytest.raises(EmbedUnavailable, match="model_unavailable"):
        RemoteEmbedder(Wire(EmbedService(None)))

    def down(request: dict[str, Any], timeout: float) -> Any:
        raise ConnectionRefusedError

    with pytest.raises(EmbedUnavailable, match="unreachable"):
        RemoteEmbedder(down)


def test_container_reaches_the_models_through_the_embed_function(tmp_path: Path) -> None:
    """bootstrap: with an embed function configured the container embeds through it (and remembers passage
    vectors in the cache file when one is set); the function's own container runs the models."""
    wire = Wire(EmbedService(MixedEmbedder()))
    settings = Settings.model_validate(
        {
            "state_backend": "sqlite",
            "search_backend": "sqlite",
            "state_path": str(tmp_path / "s.sqlite3"),
            "sqlite_path": str(tmp_path / "kb.sqlite3"),
            "token_secret": TEST_SECRET,
            "embed_function": "EmbedFunction",
            "embedding_cache": str(tmp_path / "cache.sqlite3"),
        }
    )
    container = Container(settings, embed_invoke=wire)
    embedder = container.embedder
    assert isinstance(embedder, CachedEmbedder) and isinstance(embedder._inner, RemoteEmbedder)
    assert container.models is None  # no model directory: this process loads nothing
    assert embedder.embed_passages(["battery"]) == MixedEmbedder().embed_passages(["battery"])
    passages = [r for r in wire.requests if r["op"] == "passages"]
    embedder.embed_passages(["battery"])
    assert [r for r in wire.requests if r["op"] == "passages"] == passages  # remembered


def test_plain_cosines_equal_numpys() -> None:
    """Without numpy (a function without the inference layer) cosines are the same floats."""
    rng = random.Random(7)
    query = Vector("m", bytes(rng.randrange(256) for _ in range(384)))
    stored: list[Vector | None] = [
        Vector("m", bytes(rng.randrange(256) for _ in range(384))) for _ in range(50)
    ]
    stored += [None, Vector("other", query.data), Vector("m", b"\x01" * 8)]
    assert plain_cosines(query, stored) == cosines(query, stored)


class Objects(ObjectStore):
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.reads: list[str] = []

    def list_objects(self, bucket: str, prefix: str, limit: int) -> list[StoredObject]:
        keys = sorted(k for k in self.files if k.startswith(prefix))
        return [StoredObject(k, "e", len(self.files[k])) for k in keys]

    def head_object(self, bucket: str, key: str) -> StoredObject | None:
        return None

    def get_object(self, bucket: str, key: str, max_bytes: int) -> tuple[bytes, str]:
        self.reads.append(key)
        return self.files[key], "e"


def test_models_copied_from_s3_once(tmp_path: Path) -> None:
    """The embed function's models come from an S3 prefix into /tmp at a cold start: paths kept below the
    prefix, a warm copy read again from nothing, a key leaving the directory ignored."""
    store = Objects(
        {
            "kb/models/bge/model.json": b"{}",
            "kb/models/bge/model.onnx": b"onnx",
            "kb/models/../escape": b"x",
            "kb/models/lexicon/": b"",
        }
    )
    dest = fetch_models(store, "s3://bucket/kb/models/", tmp_path / "kb-model")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == [
        "bge/model.json",
        "bge/model.onnx",
    ]
    assert (dest / "bge" / "model.onnx").stat().st_mode & 0o777 == 0o600
    store.reads.clear()
    fetch_models(store, "s3://bucket/kb/models/", tmp_path / "kb-model")
    assert store.reads == []


def test_kb_serve_workers_embed_through_the_embed_function(tmp_path: Path) -> None:
    """kb serve: with models, its function workers get the embed function (and the operator credential's
    file) instead of loading the models; without models, nothing to embed through; the embed function's
    workers are capped apart from the others."""
    from kb_cli.gateway import WorkerHandlers
    from kb_cli.local_env import LocalRanking, local_settings

    models = LocalRanking(model_dir=str(tmp_path / "models"), ranking="hybrid")
    on = local_settings(tmp_path / "a", ranking=models, embed_function="EmbedFunction")
    assert on.embed_function == "EmbedFunction" and on.embedding_model_dir == str(tmp_path / "models")
    assert on.embed_operator_file == str((tmp_path / "a" / "operator-credential").resolve())
    off = local_settings(tmp_path / "b", ranking=LocalRanking(), embed_function="EmbedFunction")
    assert off.embed_function is None and off.embed_operator_file is None
    handlers = WorkerHandlers(max_instances=3, limits={"EmbedFunction": 1})
    assert handlers._max["EmbedFunction"] == 1 and handlers._max["SearchFunction"] == 3


def test_kb_serve_warms_the_embed_worker_at_start() -> None:
    """kb serve asks its embed worker for one query through every model once it knows the models, so the
    first search does not wait for them to load; a worker that fails or is stopping is left alone."""
    from kb_cli.commands.serve import EMBED_FUNCTION, _warm_models
    from kb_cli.gateway import FunctionError

    class Handlers:
        def __init__(self, fail: bool) -> None:
            self.fail, self.calls = fail, []

        def invoke(self, name: str, event: dict) -> dict:
            self.calls.append((name, event))
            if self.fail:
                raise FunctionError("Stopped", "kb serve is stopping")
            return {"vector": None}

    for fail in (False, True):
        handlers = Handlers(fail)
        _warm_models(handlers)  # type: ignore[arg-type]
        assert handlers.calls == [(EMBED_FUNCTION, {"op": "query", "text": "warm-up 预热", "across": True})]

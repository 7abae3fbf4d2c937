"""Hybrid ranking on every backend (issue 6, A-SEARCH): the embedding model re-scores each source's BM25
candidates; `minScore` applies to the blended score and is never lowered; queries the model does not cover
rank exactly as BM25; documents indexed before the model existed get their vectors."""

from __future__ import annotations

from pathlib import Path

from knowledge_core.adapters.embedding import OnnxEmbedder
from knowledge_core.adapters.sqlite_fts import SqliteFtsBackend
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.ports import SourceQuery

from tests.contract.conftest import World, doc

VIEWER = Viewer(tenant="acme", subject="alice", groups=["eng"])
LAPTOP = ("Laptop battery", "The notebook's battery drains quickly: lower the screen brightness.")
ARTILLERY = (
    "Artillery battery",
    "The battery of the regiment fired a salute; the battery commander praised the battery crews.",
)
QUERY = "battery life of my portable computer"


def _battery_world(world: World) -> str:
    (key,) = world.publish({"kit": {"topK": 5}})
    world.ingest(doc(key, "laptop", *LAPTOP), doc(key, "artillery", *ARTILLERY))
    return key


def test_a_search_hybrid_ranks_meaning_over_repeated_words(hybrid_world: World) -> None:
    """BM25 alone prefers the document that repeats "battery"; the blend puts the laptop first."""
    key = _battery_world(hybrid_world)
    hits = hybrid_world.c.backend.search([SourceQuery(key, 5, 0.0)], QUERY, VIEWER)[0].hits
    assert [h.doc_id for h in hits] == ["laptop", "artillery"]
    titles = [h["title"] for h in hybrid_world.search(QUERY)["hints"]]
    assert titles == ["Laptop battery", "Artillery battery"]


def test_a_search_hybrid_min_score_applies_to_the_blend(hybrid_world: World) -> None:
    # Every source's documents are in the index before any score is measured: BM25 statistics are
    # index-wide on OpenSearch, so a later ingest would move the scores the thresholds are taken from.
    keys = [hybrid_world.key(name) for name in ("kit", "kit2", "kit3")]
    hybrid_world.c.backend.put_documents(
        [doc(k, d, *text) for k in keys for d, text in (("laptop", LAPTOP), ("artillery", ARTILLERY))]
    )
    hits = hybrid_world.c.backend.search([SourceQuery(keys[0], 5, 0.0)], QUERY, VIEWER)[0].hits
    top, second = hits[0].score, hits[1].score
    assert top > second > 0
    hybrid_world.publish({"kit2": {"topK": 5, "minScore": (top + second) / 2}})
    assert [h["title"] for h in hybrid_world.search(QUERY)["hints"]] == ["Laptop battery"]
    hybrid_world.publish({"kit3": {"topK": 5, "minScore": top * 10}})
    body = hybrid_world.search(QUERY)
    assert body["status"] == "ok" and body["hints"] == []


def test_a_search_hybrid_leaves_uncovered_scripts_to_bm25(hybrid_world: World) -> None:
    """The English model has no vector for a Chinese query: its scores are the plain BM25 ones."""
    (key,) = hybrid_world.publish({"zh": {"topK": 5}})
    hybrid_world.ingest(
        doc(key, "a", "电池保养", "笔记本电脑的电池续航：降低屏幕亮度。电池 电池"),
        doc(key, "b", "炮兵连", "炮兵连的电池？不，这里的连指部队。"),
    )
    backend = hybrid_world.c.backend
    hybrid = backend.search([SourceQuery(key, 5, 0.0)], "电池续航", VIEWER)[0].hits
    embedder, backend._embedder = backend._embedder, None  # the same index, ranked by BM25 alone
    try:
        plain = backend.search([SourceQuery(key, 5, 0.0)], "电池续航", VIEWER)[0].hits
    finally:
        backend._embedder = embedder
    assert [(h.doc_id, h.score) for h in hybrid] == [(h.doc_id, h.score) for h in plain]
    assert hybrid and hybrid[0].doc_id == "a"


def test_a_search_hybrid_embeds_an_index_written_before_the_model(
    tmp_path: Path, embedding_model_dir: str
) -> None:
    path = tmp_path / "kb.sqlite3"
    SqliteFtsBackend(path).put_documents(
        [
            Document(source_key="s@1", doc_id=d, title=t, body=b, acl=DocumentAcl(tenant="t"))
            for d, (t, b) in (("laptop", LAPTOP), ("artillery", ARTILLERY))
        ]
    )
    reopened = SqliteFtsBackend(path, embedder=OnnxEmbedder(embedding_model_dir))
    hits = reopened.search([SourceQuery("s@1", 5, 0.0)], QUERY, Viewer(tenant="t", subject="s"))[0].hits
    assert [h.doc_id for h in hits] == ["laptop", "artillery"]

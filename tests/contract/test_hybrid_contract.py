"""Hybrid ranking on every backend (A-SEARCH): the embedding model re-scores each source's BM25
candidates; `minScore` applies to the blended score and is never lowered; queries the model does not cover
rank exactly as BM25; documents indexed before the model existed get their vectors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from knowledge_core.adapters.embedding import OnnxEmbedder
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.services.retrieval import Retrieval

from tests.contract.conftest import World, doc, ranked

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
    hits = ranked(hybrid_world.c.retrieval, key, 5, QUERY, VIEWER)
    assert [h.doc_id for h in hits] == ["laptop", "artillery"]
    # What the doors answer: the relevance cut stops at the artillery battery, far below.
    titles = [h["title"] for h in hybrid_world.search(QUERY)["hints"]]
    assert titles == ["Laptop battery"]
    assert [h.doc_id for h in ranked(hybrid_world.c.retrieval, key, 5, QUERY, VIEWER, cut=True)] == ["laptop"]


def test_a_search_hybrid_min_score_applies_to_the_blend(hybrid_world: World) -> None:
    # Every source's documents are in the index before any score is measured: BM25 statistics are
    # index-wide on OpenSearch, so a later ingest would move the scores the thresholds are taken from.
    keys = [hybrid_world.key(name) for name in ("kit", "kit2", "kit3")]
    hybrid_world.c.backend.put_documents(
        [doc(k, d, *text) for k in keys for d, text in (("laptop", LAPTOP), ("artillery", ARTILLERY))]
    )
    hits = ranked(hybrid_world.c.retrieval, keys[0], 5, QUERY, VIEWER)
    top, second = hits[0].score, hits[1].score
    assert top > second > 0
    hybrid_world.publish({"kit2": {"topK": 5, "minScore": (top + second) / 2}})
    assert [h["title"] for h in hybrid_world.search(QUERY)["hints"]] == ["Laptop battery"]
    hybrid_world.publish({"kit3": {"topK": 5, "minScore": top * 10}})
    body = hybrid_world.search(QUERY)
    assert body["status"] == "ok" and body["hints"] == []


def test_a_search_hybrid_leaves_uncovered_scripts_to_bm25(english_world: World) -> None:
    """With the English model only, a Chinese query has no vector: its scores are the plain BM25 ones."""
    hybrid_world = english_world
    (key,) = hybrid_world.publish({"zh": {"topK": 5}})
    hybrid_world.ingest(
        doc(key, "a", "电池保养", "笔记本电脑的电池续航：降低屏幕亮度。电池 电池"),
        doc(key, "b", "炮兵连", "炮兵连的电池？不，这里的连指部队。"),
    )
    hybrid = ranked(hybrid_world.c.retrieval, key, 5, "电池续航", VIEWER)
    plain = ranked(
        Retrieval(hybrid_world.c.backend), key, 5, "电池续航", VIEWER
    )  # the same index, BM25 alone
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
    embedder = OnnxEmbedder(embedding_model_dir)
    reopened = Retrieval(SqliteFtsBackend(path, embedder=embedder), embedder=embedder)
    hits = ranked(reopened, "s@1", 5, QUERY, Viewer(tenant="t", subject="s"))
    assert [h.doc_id for h in hits] == ["laptop", "artillery"]


# --- the dense first stage --------------------------------------------------------------------
NOTEBOOK = ("Laptop battery", "Lower the screen brightness to save power.")
NOTEBOOK_ZH = ("笔记本电池", "续航短：调低屏幕亮度可以省电。")
PARADE = ("Military parade", "The regiment marched past the stand at noon.")


def test_a_search_dense_stage_finds_what_bm25_cannot(hybrid_world: World) -> None:
    """No word (English) and no character bigram (Chinese) of the query is in the document: BM25 finds
    nothing, the dense stage finds it, in each language with that language's model."""
    (key,) = hybrid_world.publish({"kit": {"topK": 5}})
    hybrid_world.ingest(
        doc(key, "notebook", *NOTEBOOK), doc(key, "notebook-zh", *NOTEBOOK_ZH), doc(key, "parade", *PARADE)
    )
    for query, expected in (
        ("portable computer runs out of charge fast", "notebook"),
        ("手提电脑没电太快", "notebook-zh"),
    ):
        hits = ranked(hybrid_world.c.retrieval, key, 5, query, VIEWER)
        assert hits and hits[0].doc_id == expected, query
        assert ranked(Retrieval(hybrid_world.c.backend), key, 5, query, VIEWER) == []  # BM25 alone
    hints = hybrid_world.search("portable computer runs out of charge fast")["hints"]
    assert hints[0]["title"] == "Laptop battery"


def test_a_search_dense_stage_keeps_tenant_acl_and_status_filters(hybrid_world: World) -> None:
    (key,) = hybrid_world.publish({"kit": {"topK": 5}})
    hybrid_world.ingest(
        doc(key, "other-tenant", *NOTEBOOK, tenant="globex"),
        doc(key, "other-group", *NOTEBOOK, groups=["finance"]),
        doc(key, "disabled", *NOTEBOOK),
        doc(key, "parade", *PARADE),
    )
    hybrid_world.c.backend.set_document_status(key, "disabled", "disabled")
    query = "portable computer runs out of charge fast"
    hits = ranked(hybrid_world.c.retrieval, key, 5, query, VIEWER)
    assert [h.doc_id for h in hits] == ["parade"]  # the only document this viewer may see


def test_a_search_dense_stage_follows_writes(hybrid_world: World) -> None:
    """A document added, replaced or deleted after a search is seen by the next one (the dense scan's
    cached vectors follow the index)."""
    (key,) = hybrid_world.publish({"kit": {"topK": 5}})
    query = "portable computer runs out of charge fast"
    backend, retrieval = hybrid_world.c.backend, hybrid_world.c.retrieval
    hybrid_world.ingest(doc(key, "parade", *PARADE))
    assert [h.doc_id for h in ranked(retrieval, key, 5, query, VIEWER)] == ["parade"]
    hybrid_world.ingest(doc(key, "notebook", *NOTEBOOK))
    assert ranked(retrieval, key, 5, query, VIEWER)[0].doc_id == "notebook"
    hybrid_world.ingest(doc(key, "notebook", *PARADE))  # replaced: no longer about batteries
    backend.delete_document(key, "parade")
    hits = ranked(retrieval, key, 5, query, VIEWER)
    assert [h.doc_id for h in hits] == ["notebook"] and "regiment" in hits[0].passage


def test_a_search_dense_stage_never_mixes_models(hybrid_world: World) -> None:
    """A-SEARCH: the dense stage compares a query vector with passages of the same model id only — a
    question's own script by its bge model, the other script by the multilingual model under that script's
    id (the mixed design). An English question sharing no word with a source of Chinese passages finds the
    one that answers it there in the ranking (its meaning, read by the multilingual model); the doors answer
    a question about something else with nothing there (no match, no padding: with no word matched, the
    translation's bge cosine, or without one the multilingual cosine, is checked against a floor)."""
    zh_key, en_key = hybrid_world.publish({"zh": {"topK": 5}, "en": {"topK": 5}})
    hybrid_world.ingest(doc(zh_key, "notebook-zh", *NOTEBOOK_ZH), doc(en_key, "notebook", *NOTEBOOK))
    retrieval = hybrid_world.c.retrieval
    english, chinese = "portable computer runs out of charge fast", "手提电脑没电太快"
    assert [h.doc_id for h in ranked(retrieval, zh_key, 5, english, VIEWER)] == ["notebook-zh"]
    assert ranked(retrieval, zh_key, 5, "quantum chromodynamics lattice", VIEWER, cut=True) == []
    zh_hits = ranked(retrieval, zh_key, 5, chinese, VIEWER)
    assert [h.doc_id for h in zh_hits] == ["notebook-zh"]
    en_hits = ranked(retrieval, en_key, 5, english, VIEWER)
    assert [h.doc_id for h in en_hits] == ["notebook"]


NOTES = (
    "Battery notes",
    "# Battery notes\n\n## Artillery\n\nThe battery of the regiment fired a salute; the battery commander "
    "praised the battery crews of the battery.\n\n## Laptops\n\nA notebook's battery drains quickly: lower "
    "the screen brightness to make it last longer.\n",
)


def test_a_search_hybrid_cites_the_passage_that_blends_best(hybrid_world: World) -> None:
    """A hit shows the passage of its document that best blends BM25 and meaning (domain.citing), not
    merely the one repeating the query's words: in search summaries and in the agent tool's references
    alike, on every backend; ranking without a shown passage (the evaluation door) keeps BM25's."""
    (key,) = hybrid_world.publish({"kit": {"topK": 5}})
    hybrid_world.ingest(doc(key, "notes", *NOTES))
    query = "battery life of my portable computer"
    [plain] = ranked(hybrid_world.c.retrieval, key, 5, query, VIEWER, cite=False)
    assert plain.passage.startswith("The battery of the regiment")  # BM25's best passage
    [hit] = ranked(hybrid_world.c.retrieval, key, 5, query, VIEWER)
    assert hit.passage.startswith("A notebook's battery drains quickly")
    assert (hit.doc_id, hit.score) == (plain.doc_id, plain.score)  # the rank and score stay
    [hint] = hybrid_world.search(query)["hints"]
    assert "notebook's battery drains" in hint["summary"] and "regiment" not in hint["summary"]
    # The candidates are the document's passages of the hit's revision only: a stale hit gets none.
    backend, analysed = hybrid_world.c.backend, hybrid_world.c.retrieval.analyse(query)
    found = backend.passage_candidates([plain], analysed, 3, 5.0)[(key, "notes")]
    assert [h.passage[:5] for h, _ in found] == ["The b", "A not"] and all(c is not None for _, c in found)
    assert backend.passage_candidates([replace(plain, revision="older")], analysed, 3, 5.0) == {}

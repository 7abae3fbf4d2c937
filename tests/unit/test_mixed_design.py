"""The mixed design (docs/archive/quality-log.md "A gate that tells a copy from noise"): bge within a script,
a multilingual model across scripts, the gated least-spread rule and the no-match check across scripts —
the domain rules, the embedder's per-script ids, the query analysis and the embedded backend's evidence.
No model file: tests/fake_embedder.MixedEmbedder (the real models: tests/integration)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from knowledge_core.adapters.embedding import OnnxEmbedder, across_ids
from knowledge_core.domain.hybrid import Across, HybridRanking, unit_cosine
from knowledge_core.ports import Hit, QueryAnalysis, ScriptEvidence, SourceQuery, Vector

from tests.fake_embedder import MixedEmbedder, topic_vector


def hit(doc_id: str, score: float, passage: str) -> Hit:
    return Hit("s@1", doc_id, doc_id.upper(), "rev", score, passage)


def test_gate_opens_for_a_close_or_copied_other_script_passage() -> None:
    """R-HYBRID: the gate is shut without evidence or without any other-script passage; open when
    the best other-script cosine is within the bias of the best own one, or when that passage is a copy
    (cosine ≥ τ) of one of the three best own-script passages; shut when it is far and unlike them."""
    ranking = HybridRanking()
    assert (ranking.across_bias, ranking.across_copy, ranking.across_spread) == (0.05, 0.80, 0.2)
    same = topic_vector("multi.zh", 0)
    copy = topic_vector("multi.en", 0, lean=30)  # cosine ~0.97 with `same`
    unlike = topic_vector("multi.en", 1)
    assert ranking.across(None) is False
    assert ranking.across(ScriptEvidence(own=((0.9, same),), other=None)) is False
    assert ranking.across(ScriptEvidence(own=((0.9, same),), other=(0.86, unlike))) is True  # bias
    assert ranking.across(ScriptEvidence(own=(), other=(0.5, unlike))) is True  # nothing own
    assert ranking.across(ScriptEvidence(own=((0.9, same),), other=(0.7, copy))) is True  # a copy
    assert ranking.across(ScriptEvidence(own=((0.9, same),), other=(0.7, unlike))) is False
    assert unit_cosine(same, same) == pytest.approx(1.0) and unit_cosine(same, unlike) == 0.0


def test_a_shut_gate_keeps_a_flat_other_script_group_flat() -> None:
    """with the gate shut, the other script's cosines are scaled over at least δ, so two near-equal
    English passages under a Chinese question are not stretched to a perfect score; open, they are (as
    without a multilingual model)."""
    lexical = [hit("zh1", 10.0, "中文段落一"), hit("zh2", 9.0, "中文段落二")]
    dense = [(hit("en1", 0.0, "an English passage"), 0.81), (hit("en2", 0.0, "another English one"), 0.80)]
    ranking = HybridRanking()
    shut = ranking.fuse(lexical, [0.8, 0.6], dense, 5, 0.0, across=Across(True, False))
    opened = ranking.fuse(lexical, [0.8, 0.6], dense, 5, 0.0, across=Across(True, True))
    plain = ranking.fuse(lexical, [0.8, 0.6], dense, 5, 0.0)
    order = [h.doc_id for h in shut]
    assert order[0] == "zh1" and order[-1] == "en2"
    scores = {h.doc_id: h.score for h in shut}
    assert scores["en1"] == pytest.approx(0.6 * 10.0 * (0.01 / 0.2))  # (0.81 − 0.80) / δ
    assert {h.doc_id: h.score for h in opened} == {h.doc_id: h.score for h in plain}
    assert {h.doc_id: h.score for h in plain}["en1"] == pytest.approx(6.0)  # stretched to 1.0
    # An English question: the other script is CJK, and the rule applies to that group instead.
    zh_dense = [(hit("zh3", 0.0, "中文三"), 0.81), (hit("zh4", 0.0, "中文四"), 0.80)]
    en_q = ranking.fuse([hit("en1", 10.0, "English")], [0.8], zh_dense, 5, 0.0, across=Across(False, False))
    assert {h.doc_id: h.score for h in en_q}["zh3"] == pytest.approx(0.6 * 10.0 * (0.01 / 0.2))


def test_no_match_across_scripts_is_checked_by_the_translation() -> None:
    """SPEC 无匹配不强塞文档: when BM25 matched nothing, an other-script dense-only hit answers only if
    its passage's cosine with the translated question reaches its script's floor (the multilingual cosine
    does not separate relevant from off-topic hits); with no translation, only above 0.80. Own-script hits
    keep their floor; the deep ranking (floored off) drops nothing."""
    ranking = HybridRanking()
    en = hit("en", 0.0, "an English passage")
    en2 = hit("en2", 0.0, "another English passage")
    zh = hit("zh", 0.0, "中文段落")
    dense = [(en, 0.78), (en2, 0.77), (zh, 0.45)]
    checked = ranking.fuse([], [], dense, 5, 0.0, across=Across(True, True, (0.60, 0.30, None)))
    assert [h.doc_id for h in checked] == [
        "zh",
        "en",
    ]  # a tie: the own script first; en2's translated cosine 0.30 < 0.52
    no_translation = ranking.fuse([], [], dense, 5, 0.0, across=Across(True, True, ()))
    assert [h.doc_id for h in no_translation] == ["zh"]  # 0.78 < 0.80
    assert [h.doc_id for h in ranking.fuse([], [], [(en, 0.81)], 5, 0.0, across=Across(True, True))] == ["en"]
    deep = ranking.fuse([], [], dense, 5, 0.0, floored=False, across=Across(True, True, (0.60, 0.30, None)))
    assert len(deep) == 3


def write_model(root: Path, name: str, **manifest: object) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "model.json").write_text(json.dumps({"id": name, "dimensions": 384, **manifest}))
    (d / "model.onnx").write_bytes(b"")
    (d / "tokenizer.json").write_text("{}")


def test_two_scripts_cosines_of_one_document_are_never_compared_raw() -> None:
    """R-HYBRID (demo-en q183): a document whose BM25 passage is English (bge cosine 0.778) and whose
    nearest passage is bilingual, so of the CJK group (multilingual cosine 0.796: that model's cosines run
    higher) keeps the cosine that scales best within its own script, not the raw larger number; blend and
    rrf keep their better raw one."""
    lexical = [
        hit("sla", 28.0, "Ticket priority (P1-P4) is different from the incident severity (SEV1-SEV4)"),
        hit("bilingual", 15.0, "| 优先级 Priority | L1 → L2 最长停留 |"),
        hit("incident", 13.0, "Escalate if impact grows after 60 minutes (SEV2)"),
    ]
    dense = [
        (hit("bilingual", 0.0, "L1 满足以下任一条件必须升级 / L1 must escalate when"), 0.827),
        (hit("export", 0.0, "device_id,device_name 冷库 A-03"), 0.808),
        (hit("sla", 0.0, "| Languages | English, 中文 |"), 0.796),
        (hit("audit", 0.0, "审计日志 audit log"), 0.770),
    ]
    ranking = HybridRanking()
    fused = ranking.fuse(lexical, [0.778, 0.812, 0.679], dense, 5, 0.0, across=Across(False, True))
    scores = {h.doc_id: h.score for h in fused}
    assert fused[0].doc_id == "sla"
    assert scores["sla"] == pytest.approx(28.0)  # its English cosine is the English group's best: 1.0
    assert scores["incident"] == pytest.approx(0.4 * 13.0)  # the English group's least
    assert scores["bilingual"] == pytest.approx(0.4 * 15.0 + 0.6 * 28.0)  # the CJK group's best
    # The cited passage stays the BM25 one whichever cosine a document keeps.
    assert fused[0].passage.startswith("Ticket priority")
    raw = HybridRanking(fusion="blend").fuse(lexical, [0.778, 0.812, 0.679], dense, 5, 0.0)
    assert {h.doc_id: h.score for h in raw}["sla"] == pytest.approx(0.4 * 28.0 + 0.6 * 28.0 * 0.796)


def test_the_multilingual_model_is_stored_per_script(tmp_path: Path) -> None:
    """R-HYBRID: beside a model per script, the multilingual model's vectors are stored under one
    id per script (its dense stage over one id reads only that script's passages, on every backend); a
    query's own model stays the bge of its script. Alone, the multilingual model is a plain model."""
    write_model(tmp_path, "en", languages=["en"])
    write_model(tmp_path, "zh", languages=["zh", "en"])
    write_model(tmp_path, "multi", across=True, languages=["zh", "en"])
    embedder = OnnxEmbedder(tmp_path)
    assert across_ids("multi") == ("multi.zh", "multi.en")
    assert embedder.models == ("en", "zh", "multi.zh", "multi.en")
    assert embedder.models_for("电池续航") == ("zh", "multi.zh")
    assert embedder.models_for("battery life") == ("en", "multi.en")
    assert embedder.model_for("battery life").id == "en"  # type: ignore[union-attr]
    assert embedder.dimensions("multi.en") == 384
    alone = tmp_path / "alone"
    write_model(alone, "multi", across=True, languages=["zh", "en"])
    only = OnnxEmbedder(alone)
    assert only.models == ("multi",) and only.embed_across("x") is None
    assert only.models_for("电池") == ("multi",)


def test_query_analysis_of_the_mixed_design() -> None:
    """K-PIPE: the query ranks by its script's model and the multilingual vector of the other
    script; the same bytes under its own script's id are the gate's evidence; the translation's vector
    only checks a no-match source."""
    from knowledge_core.services.retrieval import Retrieval

    class Translator:
        name = "t"

        def expand(self, text: str) -> str:
            return "battery"

    retrieval = Retrieval(None, translator=Translator(), embedder=MixedEmbedder())  # type: ignore[arg-type]
    q = retrieval.analyse("电池")
    assert [v.model for v in q.vectors] == ["cjk", "multi.en"]
    assert q.evidence is not None and q.evidence.model == "multi.zh" and q.evidence.data == q.vectors[1].data
    assert q.translated is not None and q.translated.model == "lat"


def test_sqlite_reports_the_multilingual_evidence(tmp_path: Path) -> None:
    """R-HYBRID on the embedded backend: the multilingual dense stage reads only the other script's
    passages; the evidence holds the nearest own-script passages and the best other-script one with their
    stored vectors; the checks come only when BM25 matched nothing; the evidence never ranks."""
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Document, DocumentAcl, Viewer

    embedder = MixedEmbedder()
    backend = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=embedder)
    acl = DocumentAcl(tenant="t")
    bodies = {"zh-bat": "电池续航很长", "en-bat": "The battery lasts long", "en-gar": "A garden of roses"}
    backend.put_documents(
        [Document(source_key="s@1", doc_id=k, title="", body=b, acl=acl) for k, b in bodies.items()]
    )
    other, evidence = embedder.embed_across("电池")  # type: ignore[misc]
    own = embedder.embed_query("电池")
    translated = embedder.embed_query("battery")
    query = QueryAnalysis("电池", "battery", (own, other), evidence=evidence, translated=translated)  # type: ignore[arg-type]
    viewer = Viewer(tenant="t", subject="u")
    [result] = backend.search([SourceQuery("s@1", 5, float("-inf"), dense_k=5)], query, viewer)
    assert result.evidence is not None
    assert [(round(c, 2), v.model) for c, v in result.evidence.own] == [(1.0, "multi.zh")]
    assert result.evidence.other is not None and result.evidence.other[1].model == "multi.en"
    assert result.evidence.other[0] == pytest.approx(97 / 127, abs=0.01)
    dense_models = {h.doc_id for h, _ in result.dense}
    assert dense_models == {"zh-bat", "en-bat", "en-gar"}  # cjk stage: zh-bat; multi.en stage: both English
    assert result.dense_checks == []  # BM25 matched 电池
    # No word match: the checks are the translated vector's cosines, per dense hit.
    nothing = QueryAnalysis("河流", "river", (own, other), evidence=evidence, translated=translated)  # type: ignore[arg-type]
    [empty] = backend.search([SourceQuery("s@1", 5, float("-inf"), dense_k=5)], nothing, viewer)
    assert not empty.hits and len(empty.dense_checks) == len(empty.dense)
    checks = {h.doc_id: c for (h, _), c in zip(empty.dense, empty.dense_checks, strict=True)}
    assert checks["en-bat"] == pytest.approx(1.0, abs=0.01) and checks["zh-bat"] is None


def test_a_cosine_is_scaled_by_its_model_not_by_the_cited_text(tmp_path: Path) -> None:
    """SPEC 无匹配不强塞文档 / R-HYBRID (a newcomer's walk): an English body under a Chinese title is
    embedded as a CJK passage (title and text are embedded together), so its cosines come from the CJK
    models whatever script the cited text shows. The backend says each cosine's model, and fusion takes
    the model's script (`Embedder.cjk_model`): an English question that BM25 matches nowhere no longer
    gets that passage through the English floor with a multilingual cosine (0.69 ≥ 0.52), but must pass the
    other script's check (no translation: 0.80)."""
    from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
    from knowledge_core.domain.models import Document, DocumentAcl, Viewer
    from knowledge_core.services.retrieval import Retrieval

    class Leaning(MixedEmbedder):
        def embed_passages(self, texts: Any, models: Any = None) -> list[list[Vector]]:
            return [
                [topic_vector(v.model, 1, 40 if v.model == "multi.zh" else 0) for v in vs]
                for vs in super().embed_passages(texts, models)
            ]

    embedder = Leaning()
    assert [embedder.cjk_model(m) for m in embedder.models] == [False, True, True, False]
    backend = SqliteFtsBackend(tmp_path / "kb.sqlite3", embedder=embedder)
    acl = DocumentAcl(tenant="t")
    backend.put_documents(
        [Document(source_key="s@1", doc_id="roses", title="花园", body="Roses need water", acl=acl)]
    )
    other, evidence = embedder.embed_across("garden plants")  # type: ignore[misc]
    own = embedder.embed_query("garden plants")
    query = QueryAnalysis("garden plants", "", (own, other), evidence=evidence)  # type: ignore[arg-type]
    viewer = Viewer(tenant="t", subject="u")
    [result] = backend.search([SourceQuery("s@1", 5, float("-inf"), dense_k=5)], query, viewer)
    assert not result.hits and [h.doc_id for h, _ in result.dense] == ["roses"]
    assert result.dense_models == ["multi.zh"] and result.dense[0][1] == pytest.approx(87 / 127, abs=0.01)
    retrieval = Retrieval(backend, embedder=embedder)
    assert retrieval.rank(result, 0.0, query).hits == []  # the other script's rule: 0.69 < 0.80
    assert [h.doc_id for h in retrieval.rank(result, 0.0, query, cut=False).hits] == ["roses"]
    # Without the models (a backend that does not say them), the cited text decides, as before.
    result.dense_models = []
    assert [h.doc_id for h in retrieval.rank(result, 0.0, query).hits] == ["roses"]

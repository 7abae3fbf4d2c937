"""Hybrid ranking: the fusions, the int8 cosine, the exact dense scan, model directories
that cannot be used, and the vector cache. No model file needed here; tests/integration/
test_embedding_model.py runs the real models."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from knowledge_core.adapters.embedding import CachedEmbedder, ModelError, OnnxEmbedder, VectorMatrix, cosines
from knowledge_core.domain.hybrid import Across, HybridRanking
from knowledge_core.ports import Embedder, Hit, Vector


def vec(*values: int) -> bytes:
    return bytes(v & 0xFF for v in values)


def v(*values: int, model: str = "m") -> Vector:
    return Vector(model, vec(*values))


def hit(doc_id: str, score: float) -> Hit:
    return Hit("s@1", doc_id, doc_id.upper(), "rev", score, f"passage of {doc_id}")


def test_r_hybrid_blend_by_hand() -> None:
    """score = w·bm25 + (1−w)·bm25_max·cosine; w = 1 is BM25 alone."""
    lexical = [hit("a", 10.0), hit("b", 6.0), hit("c", 2.0)]
    out = HybridRanking(weight=0.5, fusion="blend").fuse(lexical, [0.2, 0.9, 0.0], [], 5, 0.0)
    assert {h.doc_id: h.score for h in out} == pytest.approx({"a": 6.0, "b": 7.5, "c": 1.0})
    alone = HybridRanking(weight=1.0, fusion="blend").fuse(lexical, [0.0, 1.0, 0.5], [], 5, 0.0)
    assert [(h.doc_id, h.score) for h in alone] == [("a", 10.0), ("b", 6.0), ("c", 2.0)]


def test_r_hybrid_pool_is_at_least_top_k() -> None:
    assert HybridRanking(pool=30).depth(5) == 30
    assert HybridRanking(pool=3).depth(10) == 10
    assert HybridRanking(dense=20).dense_depth(5) == 20
    assert HybridRanking(dense=0).dense_depth(5) == 0  # no dense stage: BM25's candidates re-scored


def test_r_hybrid_int8_cosine() -> None:
    q = v(127, 0, 0)
    got = cosines(q, [v(127, 0, 0), v(0, 127, 0), v(-127, 0, 0), None, v(1, 2), v(127, 0, 0, model="other")])
    assert got[:3] == pytest.approx([1.0, 0.0, -1.0])
    assert got[3:] == [None, None, None]  # missing, another size, or another model: never compared


def test_r_hybrid_fuse_orders_thresholds_and_cuts() -> None:
    """minScore applies to the fused score (never lowered); ties keep BM25 order; at most topK."""
    hits = [hit("a", 10.0), hit("b", 8.0), hit("c", 6.0), hit("d", 1.0)]
    ranking = HybridRanking(weight=0.5, fusion="blend")
    # blended: a 5.0, b 9.0, c 8.0, d 5.5
    out = ranking.fuse(hits, [0.0, 1.0, 1.0, 1.0], [], top_k=3, min_score=5.2)
    assert [(h.doc_id, h.score) for h in out] == [("b", 9.0), ("c", 8.0), ("d", 5.5)]
    tie = ranking.fuse(hits[:2], [0.0, 0.0], [], top_k=5, min_score=0.0)
    assert [h.doc_id for h in tie] == ["a", "b"]
    assert ranking.fuse([], [], [], top_k=5, min_score=0.0) == []


def test_r_hybrid_fuse_adds_what_only_the_dense_stage_found() -> None:
    """A dense-only document counts BM25 0; a document in both keeps its BM25 passage and the better cosine;
    the scale is BM25's best score (1.0 when BM25 found nothing)."""
    ranking = HybridRanking(weight=0.5, fusion="blend")
    lexical = [hit("a", 10.0), hit("b", 4.0)]
    dense_b = Hit("s@1", "b", "B", "rev", 0.9, "the dense passage of b")
    dense = [(hit("z", 0.95), 0.95), (dense_b, 0.9)]
    out = ranking.fuse(lexical, [0.1, 0.2], dense, top_k=5, min_score=0.0)
    # a: 5 + 5·0.1 = 5.5; b: 2 + 5·0.9 = 6.5; z: 0 + 5·0.95 = 4.75
    assert [(h.doc_id, round(h.score, 6)) for h in out] == [("b", 6.5), ("a", 5.5), ("z", 4.75)]
    assert out[0].passage == "passage of b"
    only_dense = ranking.fuse([], [], dense, top_k=5, min_score=0.46)
    assert [(h.doc_id, round(h.score, 6)) for h in only_dense] == [("z", 0.475)]  # 0.5 · 0.95; b 0.45 cut


def test_no_lexical_match_needs_a_close_vector_per_script() -> None:
    """SPEC "no match, no padding": with no BM25 hit in a source, min-max scaling would make the
    nearest vector score (1 − w) · 1 however far it is; a dense-only candidate then counts only at or above
    its script's raw-cosine floor (Latin and CJK passages have their cosines from different models). A floor
    of 0 turns the rule off."""
    ranking = HybridRanking()  # the defaults: blend-norm, floors 0.52 (Latin) and 0.40 (CJK)
    far_en = Hit("s@1", "en", "EN", "rev", 0.0, "an English passage about gardens")
    far_zh = Hit("s@1", "zh", "ZH", "rev", 0.0, "关于花园的中文段落")
    assert ranking.fuse([], [], [(far_en, 0.50), (far_zh, 0.38)], top_k=5, min_score=0.0) == []
    near_zh = Hit("s@1", "zh2", "ZH2", "rev", 0.0, "另一段中文")
    out = ranking.fuse([], [], [(far_en, 0.50), (near_zh, 0.45), (far_zh, 0.38)], top_k=5, min_score=0.0)
    assert [h.doc_id for h in out] == ["zh2"]  # 0.45 passes the CJK floor, 0.50 not the Latin one
    assert ranking.floor_for(False) == 0.52 and ranking.floor_for(True) == 0.40
    near_en = Hit("s@1", "en2", "EN2", "rev", 0.0, "an English passage about flowers")
    with_word_match = ranking.fuse([hit("a", 3.0)], [0.2], [(near_en, 0.60)], top_k=5, min_score=0.0)
    assert {h.doc_id for h in with_word_match} == {"a", "en2"}  # beside a BM25 hit, a close vector answers
    # The ranking itself (kb eval's deep ranking, asked without the doors' cut): nothing dropped, the order
    # and scores the same as with the floor for what both keep.
    deep = ranking.fuse([], [], [(far_en, 0.50), (near_zh, 0.45), (far_zh, 0.38)], 5, 0.0, floored=False)
    assert [h.doc_id for h in deep] == ["en", "zh2", "zh"] and deep[1].score == out[0].score
    off = HybridRanking(no_match_floor=0.0, no_match_floor_cjk=0.0)
    assert [h.doc_id for h in off.fuse([], [], [(far_en, 0.50)], top_k=5, min_score=0.0)] == ["en"]
    for fusion in ("blend", "rrf"):  # every fusion applies it
        assert HybridRanking(fusion=fusion).fuse([], [], [(far_en, 0.50)], top_k=5, min_score=0.0) == []


def test_r_hybrid_fuse_keeps_bm25_where_no_vector_of_the_model() -> None:
    """A BM25 candidate with no vector of the query's model (another script's passage) keeps its BM25 score:
    no semantic evidence is not negative evidence."""
    ranking = HybridRanking(weight=0.1, fusion="blend")
    out = ranking.fuse([hit("zh", 10.0), hit("en", 5.0)], [None, 0.5], [], top_k=5, min_score=0.0)
    assert [(h.doc_id, round(h.score, 6)) for h in out] == [("zh", 10.0), ("en", 5.0)]  # en: 0.5 + 9·0.5


def test_r_hybrid_rrf_on_the_bm25_scale() -> None:
    """rrf: scale · (1/(k+rank_bm25) + 1/(k+rank_dense)) / (2/(k+1)): first in both scores the scale."""
    ranking = HybridRanking(fusion="rrf", rrf_k=1)
    lexical = [hit("a", 8.0), hit("b", 2.0)]
    dense = [(hit("a", 0.9), 0.9), (hit("c", 0.8), 0.8)]
    out = ranking.fuse(lexical, [0.9, 0.1], dense, top_k=5, min_score=0.0)
    # a: 8·(1/2 + 1/2)/1 = 8; b: 8·(1/3) ≈ 2.667; c: 8·(1/3)
    assert [(h.doc_id, round(h.score, 3)) for h in out] == [("a", 8.0), ("b", 2.667), ("c", 2.667)]


def test_r_hybrid_exact_dense_scan() -> None:
    matrix = VectorMatrix("m", [7, 8, 9], [vec(127, 0), vec(0, 127), vec(90, 90)])
    assert [(i, round(c, 3)) for i, c in matrix.nearest(v(127, 0), 2)] == [(7, 1.0), (9, 0.709)]
    assert matrix.nearest(v(127, 0, model="other"), 2) == []  # another model's query: nothing
    assert len(matrix.nearest(v(0, 127), 10)) == 3
    assert VectorMatrix("m", [], []).nearest(v(127, 0), 3) == []


# --- model directories that cannot be used: one line naming the directory, never a crash later ---------
def _model_dir(root: Path, name: str, manifest: dict | None, files: Sequence[str] = ("model.onnx",)) -> Path:
    d = root / name
    d.mkdir(parents=True)
    for f in files:
        (d / f).write_bytes(b"not a model")
    (d / "tokenizer.json").write_text("{}")
    if manifest is not None:
        (d / "model.json").write_text(json.dumps(manifest))
    return d


def test_r_hybrid_bad_model_directories_are_one_line_errors(tmp_path: Path) -> None:
    good = {"id": "m1", "dimensions": 384}
    with pytest.raises(ModelError, match="does not exist"):
        OnnxEmbedder(tmp_path / "nowhere")
    with pytest.raises(ModelError, match="no embedding model"):
        OnnxEmbedder(tmp_path)
    partial = _model_dir(tmp_path / "a", "m1", good, files=())
    with pytest.raises(ModelError, match=r"incomplete \(no model.onnx\)"):
        OnnxEmbedder(partial)
    wrong = _model_dir(tmp_path / "b", "m1", {"id": "../m", "dimensions": "many"})
    with pytest.raises(ModelError, match=r"model.json is invalid \(id, dimensions\)") as info:
        OnnxEmbedder(wrong)
    assert "\n" not in str(info.value)
    _model_dir(tmp_path / "c", "x", good)
    _model_dir(tmp_path / "c", "y", good)
    with pytest.raises(ModelError, match="same model id"):
        OnnxEmbedder(tmp_path / "c")
    corrupt = OnnxEmbedder(_model_dir(tmp_path / "d", "m1", good))  # files present, contents not a model
    with pytest.raises(ModelError, match="cannot be loaded"):
        corrupt.check()


def test_r_hybrid_a_failing_model_leaves_the_query_to_bm25(tmp_path: Path) -> None:
    from knowledge_core.services.retrieval import query_vector

    corrupt = OnnxEmbedder(_model_dir(tmp_path, "m1", {"id": "m1", "dimensions": 384}))
    assert query_vector(corrupt, "battery life") is None
    assert query_vector(None, "battery life") is None


# --- the vector cache -----------------------------------------------------------------------------------
class CountingEmbedder(Embedder):
    models = ("toy",)

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def dimensions(self, model: str) -> int:
        return 2

    def embed_query(self, text: str) -> Vector | None:
        return v(len(text), model="toy")

    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        self.embedded += list(texts)
        return [[v(len(t), 1, model="toy")] if t != "中" else [] for t in texts]


def test_r_hybrid_cache_embeds_each_passage_text_once(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, tmp_path / "cache.sqlite3")
    toy = "toy"
    assert cached.embed_passages(["aa", "b"]) == [[v(2, 1, model=toy)], [v(1, 1, model=toy)]]
    assert cached.embed_passages(["b", "ccc", "aa", "中"]) == [
        [v(1, 1, model=toy)],
        [v(3, 1, model=toy)],
        [v(2, 1, model=toy)],
        [],  # the model does not cover it: remembered as such
    ]
    assert cached.embed_passages(["中"]) == [[]]
    assert inner.embedded == ["aa", "b", "ccc", "中"]
    again = CachedEmbedder(CountingEmbedder(), tmp_path / "cache.sqlite3")  # persists across processes
    assert again.embed_passages(["ccc"]) == [[v(3, 1, model=toy)]]


# --- which models kb serve and kb eval use (kb_cli.models.resolve) ---------------------------------------
def test_r_hybrid_model_choice_for_kb_serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`none` is BM25; an explicit directory that cannot be used is a one-line error; the per-user cache
    that cannot be used falls back to BM25 and says so; no cache at all is BM25, saying how to get models."""
    from kb_cli import models

    monkeypatch.delenv("KB_EMBEDDING_MODEL_DIR", raising=False)
    monkeypatch.setenv("KB_MODELS_DIR", str(tmp_path / "cache"))
    assert models.resolve("none") == (None, "BM25 (embedding model: none)")
    path, line = models.resolve("auto")
    assert path is None and "kb models fetch" in line
    with pytest.raises(models.ModelError, match="does not exist"):
        models.resolve(str(tmp_path / "nowhere"))
    cache = tmp_path / "cache"
    corrupt = _model_dir(
        cache, models.DEFAULT_MODEL, {"id": models.DEFAULT_MODEL, "dimensions": 384, "format": 2}
    )
    assert models.fetched_default() == cache
    path, line = models.resolve("auto")
    assert path is None and line.startswith("BM25 (fallback: embedding model") and "\n" not in line
    with pytest.raises(models.ModelError, match="cannot be loaded"):
        models.resolve(str(corrupt))  # the same directory named explicitly: refuse to start
    monkeypatch.setenv("KB_EMBEDDING_MODEL_DIR", str(corrupt))
    with pytest.raises(models.ModelError):
        models.resolve("auto")  # the environment names it: as explicit


def test_r_hybrid_blend_norm_scales_cosines_per_script() -> None:
    """blend-norm: cosines min-max scaled within each passage script, so a Chinese query's lower cosines with
    English passages compete with its cosines with Chinese passages on equal terms."""
    ranking = HybridRanking(weight=0.5, fusion="blend-norm")
    zh = [Hit("s@1", d, d, "rev", s, "中文段落") for d, s in (("zh-a", 4.0), ("zh-b", 4.0))]
    en = [Hit("s@1", d, d, "rev", s, "an English passage") for d, s in (("en-a", 4.0), ("en-b", 4.0))]
    out = ranking.fuse([*zh, *en], [0.8, 0.7, 0.5, 0.4], [], top_k=5, min_score=0.0)
    # per script: zh-a 1, zh-b 0; en-a 1, en-b 0 → 2 + 2·1 = 4 for the best of each script, 2 for the others
    assert {h.doc_id: h.score for h in out} == {"zh-a": 4.0, "en-a": 4.0, "zh-b": 2.0, "en-b": 2.0}
    plain = HybridRanking(weight=0.5, fusion="blend").fuse(
        [*zh, *en], [0.8, 0.7, 0.5, 0.4], [], top_k=5, min_score=0.0
    )
    assert [h.doc_id for h in plain] == ["zh-a", "zh-b", "en-a", "en-b"]


def test_a_far_vector_beside_word_matches_is_not_padding() -> None:
    """SPEC "no match, no padding", beside BM25's hits: a dense-only hit of the question's own script
    (its model's cosine with the question itself) needs its script's floor too. The walk's case: a Chinese
    question on bee swarming, one English beekeeping note found through the translation's words, and a
    Chinese coffee-machine manual sharing no word with it (bge-zh cosine 0.31) — min-max scaling made the
    manual, alone in its script, the first answer. A hit of the other script (found by the translation's
    or the multilingual vector) is left to fusion as before, and the deep ranking drops nothing."""
    ranking = HybridRanking()
    bees = Hit("s@1", "bees", "Beekeeping", "rev", 3.3, "Count mites with a sugar roll of 300 bees.")
    coffee = Hit("s@1", "coffee", "咖啡机保养手册", "rev", 0.0, "当出水变慢或者咖啡温度下降时需要除垢。")
    swarm = Hit("s@1", "swarm", "分蜂", "rev", 0.0, "如果在巢框底部发现王台，说明蜂群正准备分蜂。")
    question_zh = Across(question_cjk=True, open=False)
    dense = [(swarm, 0.61), (coffee, 0.31)]
    for across in (question_zh, None):  # with the multilingual model, and with the bge pair alone
        out = ranking.fuse([bees], [0.55], dense, 5, 0.0, across=across)
        assert {h.doc_id for h in out} == {"swarm", "bees"}  # the manual (0.31 < 0.40) is not padding
        deep = ranking.fuse([bees], [0.55], dense, 5, 0.0, floored=False, across=across)
        assert {h.doc_id for h in deep} == {"swarm", "bees", "coffee"}
    # An English question: the English note is the question's own script and needs its floor; the Chinese
    # passage is the other script's, left to fusion.
    question_en = Across(question_cjk=False, open=False)
    note = Hit("s@1", "note", "Note", "rev", 0.0, "An English note about kettles")
    out = ranking.fuse([bees], [0.55], [(note, 0.45), (coffee, 0.31)], 5, 0.0, across=question_en)
    assert {h.doc_id for h in out} == {"bees", "coffee"}

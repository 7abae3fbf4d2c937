"""The real embedding models of hybrid ranking, as `kb models fetch` writes them: the
tokenizer gives the golden ids (produced by the reference `tokenizers` pipeline when the project still had
its own WordPiece), each text goes to the model of its script, and the vectors rank a relevant passage above
an unrelated one that shares the query's words — in English and in Chinese."""

from __future__ import annotations

from pathlib import Path

import pytest
from knowledge_core.adapters.embedding import OnnxEmbedder, OnnxModel, cosines

pytestmark = pytest.mark.integration

# Produced by Hugging Face `tokenizers` from the same tokenizer.json (bge-small-en-v1.5).
GOLDEN = {
    "IL-6 levels in CD4+ T-cells (n=12) rose 3.5% vs. α-synuclein β2.": [
        101, 6335, 1011, 1020, 3798, 1999, 3729, 2549, 1009, 1056, 1011, 4442, 1006, 1050, 1027, 2260, 1007,
        3123, 1017, 1012, 1019, 1003, 5443, 1012, 1155, 1011, 19962, 14194, 19856, 1156, 2475, 1012, 102,
    ],
    "Café naïve ÅNGSTRÖM ｆｕｌｌ－ｗｉｄｔｈ 🙂 e\u0301": [
        101, 7668, 15743, 17076, 15687, 100, 1990, 100, 100, 1041, 102,
    ],
    "中文：测试，「引号」 unaffable": [
        101, 1746, 1861, 1993, 100, 100, 1989, 1641, 100, 100, 1642, 14477, 20961, 3468, 102,
    ],
}  # fmt: skip


EN = "bge-small-en-v1.5-q"
ZH = "bge-small-zh-v1.5-q"
MULTI = "multilingual-e5-small-q4"


def bge_pair(root: str) -> list[Path]:
    """The two bge models alone (the fetched cache also holds the multilingual one)."""
    return [Path(root) / EN, Path(root) / ZH]


def test_r_hybrid_tokenizer_matches_the_reference_ids(embedding_model_dir: str) -> None:
    model = OnnxModel(Path(embedding_model_dir) / EN)
    for text, ids in GOLDEN.items():
        assert model.token_ids(text) == ids, text
    assert len(model.token_ids("word " * 2000)) == 512  # truncated to the model's limit, [SEP] kept
    assert model.token_ids("word " * 2000)[-1] == 102


def test_r_hybrid_model_vectors_rank_meaning_over_shared_words(embedding_model_dir: str) -> None:
    model = OnnxEmbedder(bge_pair(embedding_model_dir))
    assert model.models == (EN, ZH)
    (laptop,), (artillery,) = model.embed_passages(
        [
            "Laptop battery\n\nThe notebook's battery drains quickly; lower the screen brightness.",
            "Artillery battery\n\nThe battery of the regiment fired a salute at the ceremony.",
        ]
    )
    assert laptop.model == artillery.model == EN  # English text: the English model
    assert len(laptop.data) == len(artillery.data) == 384
    query = model.embed_query("battery life of my notebook computer")
    assert query is not None and query.model == EN
    near, far = cosines(query, [laptop, artillery])
    assert near is not None and far is not None and near > far + 0.05


def test_r_hybrid_chinese_text_goes_to_the_chinese_model(embedding_model_dir: str) -> None:
    """By script: Chinese text to the Chinese model. Cross-script: English passages get the Chinese model's
    vector too, which a Chinese query can meet."""
    pair = OnnxEmbedder(bge_pair(embedding_model_dir))
    assert [len(v) for v in pair.embed_passages(["中文", "Laptop battery"])] == [1, 1]
    model = OnnxEmbedder(bge_pair(embedding_model_dir), cross_script=True)
    (laptop,), (artillery,), (english, english_zh) = model.embed_passages(
        [
            "笔记本电脑的电池续航很短：降低屏幕亮度可以省电。",
            "炮兵连在典礼上鸣炮致敬，连长表扬了炮手。",
            "Laptop battery",
        ]
    )
    assert (laptop.model, artillery.model, english.model, english_zh.model) == (ZH, ZH, EN, ZH)
    assert len(laptop.data) == 512
    query = model.embed_query("电池 续航")
    assert query is not None and query.model == ZH
    near, far, other, across = cosines(query, [laptop, artillery, english, english_zh])
    assert near is not None and far is not None and near > far + 0.05
    assert other is None  # vectors of two models are never compared
    assert across is not None and across > far  # the Chinese model meets the English passage
    assert OnnxEmbedder(Path(embedding_model_dir) / EN).embed_query("电池 续航") is None  # no model for CJK


def test_the_multilingual_model_reads_both_languages(embedding_model_dir: str) -> None:
    """R-HYBRID, the mixed design with the real models as `kb models fetch` writes them: every
    passage gets its script's bge vector and multilingual-e5's under its script's id; a Chinese question's
    multilingual vector (under the English passages' id) ranks the English passage that answers it above an
    English one that shares no meaning, and its bytes are the evidence's under the Chinese id."""
    model = OnnxEmbedder(embedding_model_dir)
    model.check()  # every file is the one model.json's digests name
    assert model.models == (EN, ZH, f"{MULTI}.zh", f"{MULTI}.en")
    assert model.model_id == f"{EN}+{ZH}+{MULTI}"
    (zh_bge, zh_multi), (laptop_bge, laptop), (_, gun) = model.embed_passages(
        [
            "笔记本电脑的电池续航很短。",
            "Laptop battery\n\nThe notebook's battery drains quickly; lower the screen brightness.",
            "Artillery battery\n\nThe battery of the regiment fired a salute at the ceremony.",
        ]
    )
    assert (zh_bge.model, zh_multi.model) == (ZH, f"{MULTI}.zh")
    assert (laptop_bge.model, laptop.model, gun.model) == (EN, f"{MULTI}.en", f"{MULTI}.en")
    across = model.embed_across("我的笔记本电脑电池续航")
    assert across is not None
    other, evidence = across
    assert (other.model, evidence.model) == (f"{MULTI}.en", f"{MULTI}.zh") and other.data == evidence.data
    near, far, never = cosines(other, [laptop, gun, zh_multi])
    assert near is not None and far is not None and near > far + 0.03
    assert never is None  # the Chinese passage's vector is under the other id: never compared with `other`
    assert model.embed_query("我的笔记本电脑电池续航").model == ZH  # type: ignore[union-attr]


def test_k_rel_the_multilingual_model_matches_the_reference_engine(embedding_model_dir: str) -> None:
    """K-REL: the multilingual model, run by ONNX Runtime from the graph `kb models fetch` writes, gives the
    reference engine's vectors for the same weights (cosine >= 0.998 of the stored int8 vectors; the
    reference quantizes activations to int8, the graph keeps them float32) and its token counts, on text
    that exercises the normalization map (full-width forms, ligatures, tabs, U+FDFA, emoji, CJK)."""
    import json

    import numpy as np

    model = OnnxModel(Path(embedding_model_dir) / MULTI)
    model.check()
    golden = json.loads((Path(__file__).parent / "e5_golden.json").read_text(encoding="utf-8"))
    for case in golden["texts"]:
        ids = model.token_ids(case["text"])
        assert ids == case["ids"] and len(ids) == case["reference_tokens"], case["text"]
        ours = np.frombuffer(model.embed([case["text"]])[0], dtype=np.int8).astype(np.float64)
        ref = np.array(case["reference_int8"], dtype=np.float64)
        assert ours @ ref / np.linalg.norm(ours) / np.linalg.norm(ref) >= 0.998, case["text"]


def test_an_unusable_multilingual_model_leaves_the_bge_pair(
    embedding_model_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-HYBRID: a per-user cache whose multilingual model cannot be used here (a file that is not
    the one its manifest's digest names) ranks with the bge pair beside it, as
    before the mixed design, and the banner line says so — not with BM25 alone. Named explicitly, the same
    directory refuses to start (one line); a container given the two directories joined by os.pathsep ranks
    with both bge models."""
    import json
    import os

    from kb_cli import models
    from tests.conftest import FakeClock, embedded_container

    cache = tmp_path / "cache"
    cache.mkdir()
    for name in (EN, ZH):
        (cache / name).symlink_to(Path(embedding_model_dir) / name, target_is_directory=True)
    multi = cache / MULTI
    multi.mkdir()
    manifest = json.loads((Path(embedding_model_dir) / MULTI / "model.json").read_text())
    for name in ("model.onnx", manifest["tokenizer"], manifest["normalize"]):
        (multi / name).symlink_to(Path(embedding_model_dir) / MULTI / name)
    (multi / "model.json").write_text(json.dumps(manifest | {"onnx_sha256": "0" * 64}))
    monkeypatch.delenv("KB_EMBEDDING_MODEL_DIR", raising=False)
    monkeypatch.setenv("KB_MODELS_DIR", str(cache))

    path, line = models.resolve("auto")
    assert path == os.pathsep.join(str(cache / m) for m in (EN, ZH))
    assert line.startswith(f"hybrid with {EN}+{ZH} (") and "multilingual model left out" in line
    assert "digest mismatch" in line and "\n" not in line
    with pytest.raises(models.ModelError, match="digest mismatch"):
        models.resolve(str(cache))
    embedder = embedded_container(tmp_path, FakeClock(), embedding_model_dir=path).embedder
    assert embedder is not None and embedder.models == (EN, ZH)

"""The real embedding model of hybrid ranking (issue 6), as `kb models fetch` writes it: the plain-Python
WordPiece gives the ids of the reference `tokenizers` implementation, and the vectors rank a relevant
passage above an unrelated one that shares the query's words."""

from __future__ import annotations

import pytest
from knowledge_core.adapters.embedding import OnnxEmbedder, cosines
from knowledge_core.adapters.wordpiece import WordPieceTokenizer

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


def test_r_hybrid_wordpiece_matches_the_reference_tokenizer(embedding_model_dir: str) -> None:
    tok = WordPieceTokenizer.from_file(f"{embedding_model_dir}/tokenizer.json")
    for text, ids in GOLDEN.items():
        assert tok.encode(text, 512) == ids, text


def test_r_hybrid_model_vectors_rank_meaning_over_shared_words(embedding_model_dir: str) -> None:
    model = OnnxEmbedder(embedding_model_dir)
    laptop, artillery = model.embed_passages(
        [
            "Laptop battery\n\nThe notebook's battery drains quickly; lower the screen brightness.",
            "Artillery battery\n\nThe battery of the regiment fired a salute at the ceremony.",
        ]
    )
    assert len(laptop) == len(artillery) == 384
    query = model.embed_query("battery life of my notebook computer")
    assert query is not None
    near, far = cosines(query, [laptop, artillery])
    assert near is not None and far is not None and near > far + 0.05
    assert model.embed_query("电池 续航") is None  # an English model leaves CJK queries to BM25

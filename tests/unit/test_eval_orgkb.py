"""The bilingual organisation set (orgkb) of `kb eval`: its documents, questions, splits, answer spans and
collections (K-REL: its unanswerable questions are what abstention is measured on)."""

from __future__ import annotations

import re
from collections import Counter

from kb_cli.evaluation import COLLECTIONS, ORGKB_DIR, load_collection, orgkb_documents, orgkb_questions

KINDS = ("same", "cross", "near", "far")


def test_orgkb_documents_are_half_chinese_half_english_with_titles() -> None:
    documents = orgkb_documents()
    assert len(documents) >= 36
    files = sorted(p.name for p in (ORGKB_DIR / "docs").glob("*.md"))
    assert "LICENSE.md" in files
    for path in (ORGKB_DIR / "docs").glob("*.md"):
        if path.name != "LICENSE.md":
            assert path.read_text(encoding="utf-8").startswith("# "), path.name
    chinese = [d for d in documents if re.search(r"[\u4e00-\u9fff]", d.title)]
    assert abs(len(chinese) - len(documents) / 2) <= 2
    for d in documents:
        assert d.title and d.title != d.doc_id
        words = len(re.findall(r"[\u4e00-\u9fff]", d.body)) / 1.6 + len(re.findall(r"[A-Za-z]+", d.body))
        assert words >= 250, d.doc_id


def test_orgkb_questions_have_the_documented_shape() -> None:
    rows = orgkb_questions()
    ids = {d.doc_id for d in orgkb_documents()}
    assert len({r["qid"] for r in rows}) == len(rows)
    for r in rows:
        assert set(r) == {"qid", "query", "lang", "kind", "relevant", "answer", "split"}, r["qid"]
        assert r["lang"] in ("zh", "en") and r["kind"] in KINDS and r["split"] in ("tuning", "reported")
        assert (r["lang"] == "zh") == bool(re.search(r"[\u4e00-\u9fff]", r["query"])), r["qid"]
        if r["kind"] in ("near", "far"):
            assert r["relevant"] == [] and r["answer"] == "", r["qid"]
        else:
            assert r["relevant"] and set(r["relevant"]) <= ids and r["answer"], r["qid"]
    kinds = Counter(r["kind"] for r in rows)
    assert kinds["same"] >= 90 and kinds["cross"] >= 50 and kinds["near"] >= 36 and kinds["far"] >= 36


def test_orgkb_every_answer_span_is_verbatim_in_each_relevant_document() -> None:
    bodies = {d.doc_id: f"{d.title}\n{d.body}" for d in orgkb_documents()}
    for r in orgkb_questions():
        for doc_id in r["relevant"]:
            assert r["answer"] in bodies[doc_id], (r["qid"], doc_id)


def test_orgkb_cross_questions_are_asked_in_the_other_language() -> None:
    bodies = {d.doc_id: d.title for d in orgkb_documents()}
    for r in orgkb_questions():
        if r["kind"] in ("same", "cross"):
            doc_lang = "zh" if re.search(r"[\u4e00-\u9fff]", bodies[r["relevant"][0]]) else "en"
            assert (doc_lang == r["lang"]) == (r["kind"] == "same"), r["qid"]


def test_orgkb_splits_halve_every_kind_and_language() -> None:
    groups = Counter((r["kind"], r["lang"], r["split"]) for r in orgkb_questions())
    for kind in KINDS:
        for lang in ("zh", "en"):
            tuning, reported = groups[(kind, lang, "tuning")], groups[(kind, lang, "reported")]
            assert abs(tuning - reported) <= 1, (kind, lang)


def test_orgkb_collections_load_one_half_each() -> None:
    assert {"orgkb", "orgkb-train"} <= set(COLLECTIONS)
    reported, tuning = load_collection("orgkb"), load_collection("orgkb-train")
    rows = orgkb_questions()
    assert len(reported.queries) == sum(r["split"] == "reported" for r in rows)
    assert len(tuning.queries) == sum(r["split"] == "tuning" for r in rows)
    assert not {q.qid for q in reported.queries} & {q.qid for q in tuning.queries}
    assert reported.documents == tuning.documents and len(reported.documents) == len(orgkb_documents())
    assert {q.kind for q in tuning.queries} == set(KINDS)
    assert all(q.relevant == {} for q in tuning.queries if q.kind in ("near", "far"))
    assert len(load_collection("orgkb-train", limit=5).queries) == 5

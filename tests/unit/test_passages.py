"""Structure-aware passages, focused summaries, the relevance cut (I-INGEST, A-SEARCH, R-TOOL)."""

from __future__ import annotations

import json
import math
import os
import random
import re
from pathlib import Path

import pytest
from knowledge_core.domain.fusion import Hit
from knowledge_core.domain.passages import (
    PASSAGE_TOKENS,
    document_passages,
    estimate_tokens,
    pages_of,
    split_passages,
    split_structured,
)
from knowledge_core.domain.relevance import relevance_cut
from knowledge_core.domain.summary import focused_excerpt

DEMO = Path(__file__).resolve().parents[2] / "src" / "kb_cli" / "demo_corpus"

RUNBOOK = """# Failover runbook

Intro text that says what this runbook is for.

## Triage

### Check replication

Run `patronictl list` and read the lag column.

## Other gotchas

## Promote

- step one: fence the old primary
- step two: promote the standby
"""


def test_i_ingest_passages_carry_their_heading_path_not_in_the_cited_text() -> None:
    passages = split_structured(RUNBOOK, "Failover runbook")
    texts = [p.text for p in passages]
    assert texts == [
        "Intro text that says what this runbook is for.",
        "Run `patronictl list` and read the lag column.",
        "- step one: fence the old primary\n- step two: promote the standby",
    ]
    # title › section › subsection: the title travels beside (it equals the H1), the path is matched and
    # embedded (`indexed`), the cited text never repeats it; "Other gotchas" has no text: no passage.
    assert [p.headings for p in passages] == [(), ("Triage", "Check replication"), ("Promote",)]
    assert passages[1].indexed == "Triage › Check replication\nRun `patronictl list` and read the lag column."
    assert all(RUNBOOK[p.start : p.end].strip() == p.text for p in passages)
    assert split_passages(RUNBOOK) == texts


def test_i_ingest_no_passage_is_only_a_heading_or_a_lead_in() -> None:
    body = (DEMO / "09-database-failover-runbook.md").read_text(encoding="utf-8")
    passages = split_structured(body, "On-call Runbook: Metadata Database Failover (PostgreSQL / Patroni)")
    assert all(not p.text.startswith("#") for p in passages)
    assert all(not p.text.rstrip().endswith((":", "：")) for p in passages)
    assert any("Other gotchas:\n\n- **Timeouts" in p.text for p in passages)


def test_i_ingest_long_paragraphs_split_on_sentence_boundaries_english_and_cjk() -> None:
    english = " ".join(
        f"Sentence number {i} tells the supplier about the delivery window." for i in range(80)
    )
    chinese = "".join(f"第{i}句说明供应商的交货时间窗口和到达时间。" for i in range(120))
    for body, end in ((english, "."), (chinese, "。")):
        passages = split_structured(body)
        assert len(passages) > 1
        assert all(p.text.endswith(end) for p in passages), [p.text[-20:] for p in passages]
        assert all(estimate_tokens(p.indexed) <= PASSAGE_TOKENS for p in passages)


def test_i_ingest_lists_and_tables_stay_whole_when_they_fit() -> None:
    table = "| a | b |\n| --- | --- |\n" + "\n".join(f"| row {i} | value {i} |" for i in range(30))
    items = "\n".join(f"- item {i} of the checklist" for i in range(30))
    prose = " ".join(["Some words here."] * 60)
    body = f"{prose}\n\n{table}\n\n{prose}\n\n{items}"
    texts = [p.text for p in split_structured(body)]
    assert any(table in t for t in texts) and any(items in t for t in texts)


def test_i_ingest_pdf_text_splits_by_lines_and_keeps_page_labels() -> None:
    # A PDF page is one block of lines without sentence ends: cut between lines, never inside one.
    pages = ["\n".join(f"line {p}-{i} of the scanned form field value" for i in range(120)) for p in range(3)]
    body, starts = "", []
    for text in pages:
        starts.append(len(body))
        body += text + "\n\n"
    passages = split_structured(body)
    lines = set(body.split("\n"))
    assert all(set(p.text.split("\n")) <= lines for p in passages)
    found = pages_of(passages, starts)
    assert found[0] == [1] and found[-1] == [3]
    assert all(found[i][0] <= found[i + 1][0] for i in range(len(found) - 1))


def test_i_ingest_short_pdf_pages_are_never_packed_into_one_passage() -> None:
    """I-INGEST: a page start is a cut, so a hit on page 2 of a short PDF says "p. 2" (two short pages
    would otherwise pack into one passage labelled "pp. 1–2")."""
    pages = ["Cover page. Routine maintenance keeps the plant running.", "The pump seal part is ZX-42."]
    body, starts = "", []
    for text in pages:
        starts.append(len(body))
        body += text + "\n\n"
    assert len(split_structured(body)) == 1  # without the page starts they pack together
    passages = document_passages(body, "Manual", {"page_starts": starts})
    assert [p.text for p in passages] == pages
    assert pages_of(passages, starts) == [[1], [2]]


def _tokenizers() -> list[object]:
    root = os.environ.get("KB_TEST_EMBEDDING_MODEL_DIR")
    if not root:
        pytest.skip("KB_TEST_EMBEDDING_MODEL_DIR not set (the models' tokenizers)")
    from tokenizers import Tokenizer

    files = sorted(Path(root).glob("*/tokenizer.json"))
    if not files:
        pytest.skip("no tokenizer under KB_TEST_EMBEDDING_MODEL_DIR")
    return [Tokenizer.from_file(str(f)) for f in files]


def test_i_ingest_every_passage_fits_the_models_512_token_window() -> None:
    """The estimate bounds the real WordPiece count: title + heading path + text within 512 tokens for
    every passage of the demo corpus and of every XQuAD article (both languages) with both tokenizers."""
    tokenizers = _tokenizers()
    docs = [(p.stem, p.read_text(encoding="utf-8")) for p in sorted(DEMO.glob("[0-9]*.md"))]
    xquad = Path(os.environ.get("KB_XQUAD_DIR", "/work/shared/eval/xquad"))
    for lang in ("zh", "en"):
        path = xquad / f"xquad.{lang}.json"
        if path.exists():
            for a in json.loads(path.read_text(encoding="utf-8"))["data"]:
                docs.append((a["title"], "\n\n".join(p["context"] for p in a["paragraphs"])))
    worst = 0
    for title, body in docs:
        for p in split_structured(body, title):
            text = f"{title}\n\n{p.indexed}"
            worst = max(worst, *(len(t.encode(text).ids) for t in tokenizers))  # type: ignore[attr-defined]
    assert worst <= 512, worst


def _estimate_by_runs(text: str) -> int:
    """The token estimate's rule as written in the passages module docstring, run by run."""
    n = 0
    for run in re.findall(r"[A-Za-z]+|[0-9]+|\S", text):
        if run[0].isascii() and run[0].isalpha():
            n += math.ceil(len(run) / 3)
        elif run[0].isascii() and run[0].isdigit():
            n += math.ceil(len(run) / 2)
        else:
            n += 1
    return n


def test_i_ingest_token_estimate_is_the_run_rule_on_mixed_text() -> None:
    """I23: the one-findall estimate (a hot spot of bulk ingestion) counts exactly what the run rule does."""
    rng = random.Random(23)
    alphabet = "abcXYZ0123456789 \t\n.,;:-_`*#()[]é中文。！ß\u00a0\u3000"
    texts = ["", " ", "a", "abcd", "1234567", "中文", "x1y22z333", RUNBOOK]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 300))) for _ in range(500)]
    texts += [p.read_text(encoding="utf-8") for p in sorted(DEMO.glob("*.md"))[:5]]
    for text in texts:
        assert estimate_tokens(text) == _estimate_by_runs(text), text


def test_a_search_summary_is_the_best_matching_sentence_window() -> None:
    filler = "The supplier notifies the buyer about every shipment in writing. " * 6
    passage = (
        filler + "The estimated arrival at least three days before delivery is confirmed by email. " + filler
    )
    summary = focused_excerpt(passage, ["estimated", "arrival"], 200)
    assert "The estimated arrival at least three days before delivery is confirmed by email." in summary
    assert len(summary.encode("utf-8")) <= 200 and summary.startswith("…")
    chinese = (
        "供应商每次发货都会书面通知买方。" * 12
        + "预计到达时间至少提前三天通过邮件确认。"
        + "供应商每次发货都会书面通知买方。" * 12
    )
    assert "预计到达时间至少提前三天通过邮件确认。" in focused_excerpt(chinese, ["预计", "到达", "时间"], 200)
    assert focused_excerpt("short text", ["x"], 200) == "short text"


def test_a_search_summary_keeps_markdown_emphasis_with_its_sentence() -> None:
    """A FAQ's bold question ends at its `?**`: the summary shows it as written, not `? **`."""
    topics = ["backups", "failover", "restores", "upgrades", "alerts", "tokens", "exports", "retention"]
    faq = "".join(f"**Q: How do {t} work?**\nAnswer about {t}: see the runbook.\n\n" for t in topics)
    summary = focused_excerpt(faq, ["how", "tokens", "work"], 200)
    assert "**Q: How do tokens work?** Answer about tokens" in summary and "? **" not in summary


def test_a_search_summary_never_cuts_inside_a_code_point() -> None:
    text = "😀" * 500 + " tail"
    out = focused_excerpt(text, ["tail"], 101)
    assert len(out.encode("utf-8")) <= 101 and set(out) <= set("😀… tail") and out.endswith("tail")


TABLE_ZH = (
    "## 升级策略 Escalation\n\n"
    "| 优先级 Priority | L1 → L2 最长停留 |\n"
    "|---|---|\n"
    "| P1 紧急 | 15 分钟 minutes |\n"
    "| P2 重要 | 1 小时 hour |\n"
)
TABLE_EN = (
    "## Rate limits\n\n"
    "| Tier | Requests per minute | Burst |\n"
    "|:-----|-------------------:|:-----:|\n"
    "| Starter | 100 | 20 |\n"
    "| Enterprise | 5000 | 800 |\n"
)


def test_a_search_summary_shows_a_chinese_table_as_text_not_pipes() -> None:
    """A two-column table reads `key: value`, rows parted by `;`, the separator row gone."""
    summary = focused_excerpt(TABLE_ZH, ["p2", "重要"], 960)
    assert "|" not in summary and "---" not in summary
    assert "优先级 Priority: L1 → L2 最长停留; P1 紧急: 15 分钟 minutes; P2 重要: 1 小时 hour" in summary


def test_a_search_summary_names_an_english_table_cells_by_their_header() -> None:
    summary = focused_excerpt(TABLE_EN, ["enterprise", "burst"], 960)
    assert "|" not in summary and "---" not in summary
    assert (
        "Starter — Requests per minute: 100; Burst: 20; Enterprise — Requests per minute: 5000; Burst: 800"
        in (summary)
    )


def test_a_search_table_summary_cut_to_its_byte_budget_stays_within_it() -> None:
    """The legible table is what the window is chosen from, so every budget holds to the byte."""
    rows = "".join(f"| 区域 Region {i} | 延迟 latency {i} 毫秒 ms | owner-{i} |\n" for i in range(60))
    table = "| 区域 Region | 延迟 Latency | Owner |\n|---|---|---|\n" + rows
    for budget in (40, 101, 200, 333, 960):
        summary = focused_excerpt(table, ["region", "42"], budget)
        assert len(summary.encode("utf-8")) <= budget and "|" not in summary
    assert "区域 Region 42 — 延迟 Latency: 延迟 latency 42 毫秒 ms; Owner: owner-42" in focused_excerpt(
        table, ["42"], 200
    )


def test_a_search_summary_keeps_pipes_inside_fenced_code_and_prose() -> None:
    text = "Run it as shown.\n```\n| cat file | grep x |\n```\nA pipe | in prose stays."
    assert focused_excerpt(text, ["pipe"], 960) == " ".join(text.split())


def _hit(doc: str, score: float) -> Hit:
    return Hit("s@1", doc, doc, "r1", score, "text")


def test_r_tool_relevance_cut_keeps_hits_near_the_best_one() -> None:
    hits = [_hit("a", 10.0), _hit("b", 8.0), _hit("c", 6.9), _hit("d", 2.0)]
    assert [h.doc_id for h in relevance_cut(hits, 0.7)] == ["a", "b"]
    assert relevance_cut([], 0.7) == [] and [h.doc_id for h in relevance_cut(hits[:1], 0.7)] == ["a"]

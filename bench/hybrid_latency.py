"""What hybrid ranking costs: warm service search on the demo corpus (embedded backend) in
the default configuration — the embedding models (BM25 + dense first stage, fused) and cross-lingual query
translation (the translation embedded too) — beside the same search with BM25 only, interleaved in one run,
English and Chinese queries; BM25 with query translation alone beside BM25; a repeated query reuses its
cached vectors, so the first time a query is seen is reported apart (the query embedding alone, uncached);
and ingestion throughput with and without passage vectors.

    .venv/bin/python bench/hybrid_latency.py [--model-dir DIR] [--lexicon-dir DIR] [--rounds 200]

The model directory defaults to $KB_EMBEDDING_MODEL_DIR, else `kb models fetch` (every default model,
Maven, once); the lexicon to $KB_LEXICON_DIR, else `kb models fetch --lexicon`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

from _util import interleaved, report  # noqa: E402
from knowledge_core.adapters.embedding import OnnxEmbedder  # noqa: E402
from knowledge_core.bootstrap import Container  # noqa: E402
from knowledge_core.domain.models import Principal  # noqa: E402
from knowledge_core.domain.passages import split_passages  # noqa: E402
from knowledge_core.domain.wire import SearchRequest  # noqa: E402
from knowledge_core.ports import SystemClock  # noqa: E402
from knowledge_core.settings import Settings  # noqa: E402

from kb_cli import demo, models  # noqa: E402

QUERIES = [
    "webhook signature verification",
    "database failover",
    "API rate limit 429",
    "SSO SAML setup",
    "how do I rotate an API key",
    "restore a deleted workspace",
    "如何轮换 API 密钥",
    "数据库故障切换",
    "单点登录配置",
]


def container(tmp: str, name: str, model_dir: str | None, lexicon_dir: str | None = None) -> Container:
    settings = Settings(
        state_backend="sqlite",
        state_path=f"{tmp}/{name}-state.sqlite3",
        search_backend="sqlite",
        sqlite_path=f"{tmp}/{name}.sqlite3",
        token_secret="bench-secret-0123456789abcdef",
        table_name=f"bench-{uuid.uuid4().hex[:8]}",
        embedding_model_dir=model_dir,
        lexicon_dir=lexicon_dir,
    )
    return Container(settings=settings, clock=SystemClock())


def seeded(
    tmp: str, name: str, model_dir: str | None, lexicon_dir: str | None = None
) -> tuple[Container, float, int]:
    c = container(tmp, name, model_dir, lexicon_dir)
    started = time.perf_counter()
    demo.seed(c, with_token=False)
    seconds = time.perf_counter() - started
    return c, seconds, sum(len(split_passages(d.body)) for d in demo.demo_documents())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", default=os.environ.get("KB_EMBEDDING_MODEL_DIR"))
    parser.add_argument("--lexicon-dir", default=os.environ.get("KB_LEXICON_DIR"))
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    model_dir = args.model_dir or str(models.fetch_defaults())
    lexicon_dir = args.lexicon_dir or str(models.fetch_lexicon())
    principal = Principal(client_id="bench", session_id="s1", subject="u1", tenant="default", routes=["demo"])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        plain, plain_s, passages = seeded(tmp, "plain", None)
        hybrid, hybrid_s, _ = seeded(tmp, "hybrid", model_dir, lexicon_dir)
        translated, _, _ = seeded(tmp, "translated", None, lexicon_dir)
        print(
            f"ingest demo corpus ({passages} passages): BM25 {plain_s:.2f} s, hybrid {hybrid_s:.2f} s "
            f"({passages / max(hybrid_s - plain_s, 1e-9):.1f} passages/s embedded)"
        )
        i, j, t = iter(range(10**9)), iter(range(10**9)), iter(range(10**9))

        def hybrid_search() -> None:
            hybrid.knowledge.search(
                principal, "demo", SearchRequest(query=QUERIES[next(i) % len(QUERIES)])
            ).wire()

        def plain_search() -> None:
            plain.knowledge.search(
                principal, "demo", SearchRequest(query=QUERIES[next(j) % len(QUERIES)])
            ).wire()

        def translated_search() -> None:
            translated.knowledge.search(
                principal, "demo", SearchRequest(query=QUERIES[next(t) % len(QUERIES)])
            ).wire()

        s, b = interleaved(hybrid_search, plain_search, args.rounds)
        results.append(
            report(
                "search, hybrid + query translation (English and Chinese queries, vectors cached)",
                s,
                b,
                "same search, BM25 only",
            )
        )
        s, b = interleaved(translated_search, plain_search, args.rounds)
        results.append(report("search, BM25 + query translation", s, b, "same search, BM25 only"))
        embedder = hybrid.embedder
        assert isinstance(embedder, OnnxEmbedder)
        k = iter(range(10**9))

        def embed() -> None:  # the model itself: what a query costs the first time it is seen
            text = QUERIES[next(k) % len(QUERIES)]
            model = embedder.model_for(text)
            assert model is not None
            model.embed([model.manifest.query_prefix + text])

        s, b = interleaved(embed, plain_search, args.rounds)
        results.append(report("query embedding alone (uncached)", s, b, "BM25 search"))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "hybrid_latency.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

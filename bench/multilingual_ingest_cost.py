"""What a multilingual-e5 vector per passage costs at ingestion (the mixed design's price).

The mixed design (docs/archive/quality-log.md, "The mixed design measured") gives every passage a
multilingual-e5-small vector beside its script's bge vector. This measures the embedding throughput of both
on the service's own passages (`document_passages`, embedded as `passage_text` of the title and the indexed
passage, the way ingestion embeds them): the first SciFact abstracts (English) and the demo corpus (Chinese
and English), in interleaved blocks of 32 so that both see the same machine load.

    kb models fetch
    python bench/multilingual_ingest_cost.py [--abstracts 200] [--threads N]

Prints the passages per second of each and their ratio. bge comes from the per-user model cache
(`kb models fetch`).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src")]

from knowledge_core.adapters.embedding import OnnxEmbedder, OnnxModel, passage_text  # noqa: E402
from knowledge_core.domain.passages import document_passages  # noqa: E402

from kb_cli.evaluation import load_collection  # noqa: E402
from kb_cli.models import DEFAULT_MODELS, MULTILINGUAL, default_models_dir  # noqa: E402

BLOCK = 32


def passages(abstracts: int) -> list[str]:
    """What ingestion embeds (`put_documents`: title + each passage as indexed) for the first `abstracts`
    SciFact abstracts and every demo document, read as `kb eval` reads them."""
    docs = load_collection("scifact").documents[:abstracts] + load_collection("demo-all").documents
    return [passage_text(d.title, p.indexed) for d in docs for p in document_passages(d.body, d.title, None)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--abstracts", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="ONNX Runtime threads (0: its default)")
    args = parser.parse_args()

    texts = passages(args.abstracts)
    root = default_models_dir()
    bge = OnnxEmbedder([root / m for m in DEFAULT_MODELS], threads=args.threads)
    e5 = OnnxModel(root / MULTILINGUAL, threads=args.threads)
    bge.embed_passages(texts[:8])  # load both before timing
    e5.embed(["passage: " + t for t in texts[:8]])
    spent = {"bge": 0.0, "e5": 0.0}
    for i in range(0, len(texts), BLOCK):
        block = texts[i : i + BLOCK]
        t0 = time.perf_counter()
        bge.embed_passages(block)
        t1 = time.perf_counter()
        e5.embed(["passage: " + t for t in block])
        spent["bge"] += t1 - t0
        spent["e5"] += time.perf_counter() - t1
    n = len(texts)
    print(
        f"{n} passages ({sum(map(len, texts))} characters): bge {n / spent['bge']:.1f}/s, "
        f"multilingual-e5 {n / spent['e5']:.1f}/s, e5 / bge time {spent['e5'] / spent['bge']:.2f}x"
    )


if __name__ == "__main__":
    main()

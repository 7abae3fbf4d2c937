"""Batch embedding at ingestion against the raw ONNX Runtime batch throughput of the same model
(target ≥ 0.8×), per default model, measured in one run on the same passages.

    .venv/bin/python bench/embed_throughput.py [--model-dir DIR] [--passages 256] [--rounds 3]

raw: the model's `session.run` on batches of 32 already tokenized (the same ids, truncation and padding the
embedder uses, length-sorted the same way), nothing else timed. ours: `OnnxEmbedder.embed_passages` on the
texts — tokenization, routing, pooling, normalisation and int8 packing included. Rounds alternate raw and
ours; the median of each is reported. Passages: XQuAD paragraphs (../shared/eval/xquad), split as the
service splits documents, English for the English model and Chinese for the Chinese one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src")]

from knowledge_core.adapters.embedding import OnnxEmbedder, OnnxModel, passage_text  # noqa: E402
from knowledge_core.domain.passages import split_passages  # noqa: E402

from kb_cli import models  # noqa: E402

BATCH = 32


def xquad_passages(language: str, count: int) -> list[str]:
    base = Path(os.environ.get("KB_XQUAD_DIR") or ROOT.parent / "shared" / "eval" / "xquad")
    data = json.loads((base / f"xquad.{language}.json").read_text(encoding="utf-8"))["data"]
    out: list[str] = []
    for article in data:
        for paragraph in article["paragraphs"]:
            out += [passage_text(article["title"], p) for p in split_passages(paragraph["context"])]
    return out[:count]


def raw_run(model: OnnxModel, texts: list[str]) -> float:
    """ONNX Runtime alone on pre-tokenized batches (the embedder's own tokenizer settings)."""
    import numpy as np

    tokenizer, session = model._load()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    feeds = []
    for start in range(0, len(order), BATCH):
        encoded = tokenizer.encode_batch([texts[i] for i in order[start : start + BATCH]])
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in {i.name for i in session.get_inputs()}:
            feed["token_type_ids"] = np.zeros_like(ids)
        feeds.append(feed)
    started = time.perf_counter()
    for feed in feeds:
        session.run(None, feed)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", default=os.environ.get("KB_EMBEDDING_MODEL_DIR"))
    parser.add_argument("--passages", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    embedder = OnnxEmbedder(args.model_dir or models.fetch_defaults())
    results = []
    for language in ("en", "zh"):
        texts = xquad_passages(language, args.passages)
        model = embedder.model_for(texts[0])
        assert model is not None and all(embedder.model_for(t) is model for t in texts)
        embedder.embed_passages(texts[:BATCH])  # load the model outside the timing
        raw_s, ours_s = [], []
        for _ in range(args.rounds):
            raw_s.append(raw_run(model, texts))
            started = time.perf_counter()
            embedder.embed_passages(texts)
            ours_s.append(time.perf_counter() - started)
        raw = len(texts) / statistics.median(raw_s)
        ours = len(texts) / statistics.median(ours_s)
        row = {
            "model": model.id,
            "passages": len(texts),
            "max_tokens": model.manifest.max_tokens,
            "batch": BATCH,
            "raw_passages_per_s": round(raw, 2),
            "ours_passages_per_s": round(ours, 2),
            "ratio": round(ours / raw, 3),
        }
        results.append(row)
        print(
            f"{model.id:<22} {len(texts)} passages: raw onnxruntime {raw:6.1f}/s, "
            f"embed_passages {ours:6.1f}/s = {ours / raw:.2f}x (target >= 0.8x)"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "embed_throughput.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

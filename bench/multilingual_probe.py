"""A multilingual reader within reach (the cross-lingual target): multilingual-e5-small, dense only.

What holds the Chinese first reference on long documents below 0.95 is a Chinese question's English noise
(docs/archive/quality-log.md, "a Chinese question's English noise"): the service's two models are one per
script (bge-small-en,
bge-small-zh), so a Chinese question meets an English passage only through its lexicon translation, and
fusion cannot tell a translated match that answers from one that is noise. A model that reads both
languages in one space would: multilingual-e5-small (MIT, 4-bit), as `kb models fetch` writes it for ONNX
Runtime. This probe measures it alone, before any integration, on the service's own passages
(`stored_passages`, the splitter every backend uses) of the tasks `kb eval` runs:

- the long documents (`xquad-long[-train]`): doc@1, the nearest passage's document is the question's
  article; passage@1, that passage contains an answer span;
- the XQuAD paragraph tasks (one document per paragraph): R@3 / MRR@3, a document's score its best
  passage's cosine.

It is not a service figure: no BM25, no fusion, no cut. It says how far the model alone gets where the
service's per-script models need the translation.

    kb models fetch --model multilingual-e5-small-q4
    python bench/multilingual_probe.py [--collection xquad-long ...] [--out FILE]

Results: bench/results/multilingual_probe.json (and one line per collection on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src")]

import numpy as np  # noqa: E402
from knowledge_core.adapters.embedding import OnnxModel  # noqa: E402
from knowledge_core.domain.passages import indexed_text, stored_passages  # noqa: E402

from kb_cli.eval_answers import contains_answer, load_xquad_long  # noqa: E402
from kb_cli.evaluation import XQUAD_DIR, load_xquad, mrr_at_k, recall_at_k  # noqa: E402
from kb_cli.models import MULTILINGUAL, default_models_dir  # noqa: E402

DEFAULT = [
    "xquad-long-train",
    "xquad-long",
    "xquad-en-zh-train",
    "xquad-zh-en-train",
    "xquad-en-zh",
    "xquad-zh-en",
]


def _passages(documents: list[Any]) -> tuple[list[str], list[str], list[str]]:
    """Every document's passages as indexed (heading path + text), their owners, and their cited text."""
    texts, owners, plain = [], [], []
    for d in documents:
        for p in stored_passages(d.body, d.title, None):
            texts.append(indexed_text(p.heading_path, p.text))
            owners.append(d.doc_id)
            plain.append(p.text)
    return texts, owners, plain


def _ranked(scores: Any, owners: list[str]) -> list[str]:
    import numpy as np

    seen: dict[str, None] = {}
    for i in np.argsort(-scores):
        seen.setdefault(owners[i], None)
    return list(seen)


def probe(name: str, model: Any, xquad_dir: Path) -> dict[str, Any]:
    import numpy as np

    long = name.startswith("xquad-long")
    if long:
        collection: Any = load_xquad_long("train" if name.endswith("-train") else "test", xquad_dir)
    else:
        task = name.removesuffix("-train")
        collection = load_xquad(task, "train" if name.endswith("-train") else "test", xquad_dir)
    texts, owners, plain = _passages(collection.documents)
    t0 = time.perf_counter()
    vectors = np.vstack([model.passage(texts[i : i + 32]) for i in range(0, len(texts), 32)])
    embed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out: dict[str, Any] = {"documents": len(collection.documents), "passages": len(texts)}
    if long:
        by_lang: dict[str, list[int]] = {}
        for q in collection.queries:
            scores = vectors @ model.query(q.text)
            ranked = _ranked(scores, owners)
            row = by_lang.setdefault(q.lang, [0, 0, 0])
            row[0] += 1
            row[1] += ranked[0] == q.doc_id
            row[2] += contains_answer(plain[int(np.argmax(scores))], q.answers)
        out["by_language"] = {
            lang: {"queries": n, "doc@1": round(d / n, 4), "passage@1 contains answer": round(p / n, 4)}
            for lang, (n, d, p) in by_lang.items()
        }
    else:
        r3 = mrr3 = 0.0
        for q in collection.queries:
            ranked = _ranked(vectors @ model.query(q.text), owners)
            r3 += recall_at_k(ranked, q.relevant, 3)
            mrr3 += mrr_at_k(ranked, q.relevant, 3)
        n = len(collection.queries)
        out.update({"queries": n, "R@3": round(r3 / n, 4), "MRR@3": round(mrr3 / n, 4)})
    out["seconds"] = {"embed passages": round(embed_s, 1), "queries": round(time.perf_counter() - t0, 1)}
    return out


class _E5:
    """The fetched multilingual model with the probe's two calls: unit vectors of passages, of a query."""

    def __init__(self, path: Path) -> None:
        if not (path / "model.json").is_file():
            sys.exit(
                f"multilingual_probe: no model in {path}; `kb models fetch --model {MULTILINGUAL}` first"
            )
        self.model = OnnxModel(path)

    def _unit(self, texts: list[str]) -> np.ndarray:
        rows = [np.frombuffer(v, dtype=np.int8).astype(np.float32) for v in self.model.embed(texts)]
        matrix = np.vstack(rows)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    def passage(self, texts: list[str]) -> np.ndarray:
        return self._unit(["passage: " + t for t in texts])

    def query(self, text: str) -> np.ndarray:
        return self._unit(["query: " + text])[0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--collection", action="append", dest="collections")
    parser.add_argument("--xquad-dir", default=str(XQUAD_DIR))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "multilingual_probe.json"))
    args = parser.parse_args()
    model = _E5(default_models_dir() / MULTILINGUAL)
    results = {}
    for name in args.collections or DEFAULT:
        results[name] = probe(name, model, Path(args.xquad_dir))
        print(name, json.dumps(results[name], ensure_ascii=False), flush=True)
    model_name = f"{MULTILINGUAL} on ONNX Runtime (multilingual-e5-small, 4-bit weights)"
    Path(args.out).write_text(json.dumps({"model": model_name, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()

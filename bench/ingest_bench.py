"""Ingestion throughput (I-INGEST): one 500-document mixed-format job (Markdown, HTML, PDF, DOCX)
worked through by the ingestion service on the embedded defaults (SQLite state and index), in documents/s
and passages/s — beside, in the same run, the raw extraction time of the same files (the floor a job
cannot beat) and, with hybrid ranking, the raw embedding time of the same passages.

    .venv/bin/python bench/ingest_bench.py [--documents 500] [--model-dir DIR | --no-hybrid]
                                           [--opensearch-url URL [--skip-sqlite]]

The model directory defaults to $KB_EMBEDDING_MODEL_DIR (hybrid is skipped without one)."""

from __future__ import annotations

import argparse
import io
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

from knowledge_core.bootstrap import Container  # noqa: E402
from knowledge_core.domain.admin_wire import IngestionJobRequest  # noqa: E402
from knowledge_core.domain.models import SourceDefinition  # noqa: E402
from knowledge_core.domain.passages import split_passages  # noqa: E402
from knowledge_core.extraction import extract  # noqa: E402
from knowledge_core.ports import SystemClock  # noqa: E402
from knowledge_core.settings import Settings  # noqa: E402

SOURCE = "bench-ingest@1.0.0"
PARAGRAPH = (
    "Routine maintenance keeps the plant running: inspect the seals, bearings and filters, record the "
    "readings in the log, and replace any part that shows wear beyond the limits in the manual. "
)


def make_corpus(folder: Path, n: int) -> dict[str, int]:
    """n files, about half Markdown, a quarter HTML, an eighth PDF (3 pages), an eighth DOCX."""
    import docx
    from fpdf import FPDF

    kinds = {"md": 0, "html": 0, "pdf": 0, "docx": 0}
    for i in range(n):
        body = [f"Section {s} of document {i}. " + PARAGRAPH * (2 + (i + s) % 4) for s in range(4)]
        if i % 8 == 3:
            pdf = FPDF()
            pdf.set_font("helvetica", size=11)
            for page in range(3):
                pdf.add_page()
                pdf.multi_cell(0, 6, f"Page {page + 1}. " + " ".join(body))
            (folder / f"d{i:04d}.pdf").write_bytes(bytes(pdf.output()))
            kinds["pdf"] += 1
        elif i % 8 == 7:
            document = docx.Document()
            document.add_heading(f"Document {i}", level=0)
            for s, text in enumerate(body):
                document.add_heading(f"Section {s}", level=1)
                document.add_paragraph(text)
            out = io.BytesIO()
            document.save(out)
            (folder / f"d{i:04d}.docx").write_bytes(out.getvalue())
            kinds["docx"] += 1
        elif i % 4 == 1:
            sections = "".join(f"<h2>Section {s}</h2><p>{t}</p>" for s, t in enumerate(body))
            (folder / f"d{i:04d}.html").write_text(
                f"<html><head><title>Document {i}</title><script>x()</script></head><body><nav>menu</nav>"
                f"<main><h1>Document {i}</h1>{sections}</main><footer>f</footer></body></html>",
                "utf-8",
            )
            kinds["html"] += 1
        else:
            sections = "\n\n".join(f"## Section {s}\n\n{t}" for s, t in enumerate(body))
            (folder / f"d{i:04d}.md").write_text(f"# Document {i}\n\n{sections}\n", "utf-8")
            kinds["md"] += 1
    return kinds


def container(tmp: str, name: str, model_dir: str | None, opensearch_url: str | None) -> Container:
    settings = Settings(
        state_backend="sqlite",
        state_path=f"{tmp}/{name}-state.sqlite3",
        search_backend="opensearch" if opensearch_url else "sqlite",
        sqlite_path=f"{tmp}/{name}.sqlite3",
        opensearch_url=opensearch_url,
        opensearch_index_prefix=f"bench-{uuid.uuid4().hex[:8]}",
        token_secret="bench-secret-0123456789abcdef",
        embedding_model_dir=model_dir,
        ingest_directories=True,
        ingest_roots="/",  # the bench's own corpora, wherever they are
    )
    c = Container(settings, clock=SystemClock())
    c.admin.publish_source(SourceDefinition.model_validate({"id": "bench-ingest", "version": "1.0.0"}))
    return c


def run_job(c: Container, folder: Path) -> dict:
    request = IngestionJobRequest.model_validate({"directory": str(folder), "acl": {"tenant": "bench"}})
    started = time.perf_counter()
    accepted = c.ingestion.submit(SOURCE, request)
    while c.ingestion.work("bench") is not None:
        pass
    seconds = time.perf_counter() - started
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.failed == 0, status
    return {
        "seconds": seconds,
        "documents": status.total,
        "passages": status.passages,
        "documents_per_s": status.total / seconds,
        "passages_per_s": status.passages / seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=500)
    parser.add_argument("--model-dir", default=os.environ.get("KB_EMBEDDING_MODEL_DIR"))
    parser.add_argument("--no-hybrid", action="store_true")
    parser.add_argument("--opensearch-url", help="also run the job on this OpenSearch (BM25 and hybrid)")
    parser.add_argument("--skip-sqlite", action="store_true", help="with --opensearch-url: that backend only")
    args = parser.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="kb-ingest-bench-") as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        kinds = make_corpus(folder, args.documents)
        files = sorted(folder.iterdir())
        size = sum(f.stat().st_size for f in files)
        print(f"corpus: {len(files)} files ({kinds}), {size / 1e6:.1f} MB")

        started = time.perf_counter()
        extracted = [extract(f.name, f.read_bytes()) for f in files]
        extraction = time.perf_counter() - started
        passages = [p for e in extracted for p in split_passages(e.body)]
        results["raw_extraction"] = {
            "seconds": extraction,
            "documents_per_s": len(files) / extraction,
            "passages": len(passages),
        }
        print(
            f"raw extraction            {extraction:7.2f} s  {len(files) / extraction:8.1f} docs/s "
            f"({len(passages)} passages)"
        )

        backends = [] if args.skip_sqlite and args.opensearch_url else [("sqlite", None)]
        backends += [("opensearch", args.opensearch_url)] if args.opensearch_url else []
        hybrid = [None] + ([args.model_dir] if args.model_dir and not args.no_hybrid else [])
        for backend, url in backends:
            for model_dir in hybrid:
                ranking = "hybrid" if model_dir else "bm25"
                name = f"{backend}-{ranking}"
                job = run_job(container(tmp, name, model_dir, url), folder)
                results[f"job_{name}"] = job
                ratio = job["seconds"] / extraction
                print(
                    f"job {name:<21} {job['seconds']:7.2f} s  {job['documents_per_s']:8.1f} docs/s "
                    f"{job['passages_per_s']:8.1f} passages/s | {ratio:5.2f}x raw extraction"
                )
        if args.model_dir and not args.no_hybrid:
            from knowledge_core.adapters.embedding import OnnxEmbedder

            embedder = OnnxEmbedder(args.model_dir)
            embedder.embed_passages(passages[:8])  # load the model outside the timing
            started = time.perf_counter()
            embedder.embed_passages(passages)
            embedding = time.perf_counter() - started
            results["raw_embedding"] = {"seconds": embedding, "passages_per_s": len(passages) / embedding}
            rate = len(passages) / embedding
            print(f"raw embedding             {embedding:7.2f} s  {rate:8.1f} passages/s")
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "ingest_bench.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The long-document task (`kb eval --collection xquad-long`, kb_cli/eval_answers.py) with every article in a
real file format: rendered to PDF (printed by Chromium, as a browser or an office suite saves one), DOCX
or HTML, extracted as an ingestion job extracts it (`knowledge_core.extraction.extract`: title, body, PDF
page starts), then asked the same questions through the same doors. `md` is the task as `kb eval` runs
it (the articles' Markdown as the document body), the figure each format is read against.

    python bench/long_formats.py --format pdf [--split train] [--out bench/results/long-pdf.json]

Needs Chromium for `pdf` (`apt-get install chromium`; KB_CHROMIUM names another binary) with CJK fonts
(scripts/browser_deps.sh installs both), and the models `kb models fetch` puts in the per-user cache (or
`--embedding-model`). Prints the task's table (doc@1, sum@1, ref@1, ref@3, refs, noise, precision).
"""

from __future__ import annotations

import argparse
import html
import io
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

Render = Callable[[str, list[str]], bytes]


def _paragraphs(body: str) -> tuple[str, list[str]]:
    """An article's `# title` and its paragraphs (eval_answers.load_xquad_long writes them so)."""
    head, *paragraphs = body.split("\n\n")
    return head.removeprefix("# "), paragraphs


def _html(title: str, paragraphs: list[str]) -> bytes:
    shown = "".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return (
        f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
        f"<body style='font-size:11pt'><h1>{html.escape(title)}</h1>{shown}</body></html>"
    ).encode()


def _docx(title: str, paragraphs: list[str]) -> bytes:
    import docx

    document = docx.Document()
    document.core_properties.title = title
    document.add_heading(title, 0)
    for p in paragraphs:
        document.add_paragraph(p)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@contextmanager
def _chromium_pdf() -> Iterator[Render]:
    """Chromium's print to PDF (A4) of the article as HTML, one browser for the run."""
    from playwright.sync_api import sync_playwright

    executable = os.environ.get("KB_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("long_formats: no chromium (apt-get install chromium, or KB_CHROMIUM)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable)

        def render(title: str, paragraphs: list[str]) -> bytes:
            page = browser.new_page()
            try:
                page.set_content(_html(title, paragraphs).decode())
                return page.pdf(format="A4")
            finally:
                page.close()

        yield render
        browser.close()


@contextmanager
def _renderer(fmt: str) -> Iterator[Render | None]:
    if fmt == "pdf":
        with _chromium_pdf() as render:
            yield render
    else:
        yield {"md": None, "html": _html, "docx": _docx}[fmt]


def main() -> int:
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "layers" / "knowledge_core")]
    from knowledge_core.domain.models import Document, DocumentAcl
    from knowledge_core.extraction import extract

    from kb_cli import eval_corpus, evaluation
    from kb_cli.eval_answers import evaluate_answers, format_answers, load_xquad_long

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--format", required=True, choices=["md", "pdf", "docx", "html"])
    parser.add_argument("--split", default="train", choices=["train", "test"], help="train: tuning half")
    parser.add_argument("--embedding-model", help="as kb eval's (default: the per-user model cache)")
    parser.add_argument("--embedding-cache", help="as kb eval's: a vector cache for repeated runs")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "opensearch"])
    parser.add_argument("--out", help="results JSON (the task's per-query records)")
    args = parser.parse_args()

    collection = load_xquad_long(args.split, Path(evaluation.XQUAD_DIR))
    stored: list[tuple[str, str, str, dict[str, Any] | None]] = []  # doc_id, title, body, structured
    with _renderer(args.format) as render:
        for d in collection.documents:
            if render is None:
                stored.append((d.doc_id, d.title, d.body, None))
                continue
            name = f"{d.doc_id}.{args.format}"
            extracted = extract(name, render(*_paragraphs(d.body)))
            structured: dict[str, Any] = {"uri": name, "format": extracted.format}
            if extracted.page_starts:
                structured["page_starts"] = extracted.page_starts
            stored.append((d.doc_id, extracted.title or d.title, extracted.body, structured))

    def put(container: Any, source_key: str, documents: Any, name: str, *, progress: bool = True) -> None:
        acl = DocumentAcl(tenant=eval_corpus.EVAL_TENANT)
        for i in range(0, len(stored), eval_corpus.BATCH_DOCS):
            container.admin.put_documents(
                [
                    Document(source_key=source_key, doc_id=i_, title=t, body=b, acl=acl, structured_source=s)
                    for i_, t, b, s in stored[i : i + eval_corpus.BATCH_DOCS]
                ]
            )

    eval_corpus.put_eval_documents = put  # the task ingests through this one function
    kb_eval = argparse.ArgumentParser()
    evaluation.add_arguments(kb_eval)
    given = ["--embedding-model", args.embedding_model] if args.embedding_model else []
    given += ["--embedding-cache", args.embedding_cache] if args.embedding_cache else []
    options = kb_eval.parse_args([*given, "--backend", args.backend])
    semantic, lexicon = evaluation.semantic_from(options), evaluation.lexicon_from(options)
    with evaluation.fresh_container(
        args.backend, evaluation._opensearch_url(options), semantic, lexicon
    ) as container:
        result = evaluate_answers(collection, container, args.backend, progress=False)
    print(f"format: {args.format}, split: {args.split}")
    print(format_answers([result]))
    if args.out:
        Path(args.out).write_text(
            json.dumps(result.to_json(), ensure_ascii=False, indent=1), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

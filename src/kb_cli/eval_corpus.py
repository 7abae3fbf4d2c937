"""What `kb eval`'s retrieval tasks (kb_cli/evaluation.py) and its long-document task (kb_cli/eval_answers.py)
share: the document type, XQuAD's files and fixed split, and how a container ranks. Its own module, so the
two task modules import it and never each other."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BATCH_DOCS = 200
EVAL_TENANT = "eval"  # the tenant of every evaluation document and of the evaluating principal


@dataclass(frozen=True)
class EvalDocument:
    doc_id: str
    title: str
    body: str


def xquad_articles(directory: Path, lang: str) -> list[dict[str, Any]]:
    """The articles of xquad.<lang>.json (SQuAD v1.1: title, paragraphs of context and qas), in file order."""
    data = json.loads((directory / f"xquad.{lang}.json").read_text(encoding="utf-8"))
    return list(data["data"])


def xquad_split(article_index: int) -> str:
    """Fixed split by article: even positions in file order tune ("train"), odd ones are reported ("test")."""
    return "train" if article_index % 2 == 0 else "test"


def hybrid_of(container: Any) -> dict[str, Any] | None:
    """The HybridRanking knobs the container ranks with; None for BM25 alone (no embedding model)."""
    if getattr(container, "embedder", None) is None:
        return None
    return asdict(container.hybrid)


def ranking_of(container: Any) -> str:
    knobs = hybrid_of(container)
    translator = getattr(container, "translator", None)
    translated = f" + translation {translator.name}" if translator is not None else ""
    if knobs is None:
        return "bm25" + translated
    return (
        f"hybrid {container.embedder.model_id} " + " ".join(f"{k}={v}" for k, v in knobs.items()) + translated
    )


def put_eval_documents(
    container: Any, source_key: str, documents: list[EvalDocument], name: str, *, progress: bool = True
) -> None:
    """The evaluation documents into `source_key` (tenant `EVAL_TENANT`) in batches, with a progress bar:
    how both evaluation tasks ingest."""
    from knowledge_core.domain.models import Document, DocumentAcl
    from tqdm import tqdm

    acl = DocumentAcl(tenant=EVAL_TENANT)
    with tqdm(
        total=len(documents), unit="doc", desc=f"ingest {name}", disable=not progress, file=sys.stderr
    ) as bar:
        for i in range(0, len(documents), BATCH_DOCS):
            batch = documents[i : i + BATCH_DOCS]
            container.admin.put_documents(
                [
                    Document(source_key=source_key, doc_id=d.doc_id, title=d.title, body=d.body, acl=acl)
                    for d in batch
                ]
            )
            bar.update(len(batch))

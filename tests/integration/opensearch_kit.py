"""What the real-node OpenSearch tests of the passages index share (shards, compaction, field limit): a
small source of four documents, its viewer, and two readings of an index (the top document of a query
through the retrieval step, and every row's id)."""

from __future__ import annotations

from knowledge_core.adapters.opensearch import OpenSearchBackend
from knowledge_core.domain.models import Document, DocumentAcl, Viewer
from knowledge_core.services.retrieval import Retrieval

from tests.contract.conftest import ranked

VIEWER = Viewer(tenant="acme", subject="alice")
KEY = "kit@1.0.0"
DOCS = [
    Document(source_key=KEY, doc_id=doc_id, title=title, body=body, acl=DocumentAcl(tenant="acme"))
    for doc_id, title, body in (
        (
            "failover",
            "Failover",
            "# Failover\n\nPromote the standby replica with patronictl.\n\nCheck the lag.",
        ),
        ("backup", "Backups", "# Backups\n\nNightly base backups go to object storage.\n\nRestore weekly."),
        ("gateway", "Gateway", "# Gateway\n\nThe gateway sends a heartbeat every 60 seconds."),
        ("boiler", "Boiler", "# Boiler\n\nThe safety valve is tested every month by the operator."),
    )
]


def top_doc(backend: OpenSearchBackend, query: str) -> list[str]:
    """The best document for `query` in KEY as VIEWER sees it (none: an empty list)."""
    return [h.doc_id for h in ranked(Retrieval(backend), KEY, 5, query, VIEWER)[:1]]


def row_ids(backend: OpenSearchBackend) -> list[str]:
    """Every passage row's id in the passages alias, after a refresh."""
    backend.client.indices.refresh(index=backend.passages_alias)
    hits = backend.client.search(index=backend.passages_alias, body={"size": 100, "_source": False})
    return sorted(h["_id"] for h in hits["hits"]["hits"])

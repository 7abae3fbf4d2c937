"""Warm in-process latency of search and read on the demo corpus (embedded backend), and the cost of
signing + verifying a ref; each beside a baseline measured interleaved in the same run.

Targets (issue: agent knowledge API): search p50 <= 5 ms, read p50 <= 3 ms, ref sign+verify <= 5x a raw
`hmac.digest` loop."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "knowledge_core"), str(ROOT / "src"), str(ROOT / "bench")]
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")

from _util import interleaved, report  # noqa: E402
from knowledge_core.bootstrap import Container  # noqa: E402
from knowledge_core.codec import identity_digest  # noqa: E402
from knowledge_core.domain.models import Principal, Viewer  # noqa: E402
from knowledge_core.domain.wire import ReadRequest, SearchRequest  # noqa: E402
from knowledge_core.ports import QueryAnalysis, SourceQuery, SystemClock  # noqa: E402
from knowledge_core.settings import Settings  # noqa: E402

from kb_cli import demo  # noqa: E402

QUERIES = [
    "网关离线怎么排查",
    "webhook signature verification",
    "退款窗口设为0会怎样",
    "database failover",
    "固件升级失败",
    "API rate limit 429",
    "传感器校准",
    "SSO SAML setup",
]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            state_backend="sqlite",
            state_path=f"{tmp}/state.sqlite3",
            search_backend="sqlite",
            sqlite_path=f"{tmp}/kb.sqlite3",
            token_secret="bench-secret-0123456789abcdef",
            table_name=f"bench-{uuid.uuid4().hex[:8]}",
        )
        c = Container(settings=settings, clock=SystemClock())
        demo.seed(c, with_token=False)
        principal = Principal(
            client_id="bench", session_id="s1", subject="u1", tenant="default", routes=["demo"]
        )
        svc, backend = c.knowledge, c.backend
        scope = c.scopes.resolve("demo")
        source = scope.searchable()[0]
        query = SourceQuery(source.key, source.definition.top_k, source.definition.min_score)
        viewer = Viewer(tenant="default", subject="u1")
        i = iter(range(10**9))

        def search() -> None:
            svc.search(principal, "demo", SearchRequest(query=QUERIES[next(i) % len(QUERIES)])).wire()

        j = iter(range(10**9))

        def raw_search() -> None:
            backend.search([query], QueryAnalysis(QUERIES[next(j) % len(QUERIES)]), viewer)

        results = []
        s, b = interleaved(search, raw_search, args.rounds)
        results.append(
            report("search (service, 3 hints)", s, b, "raw backend.search", "(target p50 <= 5 ms)")
        )

        hint = svc.search(principal, "demo", SearchRequest(query="database failover runbook")).wire()[
            "hints"
        ][0]
        # The hint's document, by the revision the hint carries (a ref's doc id is encrypted: A-REF, I1).
        [doc_id] = [d.doc_id for d in backend.list_documents(source.key) if d.revision == hint["revision"]]

        def read() -> None:
            svc.read(principal, "demo", ReadRequest(ref=hint["ref"])).wire()

        def raw_get() -> None:
            backend.get_document(source.key, doc_id)

        s, b = interleaved(read, raw_get, args.rounds)
        results.append(
            report("read (service, 16 KiB page)", s, b, "raw backend.get_document", "(target p50 <= 3 ms)")
        )

        codec = c.codec
        identity = identity_digest(principal, "demo", None)
        key = hashlib.sha256(b"k").digest()

        def sign_verify() -> None:
            ref, _ = codec.issue_ref(
                identity=identity,
                scope_revision=scope.revision,
                source_key=source.key,
                doc_id=doc_id,
                revision=hint["revision"],
            )
            codec.open_ref(ref, identity=identity)

        message = b"x" * 300  # about the size of a ref payload

        def raw_hmac() -> None:
            # sign + verify = two MACs; the baseline does the same two
            hmac.digest(key, message, "sha256")
            hmac.digest(key, message, "sha256")

        s, b = interleaved(sign_verify, raw_hmac, args.rounds * 10)
        results.append(report("ref sign+verify", s, b, "2x raw hmac.digest", "(target <= 5x)"))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "api_latency.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

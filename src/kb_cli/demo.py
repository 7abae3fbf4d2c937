"""The demo workspace: route `demo` -> agent `demo-agent@1.0.0` -> source `demo-docs@1.0.0` with a
Chinese and English product-support knowledge base (demo_corpus/)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from knowledge_core.domain.models import AgentDefinition, Document, DocumentAcl, SourceDefinition

if TYPE_CHECKING:
    from knowledge_core.bootstrap import Container

CORPUS = Path(__file__).parent / "demo_corpus"
ROUTE = "demo"
SOURCE = {
    "id": "demo-docs",
    "version": "1.0.0",
    "description": "Lumen Device Cloud 产品支持与运维知识库 product support, operations, billing, devices",
    "tags": ["支持", "运维", "support", "operations"],
    "topK": 5,
    "minScore": 0.0,
}
AGENT = {
    "id": "demo-agent",
    "version": "1.0.0",
    "systemPrompt": "You are the Lumen Device Cloud support agent. Cite the knowledge you use.",
    "modelProfile": {"candidates": [{"model": "model-a", "toolCalling": True}]},
    "allowedKnowledge": [{"id": "demo-docs", "version": "1.0.0"}],
}
DEFAULT_TENANT = "default"  # SPEC §1: the demo workspace's, its token's, and every command's default
LEGACY_TENANT = "demo"  # what a .kb-state seeded before the default tenant holds
PRINCIPAL = {"client_id": "demo-client", "subject": "demo-user", "tenant": DEFAULT_TENANT}
_TOOL_MODEL = {"candidates": [{"model": "model-a", "toolCalling": True}]}
# Agents of the agent_tools examples (events/agent_tools/): definitions only, so route `demo` is unchanged.
TOOL_AGENTS = [
    {
        "id": "demo-router",
        "version": "1.0.0",
        "systemPrompt": "Route knowledge by rules (AUTO).",
        "modelProfile": _TOOL_MODEL,
        "allowedKnowledge": [{"id": "demo-docs", "version": "1.0.0"}],
        "knowledgeRouting": {
            "mode": "AUTO",
            "maxSources": 2,
            "topK": 5,
            "maxContextChars": 4000,
            "failurePolicy": "SKIP_TRANSIENT",
            # NONE: the tool cites in the order search ranks. With LEXICAL the first reference was relevant
            # for 0.70 of the demo's Chinese questions instead of 0.79 (bench/tool_rerank.py).
            "rerank": "NONE",
            "rules": [
                {
                    "knowledge": {"id": "demo-docs", "version": "1.0.0"},
                    "always": True,
                    "contextEquals": {"projectType": "monitor"},
                    "priority": 10,
                }
            ],
        },
    },
    {
        "id": "demo-ondemand",
        "version": "1.0.0",
        "systemPrompt": "Search knowledge only when needed.",
        "modelProfile": _TOOL_MODEL,
        "allowedKnowledge": [{"id": "demo-docs", "version": "1.0.0"}],
        "knowledgeRouting": {"mode": "ON_DEMAND", "topK": 5},
    },
    {
        "id": "demo-eager",
        "version": "1.0.0",
        "systemPrompt": "Retrieve at startup (EAGER).",
        "modelProfile": _TOOL_MODEL,
        "allowedKnowledge": [{"id": "demo-docs", "version": "1.0.0"}],
        "knowledgeRouting": {"mode": "EAGER", "maxSources": 1, "topK": 3},
    },
]


def markdown_document(
    source_key: str, doc_id: str, text: str, title: str | None = None, *, tenant: str = PRINCIPAL["tenant"]
) -> Document:
    """A Markdown/text file as a document of `tenant`: the first `# heading` is the title unless one is
    given."""
    from knowledge_core.extraction import markdown_title

    if title is None:
        title, text = markdown_title(text)
    return Document(
        source_key=source_key, doc_id=doc_id, title=title or doc_id, body=text, acl=DocumentAcl(tenant=tenant)
    )


def demo_documents() -> list[Document]:
    source_key = f"{SOURCE['id']}@{SOURCE['version']}"
    return [
        markdown_document(source_key, path.stem, path.read_text(encoding="utf-8"))
        for path in sorted(CORPUS.glob("*.md"))
        if path.name != "LICENSE.md"
    ]


def issue_token(container: Container, ttl_seconds: int = 7 * 86400) -> str:
    token, _ = container.access.issue_token(
        routes=[ROUTE],
        ttl_seconds=ttl_seconds,
        client_id=PRINCIPAL["client_id"],
        subject=PRINCIPAL["subject"],
        tenant=PRINCIPAL["tenant"],
    )
    return token


def seeding_note(container: Container, embedded: bool) -> str | None:
    """What a door says before `seed_if_absent(vectors_later=True)` when it will seed with an embedding
    model in force (the text is stored in seconds; embedding the passages takes minutes on 2 cores, so it
    is done in the background); None otherwise."""
    if embedded and container.state.registry.get_workspace_agent(ROUTE) is None:
        return (
            f"seeding the demo workspace '{ROUTE}': searchable by BM25 at once, its passages' vectors "
            "filled in the background (a few minutes; hybrid ranking once they are in)"
        )
    return None


def seed_if_absent(container: Container, *, vectors_later: bool = False) -> bool:
    """Seed the demo workspace unless route `demo` already exists (then nothing is touched: a user's
    changes to it survive a restart). True when it was seeded now. `vectors_later`: as `seed`'s."""
    if container.state.registry.get_workspace_agent(ROUTE) is not None:
        adopt_default_tenant(container)
        return False
    seed(container, with_token=False, vectors_later=vectors_later)
    return True


def adopt_default_tenant(container: Container) -> int:
    """A state seeded before the default tenant keeps working: the demo source's documents of the old demo
    tenant move to `default` (same title and body, so the same revision), which the demo token, `kb ingest`
    and the console use now. Idempotent; returns how many moved."""
    key = f"{SOURCE['id']}@{SOURCE['version']}"
    backend = container.backend
    legacy = [d.doc_id for d in backend.list_documents(key, 10_000) if d.tenant == LEGACY_TENANT]
    for i in range(0, len(legacy), 50):
        docs = [backend.get_document(key, doc_id) for doc_id in legacy[i : i + 50]]
        container.admin.put_documents(
            [
                d.model_copy(update={"acl": d.acl.model_copy(update={"tenant": DEFAULT_TENANT})})
                for d in docs
                if d is not None and d.acl.tenant == LEGACY_TENANT
            ]
        )
    return len(legacy)


def seed(
    container: Container,
    *,
    with_token: bool = True,
    ttl_seconds: int = 7 * 86400,
    vectors_later: bool = False,
) -> str | None:
    """Publish the demo source and agent, ingest the corpus, then point route `demo` at it; return a token.
    The route comes last: it is what `seed_if_absent` looks for, so a seed cut short (Ctrl-C while it
    stores) is done again on the next start instead of leaving a half-filled workspace. `vectors_later`:
    the passages are stored without their vectors (BM25 finds them at once; `local_env.VectorFill` embeds
    them in the background, and every door ranks by BM25 until then)."""
    admin = container.admin
    admin.publish_source(SourceDefinition.model_validate(SOURCE))
    admin.publish_agent(AgentDefinition.model_validate(AGENT))
    for agent in TOOL_AGENTS:
        admin.publish_agent(AgentDefinition.model_validate(agent))
    with container.backend.deferred_vectors() if vectors_later else contextlib.nullcontext():
        admin.put_documents(demo_documents())
    admin.set_workspace(ROUTE, f"{AGENT['id']}@{AGENT['version']}")
    return issue_token(container, ttl_seconds) if with_token else None

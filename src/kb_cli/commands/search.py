"""`kb search --route R "query"`: search as a route, and say why nothing came back.

The search itself is the public API's, unchanged; the explanation comes from the admin listings (the
route's agent, its routing and its sources) planned with the service's own router."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..http import ApiError, seg
from ..local_env import _write_private
from . import Call, Subparsers, add_endpoint

if TYPE_CHECKING:
    from knowledge_core.domain.models import AgentDefinition
    from knowledge_core.domain.scope import KnowledgeScope


def register(sub: Subparsers) -> None:
    p = sub.add_parser("search", help="search as a workspace route; an empty answer says why")
    add_endpoint(p, "; also where the reused token is kept")
    p.add_argument("--route", required=True, help="workspace route (e.g. demo)")
    p.add_argument("--tenant", default="default", help="the tenant to search as (SPEC §1 default)")
    p.add_argument(
        "--token",
        help="a bearer token (env KB_TOKEN); default: one for --route, kept (0600) in --state and reused "
        "until it expires or is revoked",
    )
    p.add_argument("--limit", type=int, default=3)
    p.add_argument(
        "--json",
        action="store_true",
        help="the search API's answer as JSON (hints, refs, status; with no hint, `no_hints`: why)",
    )
    p.add_argument("query")
    p.set_defaults(func=cmd_search)


def cmd_search(args: argparse.Namespace, call: Call) -> int:
    given = args.token or os.environ.get("KB_TOKEN")
    path = f"/agent-api/v1/workspaces/{seg(args.route)}/knowledge/search"
    body = {"query": args.query, "limit": args.limit}
    try:
        answer = call(args.endpoint, "POST", path, body, headers=_bearer(given or _route_token(args, call)))
    except ApiError as exc:
        if given or exc.status != 401:
            raise
        # The kept token was revoked (or the server's state was reset): a new one, once.
        answer = call(args.endpoint, "POST", path, body, headers=_bearer(_mint(args, call)))
    hints = answer.get("hints", [])
    if args.json:
        # The search API's answer, plus (when it holds no hint) the reasons the plain output prints.
        reasons = {} if hints else {"no_hints": explain(args, call)}
        print(json.dumps({**answer, **reasons}, ensure_ascii=False, indent=2))
        return 0
    for i, hint in enumerate(hints, 1):
        print(f"{i}. {hint['title']}  (score {hint['score']:.3f})\n{_summary(hint)}")
    if answer.get("status") != "ok":
        print(f"status: {answer.get('status')}")
    if not hints:
        print("no hints:")
        for reason in explain(args, call):
            print(f"  - {reason}")
    return 0


def _summary(hint: dict[str, Any]) -> str:
    """A hint's whole summary (the window of its passage the service chose to carry the answer, already
    within the response's byte budget), indented and wrapped to the terminal's width."""
    width = max(40, shutil.get_terminal_size().columns)
    return textwrap.fill(
        " ".join(hint["summary"].split()), width, initial_indent="   ", subsequent_indent="   "
    )


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


TOKEN_FILE = "cli-tokens.json"  # in the state directory: the token `kb search` reuses, per route
TOKEN_TTL_S = 3600
TOKEN_MARGIN_S = 30  # a kept token this close to its expiry is replaced, not sent


def _route_token(args: argparse.Namespace, call: Call) -> str:
    """The token `kb search` keeps for this endpoint, tenant and route while it is valid; else a new one."""
    kept = _kept_tokens(Path(args.state)).get(_token_key(args))
    if isinstance(kept, dict) and kept.get("expires_at", 0) > time.time() + TOKEN_MARGIN_S:
        return str(kept["token"])
    return _mint(args, call)


def _mint(args: argparse.Namespace, call: Call) -> str:
    """A new token for the route, kept (0600, in the 0700 state directory) for the next searches."""
    from knowledge_core.adapters.private_files import private_path

    body = {"routes": [args.route], "client_id": "kb-search", "subject": "kb-search", "tenant": args.tenant}
    issued = call(args.endpoint, "POST", "/admin/v1/tokens", {**body, "ttl_seconds": TOKEN_TTL_S})
    state = Path(args.state)
    private_path(state, directory=True)
    now = time.time()
    kept = {k: v for k, v in _kept_tokens(state).items() if v.get("expires_at", 0) > now}
    kept[_token_key(args)] = {"token": issued["token"], "expires_at": issued["expires_at"]}
    _write_private(state / TOKEN_FILE, json.dumps(kept, indent=1) + "\n")
    return str(issued["token"])


def _kept_tokens(state: Path) -> dict[str, dict[str, Any]]:
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads((state / TOKEN_FILE).read_text(encoding="utf-8"))
        if isinstance(kept, dict):
            return {k: v for k, v in kept.items() if isinstance(v, dict)}
    return {}


def _token_key(args: argparse.Namespace) -> str:
    return f"{args.endpoint.rstrip('/')} {args.tenant} {args.route}"


def explain(args: argparse.Namespace, call: Call) -> list[str]:
    """Why a search of the route returned nothing: no agent, no source selected (and why), or nothing of
    the tenant above the sources' minScore."""
    from knowledge_core.domain.models import AgentDefinition
    from knowledge_core.domain.router import plan_search

    routes = {
        w["route"]: w["agent"] for w in call(args.endpoint, "GET", "/admin/v1/workspaces")["workspaces"]
    }
    if args.route not in routes:
        return [f"route {args.route!r} points at no agent (kb workspace set {args.route} --agent ID@VERSION)"]
    agents = {a["key"]: a for a in call(args.endpoint, "GET", "/admin/v1/agents")["agents"]}
    agent = AgentDefinition.model_validate(agents[routes[args.route]]["definition"])
    sources = {s["key"]: s for s in call(args.endpoint, "GET", "/admin/v1/sources")["sources"]}
    scope = _scope(args.route, agent, sources)
    planned = plan_search(scope, args.query)
    if not planned:
        return _no_source(agent, scope)
    return [_nothing_above(args, call, sources[p.key]) for p in planned]


def _scope(route: str, agent: AgentDefinition, sources: dict[str, dict]) -> KnowledgeScope:
    from knowledge_core.domain.models import Source, SourceDefinition, SourceState
    from knowledge_core.domain.scope import KnowledgeScope

    def source(summary: dict | None) -> Source | None:
        if summary is None:
            return None
        definition = SourceDefinition.model_validate(
            {k: summary[k] for k in ("id", "version", "description", "tags")}
            | {"topK": summary["top_k"], "minScore": summary["min_score"]}
        )
        return Source(
            definition=definition, state=SourceState(status=summary["status"], enabled=summary["enabled"])
        )

    sources_in_scope = {k: source(sources.get(k)) for k in agent.allowed_keys}
    return KnowledgeScope(route=route, agent=agent, sources=sources_in_scope)


def _no_source(agent: AgentDefinition, scope: KnowledgeScope) -> list[str]:
    routing = agent.routing
    mode = routing.mode or "legacy"
    reasons = [f"no source selected: agent {agent.key} routes {mode}"]
    searchable = {s.key for s in scope.searchable()}
    for key in agent.allowed_keys:
        if key not in searchable:
            reasons.append(f"{key} is not searchable now (unpublished, disabled or inactive)")
    for rule in routing.rules:
        needs = [f"context {k}={v}" for k, v in rule.context_equals.items()]
        needs += [f"a query term of {rule.query_terms}"] if rule.query_terms and not rule.always else []
        needs += [f"a tag of {rule.tags} in the query"] if rule.tags and not rule.always else []
        reasons.append(
            f"the rule for {rule.knowledge.key} needs {', '.join(needs) or 'nothing'}; "
            "a search carries no context"
        )
    if mode in ("AUTO", "ON_DEMAND"):
        reasons.append("sources without a rule are chosen when a query word is in their description or tags")
    return reasons


def _nothing_above(args: argparse.Namespace, call: Call, source: dict) -> str:
    docs = call(args.endpoint, "GET", f"/admin/v1/sources/{seg(source['key'])}/documents")["documents"]
    mine = sum(1 for d in docs if d.get("tenant") == args.tenant and d["status"] == "ready")
    if not mine:
        tenants = sorted({d.get("tenant") or "—" for d in docs})
        return (
            f"{source['key']} was searched but holds no ready document of tenant {args.tenant!r} "
            f"(its documents' tenants: {', '.join(tenants) or 'none'})"
        )
    return (
        f"{source['key']} was searched ({mine} document(s) of tenant {args.tenant!r}) but nothing matched: "
        f"none scored above its minScore {source['min_score']}, or, sharing no word with the query, none "
        "was close enough in meaning"
    )

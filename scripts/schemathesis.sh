#!/usr/bin/env bash
# Fuzz every operation of openapi.json against a fresh `kb serve` on loopback with the demo token
# (the security reviews): every check schemathesis has (`--checks all`), 0 failures expected; bounded examples,
# fixed seed; stateful links where schemathesis finds them. tests/schemathesis.toml names the two operations
# that refuse schema-valid data by design (an opaque signed ref; directory jobs, which this run disables).
# The coverage phase also probes methods the API does not have (TRACE, QUERY, …): the gateway routes them
# like API Gateway, to the catch-all route (a known path: 405 with Allow; any other: a typed 404).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
STATE=$(mktemp -d)
PORT=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# BM25 (the API's contract does not depend on ranking; seeding the demo with both models takes a minute)
# No directory ingestion: a generated absolute path would have kb serve read this machine's files.
KB_INGEST_DIRECTORIES=false $BIN/kb serve --state "$STATE" --port "$PORT" --embedding-model none >"$STATE/serve.log" 2>&1 &
SERVER=$!
cleanup() { kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$STATE"; }
trap cleanup EXIT
for _ in $(seq 1 120); do
  [ -s "$STATE/demo-token" ] && grep -q "listening" "$STATE/serve.log" && break
  sleep 0.5
done
TOKEN=$(cat "$STATE/demo-token")
OPERATOR=$(cat "$STATE/operator-credential")  # G-LOCAL: the admin API needs kb serve's operator credential
cd "$STATE"  # schemathesis writes its reports here
"$OLDPWD/$BIN/schemathesis" --config-file "$OLDPWD/tests/schemathesis.toml" run "$OLDPWD/openapi.json" --url "http://127.0.0.1:$PORT" \
  -H "Authorization: Bearer $TOKEN" -H "X-Kb-Operator: $OPERATOR" \
  --checks all \
  --phases examples,coverage,fuzzing,stateful --max-examples "${KB_FUZZ_EXAMPLES:-50}" --seed 14 -w 1 "$@"

#!/usr/bin/env bash
# Fuzz every operation of openapi.json against a fresh `kb serve` on loopback with the demo token
# (issue 14): not_a_server_error, status_code_conformance, content_type_conformance,
# response_schema_conformance; bounded examples, fixed seed; stateful links where schemathesis finds them.
# The coverage phase also probes methods the API does not have (TRACE, QUERY, …): the gateway routes them
# like API Gateway (the catch-all route or a typed 404, JSON, no-store).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
STATE=$(mktemp -d)
PORT=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# BM25 (the API's contract does not depend on ranking; seeding the demo with both models takes a minute)
$BIN/kb serve --state "$STATE" --port "$PORT" --embedding-model none >"$STATE/serve.log" 2>&1 &
SERVER=$!
cleanup() { kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$STATE"; }
trap cleanup EXIT
for _ in $(seq 1 120); do
  [ -s "$STATE/demo-token" ] && grep -q "listening" "$STATE/serve.log" && break
  sleep 0.5
done
TOKEN=$(cat "$STATE/demo-token")
cd "$STATE"  # schemathesis writes its reports here
"$OLDPWD/$BIN/schemathesis" run "$OLDPWD/openapi.json" --url "http://127.0.0.1:$PORT" \
  -H "Authorization: Bearer $TOKEN" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --phases examples,coverage,fuzzing,stateful --max-examples "${KB_FUZZ_EXAMPLES:-50}" --seed 14 -w 1 "$@"

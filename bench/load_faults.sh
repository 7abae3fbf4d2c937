#!/usr/bin/env bash
# Load and faults on loopback only: kb serve on its own OpenSearch node (SQLite state), locust
# headless with 16 users for 60 s (search / read / knowledge_search), the node stopped at +25 s and started
# again at +27 s (it takes ~40 s to come back here; KB_FAULTS=0: no fault). Prints locust's stats, the typed outcomes, and a check after.
# Needs locust (not a project dependency): LOCUST=/path/to/locust.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
LOCUST=${LOCUST:-locust}
WORK=$(mktemp -d)
OUT=${KB_LOAD_OUT:-bench/results/load}
mkdir -p "$(dirname "$OUT")"
export KB_OPENSEARCH_JAVA_OPTS=${KB_OPENSEARCH_JAVA_OPTS:-"-Xms256m -Xmx512m -XX:+ExitOnOutOfMemoryError"}
eval "$($BIN/kb services start --state "$WORK/svc")"
PORT=$($BIN/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
$BIN/kb serve --state "$WORK/serve" --port "$PORT" --search-backend opensearch --opensearch-url "$OPENSEARCH_URL" \
  >"$WORK/serve.log" 2>&1 &
SERVER=$!
cleanup() { kill "$SERVER" 2>/dev/null || true; $BIN/kb services stop --state "$WORK/svc" >/dev/null 2>&1 || true; }
trap cleanup EXIT
for _ in $(seq 1 240); do grep -q listening "$WORK/serve.log" 2>/dev/null && break; sleep 0.5; done
export KB_TOKEN=$(cat "$WORK/serve/demo-token")
export KB_OPERATOR=$(cat "$WORK/serve/operator-credential")  # the Invoke API needs it (G-LOCAL)
FAULT=
START=$SECONDS
if [ "${KB_FAULTS:-1}" = 1 ]; then
  ( sleep 25; echo "fault: stopping OpenSearch at +25 s"; $BIN/kb services stop --state "$WORK/svc" >/dev/null
    sleep 2; echo "fault: starting OpenSearch at +27 s"; $BIN/kb services start --state "$WORK/svc" >/dev/null
    echo "fault: OpenSearch back at +$((SECONDS - START)) s" ) &
  FAULT=$!
fi
"$LOCUST" -f bench/locustfile.py --headless -u 16 -r 16 -t 60s --host "http://127.0.0.1:$PORT" --csv "$OUT" \
  --only-summary 2>&1 | grep -v "^\s*$"
if [ -n "$FAULT" ]; then wait "$FAULT" || true; fi
# After: full service again, nothing lost (every demo document still searchable and readable).
$BIN/python - "$PORT" "$KB_TOKEN" <<'PY'
import json, sys, urllib.request
port, token = sys.argv[1:]
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=30))
import time
from kb_cli import demo
started = time.monotonic()
while post("/agent-api/v1/workspaces/demo/knowledge/search", {"query": "gateway"})["status"] != "ok":
    assert time.monotonic() - started < 120, "search did not recover within 120 s"
    time.sleep(1)
print(f"after: search ok again {time.monotonic() - started:.1f} s after the load ended")
titles = [d.title for d in demo.demo_documents()]
found = sum(1 for t in titles if any(h["title"] == t for h in post("/agent-api/v1/workspaces/demo/knowledge/search",
                                                                    {"query": t, "limit": 3})["hints"]))
hint = post("/agent-api/v1/workspaces/demo/knowledge/search", {"query": "database failover runbook"})["hints"][0]
page = post("/agent-api/v1/workspaces/demo/knowledge/read", {"ref": hint["ref"]})
print(f"after: {found}/{len(titles)} demo documents found by their titles; read ok ({len(page['content'])} chars)")
PY

"""Load and faults on loopback: mixed search / read / knowledge_search tool calls against
`kb serve`. Every response must be a success or a *typed* answer: search `status` unavailable/partial,
read 503 `knowledge_unavailable`, a tool result `{"error": {"code": "KNOWLEDGE_…"}}`. Anything else
(an untyped 5xx, a body that is not the typed JSON) is a failure.

    KB_TOKEN=$(cat STATE/demo-token) KB_OPERATOR=$(cat STATE/operator-credential) \
        locust -f bench/locustfile.py --headless -u 16 -r 16 -t 60s \
        --host http://127.0.0.1:PORT --csv bench/results/load

(bench/load_faults.sh runs it against kb serve on OpenSearch and stops/restarts the node mid-run.)"""

from __future__ import annotations

import itertools
import json
import os
import random
import uuid

from locust import HttpUser, between, events, task

ROUTE = "/agent-api/v1/workspaces/demo/knowledge"
INVOKE = "/2015-03-31/functions/AgentToolsFunction/invocations"
QUERIES = [
    "网关离线怎么排查？",
    "database failover runbook",
    "固件升级",
    "webhook signature",
    "API rate limits",
    "设备安装规范",
    "ticket escalation",
    "kubernetes agent deployment",
    "数据导出",
    "firewall requirements",
]
TYPED = {"knowledge_unavailable", "service_unavailable", "knowledge_reference_expired", "knowledge_changed"}
OUTCOMES: dict[str, int] = {}
_ids = itertools.count()


def _count(name: str) -> None:
    OUTCOMES[name] = OUTCOMES.get(name, 0) + 1


@events.quitting.add_listener
def _report(environment, **_: object) -> None:
    print("outcomes:", json.dumps(dict(sorted(OUTCOMES.items())), ensure_ascii=False))


class Agent(HttpUser):
    wait_time = between(0.05, 0.2)

    def on_start(self) -> None:
        self.headers = {
            "Authorization": f"Bearer {os.environ['KB_TOKEN']}",
            "Content-Type": "application/json",
        }
        self.refs: list[str] = []
        self.root = f"load-{uuid.uuid4().hex[:8]}"

    @task(5)
    def search(self) -> None:
        body = {"query": random.choice(QUERIES), "limit": 3}
        with self.client.post(
            f"{ROUTE}/search", json=body, headers=self.headers, name="search", catch_response=True
        ) as resp:
            if resp.status_code != 200:
                return self._typed(resp, "search")
            data = resp.json()
            _count(f"search {data['status']}")
            self.refs = [h["ref"] for h in data["hints"]] or self.refs
            resp.success()

    @task(3)
    def read(self) -> None:
        if not self.refs:
            return self.search()
        body = {"ref": random.choice(self.refs), "max_bytes": 4096}
        with self.client.post(
            f"{ROUTE}/read", json=body, headers=self.headers, name="read", catch_response=True
        ) as resp:
            if resp.status_code != 200:
                return self._typed(resp, "read")
            _count("read ok")
            resp.success()

    @task(2)
    def tool(self) -> None:
        n = next(_ids)  # a tree of its own per call: the load measures calls, not one tree's budget
        event = {
            "operation": "knowledge_search",
            "invocation": {
                "tenant": "default",
                "app": "load",
                "subject": "demo-user",
                "agent": "demo-router@1.0.0",
                "invocation_id": f"{self.root}-{n}-child",
                "ancestors": [{"invocation_id": f"{self.root}-{n}", "agent": "demo-agent@1.0.0"}],
                "deadline": "2099-01-01T00:00:00Z",
                "trusted_context": {"projectType": "monitor"},
            },
            "arguments": {"query": random.choice(QUERIES), "sources": ["demo-docs@1.0.0"]},
        }
        operator = {"X-Kb-Operator": os.environ.get("KB_OPERATOR", "")}  # kb serve's Invoke API (G-LOCAL)
        with self.client.post(
            INVOKE, json=event, headers=operator, name="knowledge_search", catch_response=True
        ) as resp:
            data = resp.json() if resp.status_code == 200 else None
            if data is None:
                _count(f"tool untyped {resp.status_code}")
                return resp.failure(f"untyped {resp.status_code}")
            if "error" in data:
                code = data["error"]["code"]
                _count(f"tool {code}")
                if code.startswith("KNOWLEDGE_"):
                    return resp.success()
                return resp.failure(code)
            _count("tool ok")
            resp.success()

    def _typed(self, resp, name: str) -> None:
        try:
            code = resp.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = None
        if code in TYPED and resp.headers.get("Cache-Control") == "no-store":
            _count(f"{name} {resp.status_code} {code}")
            return resp.success()
        _count(f"{name} untyped {resp.status_code}")
        resp.failure(f"untyped {resp.status_code}")

"""Least privilege (S2/S8): record every DynamoDB and OpenSearch action each function performs, and check it
against that function's policy in template.yaml (action, table partition-key prefix, OpenSearch path) — and
that every write a policy grants is one the function makes. S3 too (ListBucket with its s3:prefix
condition, GetObject on the prefix), both ways: every S3 action made is granted, every one granted is made.

Used by tests/unit/test_hardening.py (moto + SQLite: the DynamoDB half) and
tests/integration/test_iam_actions.py (DynamoDB-API server + OpenSearch: both halves)."""

from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import json
import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kb_cli.events import load_event
from kb_cli.gateway import Handlers
from kb_cli.template import load_template

CURRENT_FUNCTION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_function", default=None
)
DYNAMODB_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem", "BatchWriteItem"}
ES_WRITES = {"ESHttpPut", "ESHttpDelete", "ESHttpPatch"}
# S3 is read-only here: every S3 action granted must be one the function makes (least privilege both ways).
S3_GRANTED_MUST_BE_USED = {"ListBucket", "GetObject"}
_MUST_BE_USED = {"dynamodb": DYNAMODB_WRITES, "es": ES_WRITES, "s3": S3_GRANTED_MUST_BE_USED}
# The IAM action each S3 operation needs (HeadObject is authorised as s3:GetObject).
_S3_OPERATIONS = {
    "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket",
    "GetObject": "GetObject",
    "HeadObject": "GetObject",
}
_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


@dataclass(frozen=True)
class Action:
    service: str  # dynamodb | es | s3
    name: str  # GetItem, ESHttpPost, ListBucket, …
    target: tuple[str, ...]  # dynamodb: the partition keys; es: the request path; s3: bucket[/key], prefix


@dataclass
class Recorder:
    actions: dict[str, set[Action]] = field(default_factory=lambda: defaultdict(set))

    def add(self, action: Action) -> None:
        function = CURRENT_FUNCTION.get()
        if function is not None:
            self.actions[function].add(action)

    # --- DynamoDB: the before-parameter-build event carries the operation and its parameters ------------
    def watch_dynamodb(self, client: Any) -> None:
        client = getattr(client, "_client", client)  # the embedded mode's SerializedClient
        client.meta.events.register("before-parameter-build.dynamodb", self._dynamodb_call)

    def _dynamodb_call(self, model: Any, params: dict, **_: Any) -> None:
        op = model.name
        if op == "TransactWriteItems":
            for item in params["TransactItems"]:
                (kind, body), *_ = item.items()
                key = body.get("Key") or body.get("Item")
                self.add(Action("dynamodb", _TRANSACT[kind], (key["pk"]["S"],)))
        elif op == "BatchGetItem":
            for request in params["RequestItems"].values():
                self.add(Action("dynamodb", op, tuple(sorted({k["pk"]["S"] for k in request["Keys"]}))))
        elif op == "Query":
            values = params.get("ExpressionAttributeValues", {})
            # The partition key's value when the key condition names it (`pk = :name`), else the first.
            named = re.search(r"\bpk\s*=\s*(:\w+)", params.get("KeyConditionExpression", ""))
            if named and "S" in values.get(named.group(1), {}):
                self.add(Action("dynamodb", op, (values[named.group(1)]["S"],)))
            else:
                self.add(
                    Action("dynamodb", op, tuple(sorted(v["S"] for v in values.values() if "S" in v)[:1]))
                )
        elif "Key" in params or "Item" in params:
            key = params.get("Key") or params["Item"]
            self.add(Action("dynamodb", op, (key["pk"]["S"],)))
        else:
            self.add(Action("dynamodb", op, ()))

    # --- S3: the IAM action each operation needs, on the bucket (and its s3:prefix) or the object ------
    def watch_s3(self, client: Any) -> None:
        client.meta.events.register("before-parameter-build.s3", self._s3_call)

    def _s3_call(self, model: Any, params: dict, **_: Any) -> None:
        name = _S3_OPERATIONS.get(model.name, model.name)
        if name == "ListBucket":
            self.add(Action("s3", name, (params["Bucket"], params.get("Prefix", ""))))
        else:
            self.add(Action("s3", name, (f"{params['Bucket']}/{params.get('Key', '')}",)))

    # --- OpenSearch: every request goes through the transport ---------------------------------------------
    def watch_opensearch(self, backend: Any) -> None:
        transport = backend.client.transport
        perform = transport.perform_request

        def recorded(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            name = "ESHttp" + method.capitalize()
            self.add(Action("es", name, (urlsplit(url).path,)))
            return perform(method, url, *args, **kwargs)

        transport.perform_request = recorded


class RecordingHandlers(Handlers):
    def invoke(self, name: str, event: Any) -> Any:
        token = CURRENT_FUNCTION.set(self.resolve(name).logical_id)
        try:
            return super().invoke(name, event)
        finally:
            CURRENT_FUNCTION.reset(token)


# --- the template's policies --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    service: str
    actions: tuple[str, ...]
    leading_keys: tuple[str, ...] | None  # dynamodb: the LeadingKeys patterns (None = any key)
    paths: tuple[str, ...]  # es: path patterns within the domain; s3: bucket[/key] patterns
    s3_prefixes: tuple[str, ...] | None = None  # s3:ListBucket's s3:prefix condition (None = none)


def _es_path(resource: Any, prefix: str) -> str | None:
    text = resource.get("Sub") if isinstance(resource, dict) else resource
    if not isinstance(text, str) or ":es:" not in text:
        return None
    _, _, path = text.partition("domain/${OpenSearchDomainName}/")
    return path.replace("${OpenSearchIndexPrefix}", prefix)


def _s3_resource(resource: Any, params: dict[str, str]) -> str | None:
    text = resource.get("Sub") if isinstance(resource, dict) else resource
    if not isinstance(text, str) or ":s3:::" not in text:
        return None
    return _substitute(text.partition(":s3:::")[2], params)


def _substitute(text: str, params: dict[str, str]) -> str:
    for name, value in params.items():
        text = text.replace("${" + name + "}", value)
    return text


def _policies(resource: dict) -> Iterator[dict]:
    """A function's policy documents; one under `!If [Condition, policy, NoValue]` as if it held (the
    scenario configures every optional feature, S3 included)."""
    for policy in resource["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "If" in policy:
            policy = policy["If"][1]
        if isinstance(policy, dict) and "Statement" in policy:
            yield policy


def grants(index_prefix: str = "kb", s3: dict[str, str] | None = None) -> dict[str, list[Grant]]:
    """Function logical id -> what its policy statements allow (the SAM policy templates are not parsed:
    they grant secrets, not table or index access). `s3`: the template parameters of the S3 source
    (S3SourceBucket, S3SourcePrefix) the scenario used."""
    out: dict[str, list[Grant]] = {}
    for logical_id, resource in load_template()["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        found: list[Grant] = []
        for policy in _policies(resource):
            for statement in policy["Statement"]:
                assert statement["Effect"] == "Allow"
                actions = (
                    statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
                )
                resources = (
                    statement["Resource"]
                    if isinstance(statement["Resource"], list)
                    else [statement["Resource"]]
                )
                services = {a.split(":")[0] for a in actions}
                assert len(services) == 1, statement
                service = services.pop()
                names = tuple(a.split(":")[1] for a in actions)
                if service == "dynamodb":
                    condition = statement.get("Condition", {}).get("ForAllValues:StringLike", {})
                    keys = condition.get("dynamodb:LeadingKeys")
                    found.append(Grant("dynamodb", names, tuple(keys) if keys is not None else None, ()))
                elif service == "s3":
                    paths = tuple(p for p in (_s3_resource(r, s3 or {}) for r in resources) if p is not None)
                    like = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
                    prefixes = None
                    if like is not None:
                        prefixes = tuple(_substitute(_sub_text(v), s3 or {}) for v in like)
                    found.append(Grant("s3", names, None, paths, prefixes))
                else:
                    paths = tuple(p for p in (_es_path(r, index_prefix) for r in resources) if p is not None)
                    found.append(Grant("es", names, None, paths))
        out[logical_id] = found
    return out


def _sub_text(value: Any) -> str:
    return value.get("Sub") if isinstance(value, dict) else value


def allowed(action: Action, function_grants: list[Grant]) -> bool:
    for grant in function_grants:
        if grant.service != action.service or action.name not in grant.actions:
            continue
        if action.service == "dynamodb":
            if grant.leading_keys is None or all(
                any(fnmatch.fnmatchcase(k, p) for p in grant.leading_keys) for k in action.target
            ):
                return True
        elif action.service == "s3":
            if not any(fnmatch.fnmatchcase(action.target[0], p) for p in grant.paths):
                continue
            if action.name != "ListBucket" or grant.s3_prefixes is None:
                return True
            if any(fnmatch.fnmatchcase(action.target[1], p) for p in grant.s3_prefixes):
                return True
        elif any(fnmatch.fnmatchcase(action.target[0].lstrip("/"), p) for p in grant.paths):
            return True
    return False


def check(
    recorder: Recorder, services: set[str], index_prefix: str = "kb", s3: dict[str, str] | None = None
) -> list[str]:
    """Problems: actions a policy does not allow, and granted writes (any S3 action) never made."""
    problems: list[str] = []
    policy = grants(index_prefix, s3)
    for function, actions in sorted(recorder.actions.items()):
        for action in sorted(actions, key=repr):
            if action.service in services and not allowed(action, policy.get(function, [])):
                problems.append(
                    f"{function} performs {action.service}:{action.name} on {action.target}, not granted"
                )
    for function, function_grants in sorted(policy.items()):
        made = {(a.service, a.name) for a in recorder.actions.get(function, set())}
        for grant in function_grants:
            if grant.service not in services:
                continue
            writes = _MUST_BE_USED[grant.service]
            for name in grant.actions:
                if name in writes and (grant.service, name) not in made:
                    problems.append(
                        f"{function} is granted {grant.service}:{name} but never makes that write"
                    )
    return problems


# --- one scenario through every function --------------------------------------------------------------------


def admin_event(method: str, path: str, body: Any = None, **params: str) -> dict:
    """An admin API event (payload 2.0) for `method path`, its path parameters named by `params`."""
    event = load_event("admin/publish-source.json")
    route_key = path
    for name, value in params.items():
        route_key = route_key.replace(value, "{" + name + "}")
    event.update(
        rawPath=path, routeKey=f"{method} {route_key}", body=None if body is None else json.dumps(body)
    )
    event["requestContext"]["http"].update(path=path, method=method)
    event["pathParameters"] = params or None
    return event


def _public(name: str, principal_json: str, body: dict | None = None) -> dict:
    event = load_event(name)
    event["requestContext"]["authorizer"] = {"lambda": {"principal": principal_json}}
    if body is not None:
        event["body"] = json.dumps(body, ensure_ascii=False)
    return event


def _ok(result: dict, *statuses: int) -> dict:
    assert result["statusCode"] in (statuses or (200,)), result
    return json.loads(result["body"])


@dataclass(frozen=True)
class S3Scenario:
    """The S3 source of a scenario: a client of the store, the bucket and the prefix the container's
    settings (ingest_s3_uri, ingest_s3_source) name."""

    client: Any
    bucket: str
    prefix: str

    @property
    def params(self) -> dict[str, str]:
        return {
            "S3SourceBucket": self.bucket,
            "S3SourcePrefix": self.prefix,
            "EmbeddingModelsBucket": self.bucket,
            "EmbeddingModelsPrefix": self.prefix,
        }


def _worker(handlers: Handlers, body: dict) -> None:
    message = load_event("ingest_worker/job.json")
    message["Records"][0]["body"] = json.dumps(body)
    assert handlers.invoke("IngestWorkerFunction", message) == {"batchItemFailures": []}


def run_s3_scenario(handlers: Handlers, container: Any, s3: S3Scenario, source: str) -> None:
    """S3 as a data source: an S3 job through the admin API (listed there, read by the worker), the
    scheduled full sync, an object created and one removed (EventBridge events), all through the worker."""
    put = s3.client.put_object
    put(Bucket=s3.bucket, Key=f"{s3.prefix}a.md", Body=b"# A\n\niam s3 probe alpha")
    put(Bucket=s3.bucket, Key=f"{s3.prefix}b.md", Body=b"# B\n\niam s3 probe beta")
    jobs = f"/admin/v1/sources/{source}/ingestion-jobs"
    body = {"s3_uri": f"s3://{s3.bucket}/{s3.prefix}", "doc_id_prefix": "s3", "acl": {"tenant": "demo"}}
    submitted = _ok(handlers.invoke("AdminFunction", admin_event("POST", jobs, body, source=source)), 202)
    _worker(handlers, {"job_id": submitted["job_id"]})
    _worker(handlers, {"s3_sync": True})  # the schedule's message: a sync job over the prefix
    for job in container.state.jobs.list_jobs(source, 5):
        if job.state != "completed":
            _worker(handlers, {"job_id": job.job_id})
    put(Bucket=s3.bucket, Key=f"{s3.prefix}c.md", Body=b"# C\n\niam s3 probe gamma")
    created = {"source": "aws.s3", "detail-type": "Object Created"}
    obj = {"key": f"{s3.prefix}c.md", "size": 25, "etag": "x"}
    _worker(handlers, created | {"detail": {"bucket": {"name": s3.bucket}, "object": obj}})
    for job in container.state.jobs.list_jobs(source, 5):
        if job.state != "completed":
            _worker(handlers, {"job_id": job.job_id})
    removed = {"source": "aws.s3", "detail-type": "Object Deleted"}
    s3.client.delete_object(Bucket=s3.bucket, Key=f"{s3.prefix}a.md")
    gone = {"key": f"{s3.prefix}a.md"}
    _worker(handlers, removed | {"detail": {"bucket": {"name": s3.bucket}, "object": gone}})
    assert container.backend.get_document(source, "s3-c") is not None
    assert container.backend.get_document(source, "s3-a") is None
    _embed_cold_start(handlers, container, s3)


def _embed_cold_start(handlers: Handlers, container: Any, s3: S3Scenario) -> None:
    """The embed function's cold start copies its models from their prefix (here the probe's, which holds
    documents, not models: it answers `model_unavailable` after listing and reading them)."""
    import tempfile

    from knowledge_core import bootstrap
    from knowledge_core.adapters.s3_objects import S3ObjectStore
    from knowledge_core.bootstrap import Container

    update = {
        "embedding_model_dir": tempfile.mkdtemp(prefix="kb-iam-models-"),
        "embed_models_s3_uri": f"s3://{s3.bucket}/{s3.prefix}",
    }
    embed = Container(
        container.settings.model_copy(update=update), object_store=S3ObjectStore(client=s3.client)
    )
    bootstrap.reset(embed)
    try:
        answer = handlers.invoke("EmbedFunction", {"op": "describe"})
    finally:
        bootstrap.reset(container)
    assert answer["error"]["code"] == "model_unavailable", answer


def run_scenario(handlers: Handlers, container: Any, s3: S3Scenario | None = None) -> None:
    """Every function's every kind of call: admin (schema, publish, documents, switches, tokens, runs,
    migration), authorizer, capabilities, search, read, turns (inline, on demand, resumed, failed), tools;
    with `s3`, S3 as a data source too."""
    source = "demo-docs@1.0.0"
    doc_path = f"/admin/v1/sources/{source}/documents/iam-doc"
    admin = [
        ("POST", "/admin/v1/search-indices", {}, {}),
        ("GET", "/admin/v1/search-indices", {}, {}),
        ("POST", "/admin/v1/sources", load_event("admin/publish-source.json")["body"], {}),
        (
            "PUT",
            doc_path,
            {"title": "IAM", "body": "iam probe body", "acl": {"tenant": "default"}},
            {"source": source, "doc_id": "iam-doc"},
        ),
        (
            "POST",
            f"/admin/v1/sources/{source}/documents",
            {
                "documents": [
                    {"doc_id": "iam-doc-2", "title": "IAM 2", "body": "x", "acl": {"tenant": "default"}}
                ]
            },
            {"source": source},
        ),
        ("POST", f"{doc_path}/disable", {}, {"source": source, "doc_id": "iam-doc"}),
        ("POST", f"{doc_path}/enable", {}, {"source": source, "doc_id": "iam-doc"}),
        ("DELETE", doc_path, None, {"source": source, "doc_id": "iam-doc"}),
        ("POST", f"/admin/v1/sources/{source}/disable", {}, {"source": source}),
        ("POST", f"/admin/v1/sources/{source}/enable", {}, {"source": source}),
        ("PUT", "/admin/v1/workspaces/demo", {"agent": "demo-agent@1.0.0"}, {"route": "demo"}),
        ("POST", f"/admin/v1/sources/{source}/tenant-migration", {"tenant": "default"}, {"source": source}),
    ]
    for method, path, body, params in admin:
        raw = body if isinstance(body, str) or body is None else json.dumps(body)
        event = admin_event(method, path, None, **params)
        event["body"] = raw
        _ok(handlers.invoke("AdminFunction", event), 200, 201)
    # The documents above were written in several requests, and one more now (a background merge may have
    # folded the earlier ones): at least two segments, which an operator's compaction force-merges.
    late = {"title": "IAM 3", "body": "iam probe late", "acl": {"tenant": "default"}}
    late_path = f"/admin/v1/sources/{source}/documents/iam-doc-3"
    _ok(
        handlers.invoke(
            "AdminFunction", admin_event("PUT", late_path, late, source=source, doc_id="iam-doc-3")
        )
    )
    compaction = _ok(
        handlers.invoke("AdminFunction", admin_event("POST", "/admin/v1/search-indices/compact")), 202
    )
    assert compaction["started"] is True, compaction
    issued = _ok(
        handlers.invoke(
            "AdminFunction",
            admin_event(
                "POST",
                "/admin/v1/tokens",
                {"routes": ["demo"], "client_id": "demo-client", "subject": "demo-user", "tenant": "default"},
            ),
        ),
        201,
    )
    _ok(handlers.invoke("AdminFunction", admin_event("GET", "/admin/v1/tokens")))

    auth = load_event("authorizer/request.json")
    auth["headers"]["authorization"] = f"Bearer {issued['token']}"
    principal = handlers.invoke("AuthorizerFunction", auth)["context"]["principal"]

    _ok(handlers.invoke("CapabilitiesFunction", _public("capabilities/get.json", principal)))
    found = _ok(handlers.invoke("SearchFunction", _public("search/search.json", principal)))
    _ok(
        handlers.invoke(
            "ReadFunction", _public("read/read-tampered.json", principal, {"ref": found["hints"][0]["ref"]})
        )
    )

    turn = _ok(handlers.invoke("TurnsFunction", _public("turns/inline.json", principal)))
    _ok(handlers.invoke("TurnsFunction", _public("turns/on-demand.json", principal)))
    again = {"turn_id": f"t-{uuid.uuid4()}", "message": "网关", "run_id": turn["run_id"]}
    _ok(handlers.invoke("TurnsFunction", _public("turns/inline.json", principal, again)))
    _ok(
        handlers.invoke(
            "SearchFunction",
            _public("search/search.json", principal, {"query": "网关", "run_id": turn["run_id"]}),
        )
    )
    with _failing(container.knowledge, "retrieve"):  # a failed turn releases its claim
        failed = {"turn_id": f"t-{uuid.uuid4()}", "message": "网关"}
        _ok(handlers.invoke("TurnsFunction", _public("turns/inline.json", principal, failed)), 500)

    _ok(
        handlers.invoke(
            "AdminFunction",
            admin_event(
                "POST", f"/admin/v1/runs/{turn['run_id']}/end", {"state": "completed"}, run_id=turn["run_id"]
            ),
        )
    )
    _ok(
        handlers.invoke(
            "AdminFunction",
            admin_event(
                "POST", f"/admin/v1/tokens/{issued['token_id']}/revoke", {}, token_id=issued["token_id"]
            ),
        )
    )

    # Ingestion jobs (I-INGEST): submit, the worker's message, then the status and the list.
    jobs = f"/admin/v1/sources/{source}/ingestion-jobs"
    submitted = _ok(
        handlers.invoke(
            "AdminFunction",
            admin_event(
                "POST", jobs, json.loads(load_event("admin/submit-ingestion-job.json")["body"]), source=source
            ),
        ),
        202,
    )
    message = load_event("ingest_worker/job.json")
    message["Records"][0]["body"] = json.dumps({"job_id": submitted["job_id"]})
    assert handlers.invoke("IngestWorkerFunction", message) == {"batchItemFailures": []}
    job_path = f"{jobs}/{submitted['job_id']}"
    job = _ok(
        handlers.invoke(
            "AdminFunction", admin_event("GET", job_path, source=source, job_id=submitted["job_id"])
        )
    )
    assert job["state"] == "completed", job
    _ok(handlers.invoke("AdminFunction", admin_event("GET", jobs, source=source)))
    # A queued job cancelled: the job updated, its open-job pointer deleted.
    queued = _ok(
        handlers.invoke(
            "AdminFunction",
            admin_event(
                "POST", jobs, json.loads(load_event("admin/submit-ingestion-job.json")["body"]), source=source
            ),
        ),
        202,
    )
    cancel_path = f"{jobs}/{queued['job_id']}/cancel"
    cancelled = _ok(
        handlers.invoke(
            "AdminFunction", admin_event("POST", cancel_path, source=source, job_id=queued["job_id"])
        )
    )
    assert cancelled["state"] == "cancelled", cancelled

    for name in ("mcp/initialize.json", "mcp/tools-list.json", "mcp/search.json"):
        assert handlers.invoke("McpFunction", _public(name, principal))["statusCode"] == 200
    read = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "tools/call",
        "params": {"name": "knowledge_read", "arguments": {"ref": found["hints"][0]["ref"]}},
    }
    assert handlers.invoke("McpFunction", _public("mcp/search.json", principal, read))["statusCode"] == 200
    from knowledge_core.mcp_server import capabilities_uri

    resource = {
        "jsonrpc": "2.0",
        "id": 10,
        "method": "resources/read",
        "params": {"uri": capabilities_uri("demo")},
    }
    assert (
        handlers.invoke("McpFunction", _public("mcp/search.json", principal, resource))["statusCode"] == 200
    )

    for name in ("agent_tools/startup.json", "agent_tools/knowledge_search.json"):
        result = handlers.invoke("AgentToolsFunction", load_event(name))
        assert "error" not in result, result
    if s3 is not None:
        run_s3_scenario(handlers, container, s3, source)


@contextlib.contextmanager
def _failing(target: Any, name: str) -> Iterator[None]:
    original = getattr(target, name)

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected failure")

    setattr(target, name, boom)
    try:
        yield
    finally:
        setattr(target, name, original)

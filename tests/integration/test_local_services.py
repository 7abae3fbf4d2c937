"""The real local services (`kb services start`): single-node OpenSearch and the DynamoDB-API server.

Starts them if needed (state dir from $KB_SERVICES_STATE, default ./.kb-state) and leaves them
running for the next test run; stop with `kb services stop`. A cold start resolves Maven and Go
dependencies and can take a few minutes; a warm start takes 15-40 s; reuse is instant.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from kb_cli import supervisor

pytestmark = [
    pytest.mark.integration,
    pytest.mark.opensearch,
    pytest.mark.dynamodb_local,
    pytest.mark.timeout(900),
]


def _state_dir() -> Path:
    return Path(os.environ.get("KB_SERVICES_STATE", supervisor.DEFAULT_STATE_DIR))


@pytest.fixture(scope="module")
def endpoints() -> dict[str, str]:
    state = _state_dir()
    st = supervisor.status(state)
    if not all(s["running"] for s in st.values()):
        missing = [tool for tool in ("java", "mvn", "go") if shutil.which(tool) is None]
        if missing:
            pytest.skip(f"local services not running and {', '.join(missing)} not on PATH")
    return supervisor.ensure_running(state)


def _os(url: str, method: str = "GET", body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def ddb(endpoints: dict[str, str]) -> Any:
    boto3 = pytest.importorskip("boto3")
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoints["DYNAMODB_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_endpoints_are_loopback_urls(endpoints: dict[str, str]) -> None:
    assert set(endpoints) == {"OPENSEARCH_URL", "DYNAMODB_ENDPOINT", "S3_ENDPOINT"}
    for url in endpoints.values():
        assert url.startswith("http://127.0.0.1:")
    # idempotent: a second call reuses the running processes
    assert supervisor.ensure_running(_state_dir()) == endpoints
    st = supervisor.status(_state_dir())
    assert all(s["running"] and s["pid"] for s in st.values())


def test_opensearch_health_and_cjk_analyzer(endpoints: dict[str, str]) -> None:
    url = endpoints["OPENSEARCH_URL"]
    health = _os(f"{url}/_cluster/health")
    assert health["status"] in ("green", "yellow")
    assert _os(url)["version"]["distribution"] == "opensearch"

    index = f"kb-test-{uuid.uuid4().hex[:8]}"
    try:
        _os(f"{url}/{index}", "PUT", {
            "settings": {"number_of_shards": 1, "number_of_replicas": 0},
            "mappings": {"properties": {"body": {"type": "text", "analyzer": "cjk"}}},
        })  # fmt: skip
        analyzed = _os(f"{url}/{index}/_analyze", "POST", {"analyzer": "cjk", "text": "知识库检索 Hello"})
        tokens = analyzed["tokens"]
        assert [t["token"] for t in tokens] == ["知识", "识库", "库检", "检索", "hello"]
        _os(f"{url}/{index}/_doc/1?refresh=true", "PUT", {"body": "预算账本使用 DynamoDB"})
        hits = _os(f"{url}/{index}/_search", "POST", {"query": {"match": {"body": "账本"}}})["hits"]
        assert hits["total"]["value"] == 1
    finally:
        _os(f"{url}/{index}", "DELETE")


def test_opensearch_knn_plugin_lucene_byte_vectors_with_filter(endpoints: dict[str, str]) -> None:
    """The k-NN plugin (loaded from the classpath, no native libraries): a Lucene-engine byte
    knn_vector field indexes and answers a filtered `knn` query, ranked by inner product."""
    url = endpoints["OPENSEARCH_URL"]
    index = f"kb-test-{uuid.uuid4().hex[:8]}"
    field = {"type": "knn_vector", "dimension": 3, "data_type": "byte",
             "method": {"name": "hnsw", "engine": "lucene", "space_type": "innerproduct"}}  # fmt: skip
    try:
        _os(f"{url}/{index}", "PUT", {
            "settings": {"index.knn": True, "number_of_shards": 1, "number_of_replicas": 0},
            "mappings": {"properties": {"v": field, "tag": {"type": "keyword"}}},
        })  # fmt: skip
        docs = {
            "a": ([127, 0, 0], "x"),
            "b": ([127, 0, 0], "y"),
            "c": ([90, 90, 0], "x"),
            "d": ([0, 0, 127], "x"),
        }
        for doc_id, (vector, tag) in docs.items():
            _os(f"{url}/{index}/_doc/{doc_id}", "PUT", {"v": vector, "tag": tag})
        _os(f"{url}/{index}/_refresh", "POST")
        query = {"knn": {"v": {"vector": [127, 0, 0], "k": 3, "filter": {"term": {"tag": "x"}}}}}
        hits = _os(f"{url}/{index}/_search", "POST", {"size": 3, "query": query})["hits"]["hits"]
        assert [h["_id"] for h in hits] == ["a", "c", "d"]  # "b" is filtered out
    finally:
        _os(f"{url}/{index}", "DELETE")


def test_dynamodb_table_and_transaction_cancellation(ddb: Any) -> None:
    table = f"kb-test-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=table,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )
    try:
        desc = ddb.describe_table(TableName=table)["Table"]
        assert desc["TableStatus"] == "ACTIVE"
        assert [k["AttributeName"] for k in desc["KeySchema"]] == ["pk", "sk"]
        ddb.update_time_to_live(
            TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
        )
        assert table in ddb.list_tables()["TableNames"]

        def key(pk: str) -> dict[str, Any]:
            return {"pk": {"S": pk}, "sk": {"S": "counter"}}

        for pk in ("a", "b"):
            ddb.put_item(TableName=table, Item={**key(pk), "spent": {"N": "0"}},
                         ConditionExpression="attribute_not_exists(pk)")  # fmt: skip

        def spend(pk: str, amount: int, cap: int) -> dict[str, Any]:
            return {"Update": {
                "TableName": table, "Key": key(pk), "UpdateExpression": "ADD spent :d",
                "ConditionExpression": "spent <= :lim",
                "ExpressionAttributeValues": {":d": {"N": str(amount)}, ":lim": {"N": str(cap - amount)}},
            }}  # fmt: skip

        ddb.transact_write_items(TransactItems=[spend("a", 3, 10), spend("b", 4, 10)])

        with pytest.raises(ddb.exceptions.TransactionCanceledException) as exc:
            ddb.transact_write_items(TransactItems=[
                spend("a", 1, 10),
                spend("b", 7, 10),  # 4 + 7 > 10: fails
                {"Put": {"TableName": table, "Item": {**key("c"), "spent": {"N": "1"}}}},
            ])  # fmt: skip
        reasons = [r["Code"] for r in exc.value.response["CancellationReasons"]]
        assert reasons == ["None", "ConditionalCheckFailed", "None"]

        def spent(pk: str) -> str | None:
            item = ddb.get_item(TableName=table, Key=key(pk), ConsistentRead=True).get("Item")
            return item["spent"]["N"] if item else None

        assert (spent("a"), spent("b"), spent("c")) == ("3", "4", None)  # nothing was written
    finally:
        ddb.delete_table(TableName=table)

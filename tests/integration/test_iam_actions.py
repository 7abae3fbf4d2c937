"""Least privilege (S2/S8) on the real servers: every DynamoDB and OpenSearch action each function performs
(on the DynamoDB-API server and an OpenSearch node) is granted by that function's policy in template.yaml,
and every write a policy grants is one the function makes; every S3 action (on the S3-API server) too, and
every S3 action granted is one the function makes. The read path (capabilities, search, read, turns, tools)
never writes index schema: only the admin function does."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from knowledge_core import bootstrap
from knowledge_core.bootstrap import Container
from knowledge_core.settings import Settings

from kb_cli import demo
from tests.conftest import TEST_SECRET, FakeClock
from tests.iam_actions import ES_WRITES, Recorder, RecordingHandlers, S3Scenario, check, run_scenario

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")


@pytest.fixture(scope="module")
def endpoints() -> dict[str, str]:
    from tests.contract.conftest import real_endpoints_or_skip

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    return real_endpoints_or_skip()


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Scenario]:
    import boto3

    from tests.contract.conftest import s3_endpoint_or_skip

    for name, value in s3_endpoint_or_skip().items():
        monkeypatch.setenv(name, value)
    client = boto3.Session().client("s3", region_name="us-east-1")  # its own credentials, not cached ones
    bucket = f"kbi-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    yield S3Scenario(client, bucket, "manuals/")
    for obj in client.list_objects_v2(Bucket=bucket).get("Contents", []):
        client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)


def test_S2_S8_real_backends_each_function_performs_only_what_its_policy_grants(endpoints, s3):
    from knowledge_core.adapters.s3_objects import S3ObjectStore

    prefix = f"kbi-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        state_backend="dynamodb",
        dynamodb_endpoint=endpoints["DYNAMODB_ENDPOINT"],
        search_backend="opensearch",
        opensearch_url=endpoints["OPENSEARCH_URL"],
        opensearch_index_prefix=prefix,
        token_secret=TEST_SECRET,
        table_name=f"kbi-{uuid.uuid4().hex[:12]}",
        registry_cache_seconds=0,
        ingest_s3_uri=f"s3://{s3.bucket}/{s3.prefix}",
        ingest_s3_source="demo-docs@1.0.0",
        ingest_s3_tenant="demo",
    )
    container = Container(settings, clock=FakeClock(), object_store=S3ObjectStore(client=s3.client))
    table = container.table
    assert table is not None
    table.create()
    demo.seed(container, with_token=False)  # setup, outside any function
    recorder = Recorder()
    recorder.watch_dynamodb(table.client)
    recorder.watch_opensearch(container.backend)
    recorder.watch_s3(s3.client)
    container.backend._ready = False  # type: ignore[attr-defined]  # a fresh container's first admin call
    bootstrap.reset(container)
    try:
        run_scenario(RecordingHandlers(), container, s3)
    finally:
        bootstrap.reset(None)
        container.backend.drop_indices()  # type: ignore[attr-defined]
        table.delete()
    assert check(recorder, {"dynamodb", "es", "s3"}, index_prefix=prefix, s3=s3.params) == []
    for function, actions in recorder.actions.items():
        if function != "AdminFunction":  # S2: schema (templates, indices, mappings) only at admin time
            assert not [a for a in actions if a.service == "es" and a.name in ES_WRITES], function
    assert any(a.service == "es" for a in recorder.actions["SearchFunction"])

"""The S3-API server of `kb services`: `kb services start --only s3` prints S3_ENDPOINT and
the key pair it requires, `stop --only s3` stops it; boto3 with its default configuration (flexible
checksums on) lists with ListObjectsV2 pagination, gets MD5 ETags that change with the content, deletes,
and gets S3's typed errors (NoSuchBucket, NoSuchKey, a wrong secret); the ObjectStore adapter maps them to
its codes. Runs in a state dir of its own (the build is cached by Go)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from knowledge_core.adapters.s3_objects import S3ObjectStore
from knowledge_core.domain.s3_source import ObjectStoreError

from kb_cli import supervisor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
KB = [str(Path(sys.executable).parent / "kb")]


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH to build the S3-API server")
    state = tmp_path_factory.mktemp("s3-services")
    start = [*KB, "services", "start", "--only", "s3", "--state", str(state)]
    out = subprocess.run(start, capture_output=True, text=True, timeout=500)
    assert out.returncode == 0, out.stderr
    env = dict(line.split("=", 1) for line in out.stdout.splitlines())
    yield state, env
    stopped = subprocess.run([*KB, "services", "stop", "--only", "s3", "--state", str(state)], timeout=60)
    assert stopped.returncode == 0
    assert not supervisor.status(state, (supervisor.S3,))[supervisor.S3]["process_alive"]


def test_i_ingest_s3_server_start_prints_endpoint_and_keys_on_loopback(started) -> None:
    state, env = started
    assert set(env) == {"S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert env["S3_ENDPOINT"].startswith("http://127.0.0.1:")
    assert (state / "services" / "s3.credentials").stat().st_mode & 0o077 == 0  # the owner's only
    again = subprocess.run([*KB, "services", "start", "--only", "s3", "--state", str(state)],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert dict(line.split("=", 1) for line in again.stdout.splitlines()) == env  # reused, same keys


def test_i_ingest_s3_server_pagination_etags_delete_and_typed_errors(started, monkeypatch) -> None:
    import boto3

    _, env = started
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", env["S3_ENDPOINT"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", env["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["AWS_SECRET_ACCESS_KEY"])
    # A session of its own: the default one keeps the first credentials it found (another test's server).
    client = boto3.Session().client("s3", region_name="us-east-1")  # defaults: flexible checksums on
    bucket = f"kbt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    bodies = {f"docs/{i:04d}.md": f"# {i}\n\nbody {i}".encode() for i in range(1203)}
    bodies["other/x.md"] = b"elsewhere"
    for key, body in bodies.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    store = S3ObjectStore(client=client)
    listed = store.list_objects(bucket, "docs/", 5000)  # three pages of ListObjectsV2
    assert [o.key for o in listed] == sorted(k for k in bodies if k.startswith("docs/"))
    assert all(
        o.etag == hashlib.md5(bodies[o.key]).hexdigest() and o.size == len(bodies[o.key]) for o in listed
    )
    assert len(store.list_objects(bucket, "docs/", 10)) == 11  # limit + 1: the caller sees "too many"
    data, etag = store.get_object(bucket, "docs/0001.md", 1000)
    assert data == bodies["docs/0001.md"] and etag == listed[1].etag
    client.put_object(Bucket=bucket, Key="docs/0001.md", Body=b"changed")
    assert store.list_objects(bucket, "docs/0001", 10)[0].etag != etag
    with pytest.raises(ObjectStoreError) as big:
        store.get_object(bucket, "docs/0002.md", 3)
    assert big.value.code == "too_large"
    head = store.head_object(bucket, "docs/0003.md")
    assert head is not None and head.etag == listed[3].etag and head.size == listed[3].size
    client.delete_object(Bucket=bucket, Key="docs/0003.md")
    assert store.head_object(bucket, "docs/0003.md") is None
    with pytest.raises(ObjectStoreError) as gone:
        store.get_object(bucket, "docs/0003.md", 1000)
    assert gone.value.code == "not_found"
    with pytest.raises(ObjectStoreError) as missing:
        store.list_objects(f"{bucket}-missing", "", 10)
    assert missing.value.code == "bucket_not_found"
    wrong = boto3.Session(aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key="wrong")
    with pytest.raises(ObjectStoreError) as denied:
        S3ObjectStore(client=wrong.client("s3", region_name="us-east-1")).list_objects(bucket, "docs/", 10)
    assert denied.value.code == "no_credentials"
    for obj in store.list_objects(bucket, "", 5000):
        client.delete_object(Bucket=bucket, Key=obj.key)
    client.delete_bucket(Bucket=bucket)


def test_g_local_s3_server_objects_are_its_owners_only(started, monkeypatch) -> None:
    """G-LOCAL: the real server (run with umask 077) writes an object 0600 in 0700 directories."""
    import stat

    import boto3

    state, env = started
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", env["S3_ENDPOINT"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", env["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", env["AWS_SECRET_ACCESS_KEY"])
    client = boto3.Session().client("s3", region_name="us-east-1")
    bucket = f"kbt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="docs/private.md", Body=b"# private")
    data = state / "services" / "s3" / "data"
    written = [data / bucket / "docs" / "private.md", data / bucket / "docs", data / bucket, data]
    assert [stat.S_IMODE(p.stat().st_mode) for p in written] == [0o600, 0o700, 0o700, 0o700]
    client.delete_object(Bucket=bucket, Key="docs/private.md")
    client.delete_bucket(Bucket=bucket)

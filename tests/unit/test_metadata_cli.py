"""`kb ingest --meta KEY=VALUE` and sidecars from the CLI (SPEC §7), and metadata in
`kb doc list` / `kb doc show` (point 3): what the CLI sends for a single file, a directory on a remote
endpoint (each file's sidecar combined with --meta, which wins key by key), a loopback directory and an S3
prefix (the job's `metadata`: the service reads the sidecars); a bad --meta is an error naming the flag
before any job is sent."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from kb_cli.commands import ingest, inventory


def args(
    file: str, endpoint: str = "http://x", meta: list[str] | None = None, **extra: Any
) -> argparse.Namespace:
    values = dict(
        file=file,
        doc_id=None,
        title=None,
        source="s@1",
        endpoint=endpoint,
        tenant="t",
        share_tenant=None,
        meta=meta,
        no_wait=True,
    )
    return argparse.Namespace(**(values | extra))


def sent_by(namespace: argparse.Namespace) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    def call(endpoint: str, method: str, path: str, body: Any = None) -> Any:
        sent.append(json.loads(json.dumps(body)))
        return {"job_id": "j", "total": 1}

    ingest.cmd_ingest(namespace, call)
    return sent


def sidecar(path: Path, **values: Any) -> None:
    path.with_name(path.name + ".metadata.json").write_text(
        json.dumps({"metadataAttributes": values}), encoding="utf-8"
    )


def test_i_ingest_meta_flag_and_sidecar_combine_per_file_and_meta_wins(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    sidecar(docs / "a.md", region="us", team="ops")
    (docs / "b.md").write_text("# B\n\nbeta", encoding="utf-8")
    sent = sent_by(args(str(docs), meta=["region=eu", "year=2024", "public=true", 'tags=["x","y"]']))
    documents = {d["doc_id"]: d for d in sent[0]["documents"]}
    assert set(documents) == {"a", "b"}  # the sidecar is not sent as a document
    flags = {"region": "eu", "year": 2024, "public": True, "tags": ["x", "y"]}
    assert documents["a"]["metadata"] == flags | {"team": "ops"}
    assert documents["b"]["metadata"] == flags
    single = sent_by(args(str(docs / "a.md")))
    assert single[0]["documents"][0]["metadata"] == {"region": "us", "team": "ops"}


def test_i_ingest_loopback_directory_and_s3_send_the_job_metadata(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    [local] = sent_by(args(str(docs), endpoint="http://127.0.0.1:3000", meta=["region=eu"]))
    assert local["metadata"] == {"region": "eu"} and "documents" not in local
    [prefix] = sent_by(args("s3://bucket/docs/", meta=["year=2024"]))
    assert prefix["metadata"] == {"year": 2024}
    [plain] = sent_by(args("s3://bucket/docs/"))
    assert "metadata" not in plain


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("region", "expected KEY=VALUE"),
        ("=eu", "expected KEY=VALUE"),
        ("tags=[eu", "tags"),
        ("1bad=x", "1bad"),
        ("tags=[1, 2]", "tags"),
        ("note=" + "x" * 300, "note"),
    ],
)
def test_i_ingest_bad_meta_flag_is_an_error_naming_the_flag(tmp_path: Path, flag: str, named: str) -> None:
    (tmp_path / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        sent_by(args(str(tmp_path / "a.md"), meta=[flag]))
    message = str(exc.value.code)
    assert message.startswith("kb ingest: --meta") and named in message


def test_i_ingest_malformed_sidecar_is_refused_for_its_file_only(tmp_path: Path, capsys: Any) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    (docs / "a.md.metadata.json").write_text("{not really json", encoding="utf-8")
    (docs / "b.md").write_text("# B\n\nbeta", encoding="utf-8")
    sent = sent_by(args(str(docs)))
    assert [d["doc_id"] for d in sent[0]["documents"]] == ["b"]
    err = capsys.readouterr().err
    assert "a.md: invalid_metadata" in err and "not really" not in err


def test_doc_list_and_show_print_metadata(capsys: Any) -> None:
    listing = {
        "source": "s@1",
        "truncated": False,
        "documents": [
            {
                "doc_id": "a",
                "title": "A",
                "revision": "sha256:" + "0" * 64,
                "status": "ready",
                "chars": 5,
                "updated_at": "2026-12-02T01:00:00Z",
                "tenant": "t",
                "metadata": {"region": "eu", "year": 2024, "tags": ["x"], "code": "2024"},
            }
        ],
    }

    def call(endpoint: str, method: str, path: str, body: Any = None) -> Any:
        return listing

    namespace = argparse.Namespace(source="s@1", endpoint="http://x", json=False, doc_id="a")
    inventory.cmd_doc_list(namespace, call)
    out = capsys.readouterr().out
    assert "METADATA" in out.splitlines()[0]
    assert 'code="2024" region=eu tags=["x"] year=2024' in out
    inventory.cmd_doc_show(namespace, call)
    assert 'metadata:  code="2024" region=eu tags=["x"] year=2024' in capsys.readouterr().out
    namespace.json = True
    inventory.cmd_doc_show(namespace, call)
    assert json.loads(capsys.readouterr().out)["metadata"]["year"] == 2024

"""A newcomer's first documents, doc ids, job status and directory bounds through `kb serve` and the `kb`
CLI."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid

from tests.e2e.conftest import KB, ROOT, KbServer
from tests.e2e.test_mcp import drive, mcp_client

SOURCE = "demo-docs@1.0.0"
PDF = (ROOT / "examples" / "manuals" / "compressor-oil.pdf").read_bytes()


def test_p4_inventory_lists_sources_docs_agents_workspaces(kb_server: KbServer):
    sources = kb_server.kb("source", "list")
    assert sources.returncode == 0 and sources.stdout.splitlines()[0].startswith("SOURCE")
    assert SOURCE in sources.stdout and sources.stdout.endswith("\n")
    docs = kb_server.kb("doc", "list", "--source", SOURCE)
    header, *rows = docs.stdout.splitlines()
    assert header.split()[:5] == ["DOC_ID", "TENANT", "STATUS", "CHARS", "UPDATED"] and rows
    assert all(r.split()[1] == "default" and r.split()[2] == "ready" for r in rows)
    listed = json.loads(kb_server.kb("doc", "list", "--source", SOURCE, "--json").stdout)
    first = listed["documents"][0]
    assert first["tenant"] == "default"
    shown = kb_server.kb("doc", "show", "--source", SOURCE, "--doc-id", first["doc_id"])
    assert shown.returncode == 0 and "tenant:    default" in shown.stdout and "updated:" in shown.stdout
    agents = kb_server.kb("agent", "list")
    rows = {line.split()[0]: line.split()[1:] for line in agents.stdout.splitlines()[1:]}
    assert rows["demo-router@1.0.0"][:3] == ["AUTO", "yes", "—"] and rows["demo-agent@1.0.0"][2] == "demo"
    assert json.loads(kb_server.kb("workspace", "list", "--json").stdout)["workspaces"]
    assert "demo  " in kb_server.kb("workspace", "list").stdout
    tokens = kb_server.kb("token", "list")
    assert "expires=20" in tokens.stdout and "expires_at=1" not in tokens.stdout  # readable, not epoch


def test_p5_refused_connection_names_the_endpoint_and_the_fix():
    done = subprocess.run(
        [*KB, "source", "list", "--endpoint", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "cannot reach http://127.0.0.1:9" in done.stderr and "make serve" in done.stderr
    assert "KB_ENDPOINT" in done.stderr and "urlopen" not in done.stderr


def test_p6_job_status_takes_the_readme_order(kb_server: KbServer, tmp_path):
    (tmp_path / "n.md").write_text("# N\nbody", encoding="utf-8")
    job_id = kb_server.kb("ingest", "--source", SOURCE, "--no-wait", str(tmp_path / "n.md")).stdout.strip()
    done = kb_server.kb("job", "status", "--source", SOURCE, job_id)
    assert done.returncode == 0 and f"job {job_id}" in done.stdout, done.stderr
    assert kb_server.kb("job", "status", job_id, "--source", SOURCE).returncode == 0


def test_p6_kb_invoke_honours_kb_endpoint(kb_server: KbServer):
    env = {
        **os.environ,
        "KB_ENDPOINT": kb_server.endpoint,
        "KB_STATE": str(kb_server.state),
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }
    argv = [*KB, "invoke", "CapabilitiesFunction", "-e", "events/capabilities/get.json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and json.loads(done.stdout)["statusCode"] == 200, done.stderr
    assert "in-process" not in done.stderr and '"_aws"' not in done.stderr
    env.pop("KB_ENDPOINT")
    here = [*argv, "--in-process"]  # not whatever kb serve may listen on the default port
    local = subprocess.run(here, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert local.returncode == 0 and "kb invoke: running in-process" in local.stderr


def test_p5_p7_M5_L6_kb_ingest_files(kb_server: KbServer, tmp_path):
    """One remote directory upload: a symlink and hidden files are not sent (M5); a file that is not text
    and a file over 5 MiB each get one typed line and the rest goes on (L6); exit 1 (point 5); a .txt title
    is its file name and a CJK name keeps its id suffix under another prefix (point 7); a Windows-1252 text
    is read as such, as a job that extracts it would (extraction.decode_text)."""
    term = f"zz{uuid.uuid4().hex[:10]}"
    root = tmp_path / "docs"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config.md").write_text(f"# secret {term}\n", "utf-8")
    (root / ".hidden.md").write_text(f"# hidden {term}\n", "utf-8")
    outside = tmp_path / "outside.md"
    outside.write_text(f"# outside {term}\n", "utf-8")
    (root / "link.md").symlink_to(outside)
    (root / "说明书.txt").write_text(f"{term} 使用说明\n", "utf-8")
    (root / "latin1.txt").write_bytes(f"{term} caf\xe9 au lait".encode("latin-1"))
    (root / "binary.txt").write_bytes(b"\x00\x01\x02 not text \xff")
    (root / "huge.md").write_text("x" * (5 * 1024 * 1024 + 1), "utf-8")
    done = _ingest_remote(kb_server, root, term)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert any(line.startswith("kb ingest: binary.txt: corrupt") for line in lines), lines
    assert any(line.startswith("kb ingest: huge.md: too_large") for line in lines), lines
    assert "Traceback" not in done.stderr and "validation error" not in done.stderr
    assert "ingested 2 document(s)" in done.stdout and "2 failed" in done.stdout
    listed = json.loads(kb_server.kb("doc", "list", "--source", SOURCE, "--json").stdout)["documents"]
    mine = [d for d in listed if d["doc_id"].startswith(term)]
    assert sorted(d["title"] for d in mine) == ["latin1", "说明书"]
    found = kb_server.kb("search", "--route", "demo", "--json", f"{term} café")
    assert [h["title"] for h in json.loads(found.stdout)["hints"]][:1] == ["latin1"], found.stdout
    assert "café au lait" in found.stdout, found.stdout
    suffix = next(d for d in mine if d["title"] == "说明书")["doc_id"].removeprefix(f"{term}-")
    other = _ingest_remote(kb_server, root, f"{term}b")
    assert other.returncode == 1
    ids = {
        d["doc_id"]
        for d in json.loads(kb_server.kb("doc", "list", "--source", SOURCE, "--json").stdout)["documents"]
    }
    assert f"{term}b-{suffix}" in ids


def _ingest_remote(kb_server: KbServer, root, prefix: str) -> subprocess.CompletedProcess:
    """`kb ingest DIR` as to a remote endpoint: the client walks the directory and sends the files."""
    code = (
        "import sys; from kb_cli.commands import ingest; ingest._is_loopback = lambda e: False; "
        "from kb_cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    argv = ["ingest", "--source", SOURCE, "--doc-id", prefix, str(root), "--endpoint", kb_server.endpoint]
    env = {**os.environ, "KB_STATE": str(kb_server.state)}  # where the CLI reads the operator credential
    return subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )


def test_p7_single_file_without_doc_id_takes_its_name(kb_server: KbServer, tmp_path):
    term = f"zz{uuid.uuid4().hex[:10]}"
    path = tmp_path / f"{term}.txt"
    path.write_text(f"{term} plain text without a heading\n", "utf-8")
    done = kb_server.kb("ingest", "--source", SOURCE, str(path))
    assert done.returncode == 0, done.stderr
    shown = kb_server.kb("doc", "show", "--source", SOURCE, "--doc-id", term)
    assert shown.returncode == 0 and f"title:     {term}" in shown.stdout


def test_p3_text_route_refuses_file_bytes_and_jobs_extract_them(kb_server: KbServer):
    path = f"/admin/v1/sources/{SOURCE}/documents"
    for body in ("%PDF-1.4 raw", "a\x00b"):
        doc = {"doc_id": "x", "title": "t", "body": body, "acl": {"tenant": "default"}}
        refused = kb_server.request("POST", path, {"documents": [doc]})
        assert refused.status == 400 and refused.json["error"]["code"] == "invalid_request"
        assert refused.json["error"]["message"].startswith("documents.0.body: not text")
    # the console's upload: the file's bytes as an ingestion job (what console.js sends)
    doc_id = f"pdf-{uuid.uuid4().hex[:8]}"
    job = {
        "documents": [
            {
                "doc_id": doc_id,
                "filename": "compressor-oil.pdf",
                "content_base64": base64.b64encode(PDF).decode(),
                "acl": {"tenant": "default"},
                "structured_source": {"uri": "compressor-oil.pdf"},
            }
        ]
    }
    accepted = kb_server.request("POST", f"/admin/v1/sources/{SOURCE}/ingestion-jobs", job)
    assert accepted.status == 202
    waited = kb_server.kb("job", "status", "--source", SOURCE, accepted.json["job_id"])
    assert waited.returncode == 0
    console = (ROOT / "src" / "kb_cli" / "console" / "console.js").read_text(encoding="utf-8")
    assert "file.text()" not in console and "/ingestion-jobs`, body)" in console


def test_p9_kb_search_explains_an_empty_answer(kb_server: KbServer):
    found = kb_server.kb("search", "--route", "demo", "网关离线怎么排查？")
    assert found.returncode == 0 and "1. " in found.stdout and "no hints" not in found.stdout
    other = kb_server.kb("search", "--route", "demo", "--tenant", "nobody", "网关离线怎么排查？")
    assert "no hints:" in other.stdout and "no ready document of tenant 'nobody'" in other.stdout
    kb_server.kb("workspace", "set", "router-e2e", "--agent", "demo-router@1.0.0")
    auto = kb_server.kb("search", "--route", "router-e2e", "网关离线怎么排查？")
    assert "no source selected: agent demo-router@1.0.0 routes AUTO" in auto.stdout, auto.stdout
    assert "context projectType=monitor" in auto.stdout


def test_p10_mcp_lists_the_capabilities_resource_template(kb_server: KbServer):
    async def session(c):
        return (await c.list_resource_templates()).resource_templates

    templates = drive(mcp_client(kb_server, "http"), session)
    assert [t.uri_template for t in templates] == ["knowledge://workspaces/{route}/capabilities"]

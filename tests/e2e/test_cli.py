"""e2e of the `kb` CLI against `kb serve` (R-ADMIN, §5): `kb token issue`, `kb ingest` of a file and of
a directory, `kb doc delete` — and search sees each change at once, old refs answer 409; plus
`kb invoke` in-process and against the server."""

from __future__ import annotations

import json
import uuid

from tests.e2e.conftest import KbServer

SOURCE = "demo-docs@1.0.0"


def titles(server: KbServer, query: str, token: str | None = None) -> list[str]:
    response = server.knowledge("demo", "search", {"query": query}, token=token)
    assert response.status == 200 and response.json["status"] == "ok", response.raw
    return [h["title"] for h in response.json["hints"]]


def test_kb_token_issue(kb_server):
    done = kb_server.kb(
        "token",
        "issue",
        "--route",
        "demo",
        "--client",
        "cli-e2e",
        "--subject",
        "alice",
        "--tenant",
        "demo",
        "--ttl",
        "600",
    )
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token.startswith("kbt_")
    assert kb_server.knowledge("demo", "capabilities", token=token).status == 200
    other = kb_server.kb("token", "issue", "--route", "elsewhere", "--route-set-later")
    assert kb_server.knowledge("demo", "capabilities", token=other.stdout.strip()).status == 403


def test_kb_ingest_file_then_delete(kb_server, tmp_path):
    term = f"zz{uuid.uuid4().hex[:10]}"
    path = tmp_path / "note.md"
    path.write_text(
        f"# Pump maintenance {term}\n\nThe {term} pump needs new seals every 90 days.\n", encoding="utf-8"
    )
    assert titles(kb_server, term) == []
    done = kb_server.kb(
        "ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", f"cli-{term}", str(path)
    )
    assert done.returncode == 0, done.stderr
    assert titles(kb_server, term) == [f"Pump maintenance {term}"]
    hint = kb_server.knowledge("demo", "search", {"query": term}).json["hints"][0]
    page = kb_server.knowledge("demo", "read", {"ref": hint["ref"]}).json
    assert page["content"].rstrip("\n") == f"The {term} pump needs new seals every 90 days."

    done = kb_server.kb("doc", "delete", "--source", SOURCE, "--doc-id", f"cli-{term}")
    assert done.returncode == 0, done.stderr
    assert titles(kb_server, term) == []
    gone = kb_server.knowledge("demo", "read", {"ref": hint["ref"]})
    assert gone.status == 409 and gone.json["error"]["code"] == "knowledge_changed"
    again = kb_server.kb("doc", "delete", "--source", SOURCE, "--doc-id", f"cli-{term}")
    assert again.returncode == 1 and "404" in again.stderr


def test_kb_ingest_directory(kb_server, tmp_path):
    term = f"zz{uuid.uuid4().hex[:10]}"
    (tmp_path / "guides" / "nested").mkdir(parents=True)
    (tmp_path / "guides" / "valve.md").write_text(
        f"# Valve guide\n\n{term} valve torque is 12 Nm.\n", "utf-8"
    )
    (tmp_path / "guides" / "nested" / "阀门.txt").write_text(f"阀门检修 {term} 每季度一次。\n", "utf-8")
    (tmp_path / "guides" / "ignored.bin").write_bytes(b"\x00\x01")
    done = kb_server.kb(
        "ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", term, str(tmp_path / "guides")
    )
    assert done.returncode == 1, done.stderr  # a file of a format no job takes fails, listed
    assert "2 document(s)" in done.stdout and "unsupported_format (ignored.bin)" in done.stderr
    found = sorted(titles(kb_server, term))
    # A file without a heading is titled by its file name; a non-ASCII path still yields
    # a valid doc_id.
    assert found == ["Valve guide", "阀门"]
    listed = json.loads(kb_server.kb("doc", "list", "--source", SOURCE, "--json").stdout)["documents"]
    nested_id = next(d["doc_id"] for d in listed if d["doc_id"].startswith(f"{term}-nested-"))
    assert nested_id.isascii()
    # Replacing a document: its old ref answers 409, search shows the new text.
    old = kb_server.knowledge("demo", "search", {"query": f"{term} torque"}).json["hints"][0]
    (tmp_path / "guides" / "ignored.bin").unlink()  # every file ingested: exit 0
    (tmp_path / "guides" / "valve.md").write_text(
        f"# Valve guide\n\n{term} valve torque is 15 Nm.\n", "utf-8"
    )
    assert (
        kb_server.kb(
            "ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", term, str(tmp_path / "guides")
        ).returncode
        == 0
    )
    changed = kb_server.knowledge("demo", "read", {"ref": old["ref"]})
    assert changed.status == 409 and changed.json["error"]["code"] == "knowledge_changed"
    new = kb_server.knowledge("demo", "search", {"query": f"{term} torque"}).json["hints"][0]
    assert "15 Nm" in kb_server.knowledge("demo", "read", {"ref": new["ref"]}).json["content"]
    for doc_id in (f"{term}-valve", nested_id):
        assert kb_server.kb("doc", "delete", "--source", SOURCE, "--doc-id", doc_id).returncode == 0
    assert titles(kb_server, term) == []


def test_kb_invoke_in_process_prints_a_200_result(kb_server):
    done = kb_server.kb("invoke", "search", "-e", "events/search/search.json", "--in-process", endpoint=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["statusCode"] == 200 and result["headers"]["Cache-Control"] == "no-store"
    body = json.loads(result["body"])
    assert body["status"] == "ok" and body["hints"]


def test_kb_invoke_against_the_server(kb_server):
    done = kb_server.kb("invoke", "CapabilitiesFunction", "-e", "events/capabilities/get.json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["statusCode"] == 200 and json.loads(result["body"])["enabled"] is True


def test_kb_serve_refuses_an_unusable_model_directory_in_one_line(tmp_path):
    """Bad input: a model directory named on the command line that cannot be used stops kb serve
    before it listens, with one line naming it — never a crash on the first query."""
    import subprocess

    model = tmp_path / "model"
    model.mkdir()
    (model / "model.json").write_text('{"id": "m", "dimensions": 384}')
    for args, expected in (
        (["--embedding-model", str(tmp_path / "nowhere")], "does not exist"),
        (["--embedding-model", str(model)], "is incomplete (no model.onnx, tokenizer.json)"),
    ):
        done = subprocess.run(
            _serve_command(tmp_path, *args),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and expected in done.stderr and done.stdout == ""


def _serve_command(tmp_path, *args: str) -> list[str]:
    import sys

    return [
        sys.executable,
        "-m",
        "kb_cli.main",
        "serve",
        "--state",
        str(tmp_path / "state"),
        "--port",
        "0",
        *args,
    ]


def _banner(tmp_path, env: dict, *args: str) -> str:
    """kb serve's start-up lines (up to the one that says it listens), then stop it."""
    import os
    import subprocess

    proc = subprocess.Popen(
        _serve_command(tmp_path, "--no-demo", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "listening on" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return "".join(lines)


def test_kb_serve_ranks_hybrid_with_the_fetched_models_by_default(tmp_path, embedding_model_dir):
    """`kb serve` finds the models `kb models fetch` put in the per-user cache, whatever --state;
    a broken cache falls back to BM25 and the banner says why."""
    banner = _banner(tmp_path, {"KB_MODELS_DIR": embedding_model_dir})
    assert "ranking: hybrid with bge-small-en-v1.5-q+bge-small-zh-v1.5-q" in banner
    broken = tmp_path / "cache" / "bge-small-en-v1.5-q"
    broken.mkdir(parents=True)
    for name in ("model.onnx", "tokenizer.json"):
        (broken / name).write_bytes(b"not a model")
    (broken / "model.json").write_text('{"format": 2, "id": "bge-small-en-v1.5-q", "dimensions": 384}')
    banner = _banner(tmp_path, {"KB_MODELS_DIR": str(tmp_path / "cache")})
    assert "ranking: BM25 (fallback: embedding model" in banner and "cannot be loaded" in banner


def test_kb_serve_expands_queries_with_the_compiled_lexicon(tmp_path, lexicon_dir):
    """`kb serve` finds the lexicon `kb models fetch` compiled into the per-user cache and says so;
    --no-query-translation turns it off; an unusable KB_LEXICON_DIR stops it in one line before it listens."""
    import os
    import subprocess
    from pathlib import Path

    cache = {"KB_MODELS_DIR": str(Path(lexicon_dir).parent)}
    on = _banner(tmp_path, cache, "--embedding-model", "none")
    assert "query translation: cc-cedict-zh-en zh<->en (" in on
    off = _banner(tmp_path, cache, "--embedding-model", "none", "--no-query-translation")
    assert "query translation: off;" in off
    absent = _banner(tmp_path, {"KB_MODELS_DIR": str(tmp_path / "nothing")}, "--embedding-model", "none")
    assert "query translation: off (no lexicon: `kb models fetch --lexicon` once)" in absent
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "lexicon.json").write_text('{"format": 1}')
    done = subprocess.run(
        _serve_command(tmp_path, "--embedding-model", "none"),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KB_LEXICON_DIR": str(broken)},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "invalid lexicon.json" in done.stderr and done.stdout == ""

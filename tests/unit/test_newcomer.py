"""A newcomer's own documents, right the first time, and the CLI's layout:
unit tests of the `kb` CLI and the demo workspace, on embedded state; no network."""

from __future__ import annotations

import ast
import contextlib
import json
from pathlib import Path

from knowledge_core.domain.models import Principal

from kb_cli import demo
from kb_cli.commands import serve as serve_command

KB_CLI = Path(__file__).resolve().parents[2] / "src" / "kb_cli"
DEMO_SOURCE = "demo-docs@1.0.0"


def _search(container, tenant: str, query: str) -> list[str]:  # hint titles
    from knowledge_core.domain.wire import SearchRequest

    principal = Principal(client_id="c", session_id="s", subject="demo-user", tenant=tenant, routes=["demo"])
    response = container.knowledge.search(principal, "demo", SearchRequest(query=query))
    return [h.title for h in response.hints]


# --- the CLI in command modules ------------------------------------------------------------------------


def test_p5_cli_functions_are_at_most_60_lines():
    modules = [KB_CLI / "main.py", KB_CLI / "mcp_stdio.py", KB_CLI / "local_env.py"]
    modules += sorted((KB_CLI / "commands").glob("*.py"))
    long = [
        f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in modules
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60
    ]
    assert long == []


def test_p5_main_and_mcp_stdio_do_not_import_each_other():
    def imports(path: Path) -> set[str]:
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                found.add(("." * node.level) + (node.module or ""))
                found.update(f"{'.' * node.level}{node.module or ''}.{a.name}" for a in node.names)
        return found

    assert not {".main", "kb_cli.main", "..main"} & imports(KB_CLI / "mcp_stdio.py")
    assert not any("mcp_stdio" in name for name in imports(KB_CLI / "main.py"))


# --- one default tenant -----------------------------------------------------------------------------------


def test_p1_demo_workspace_token_and_commands_use_the_default_tenant(demo_container):
    """SPEC §1 default tenant: the demo documents, the demo token and `kb token issue`/`kb ingest` defaults
    are all `default`, so what the README's commands ingest the printed token finds."""
    from kb_cli.main import build_parser

    assert demo.DEFAULT_TENANT == "default"
    assert {d.acl.tenant for d in demo.demo_documents()} == {"default"}
    token = demo.issue_token(demo_container)
    assert demo_container.access.authenticate(f"Bearer {token}").tenant == "default"
    parser = build_parser()
    assert parser.parse_args(["token", "issue", "--route", "demo"]).tenant == "default"
    assert parser.parse_args(["ingest", "--source", "s@1", "f.md"]).tenant == "default"
    console = (KB_CLI / "console" / "console.js").read_text(encoding="utf-8")
    assert 'value: "demo" }' not in console and console.count('name: "tenant", value: "default"') == 4


def test_p1_a_state_seeded_with_tenant_demo_keeps_working(demo_container, tmp_path, capsys):
    """An existing .kb-state (demo documents and token of tenant `demo`): `kb serve` moves the demo source's
    documents to `default`, renews the demo token and says so in one line."""
    legacy = [
        d.model_copy(update={"acl": d.acl.model_copy(update={"tenant": "demo"})})
        for d in demo.demo_documents()
    ]
    demo_container.admin.put_documents(legacy)
    old_token = demo.issue_token(demo_container)
    old = demo_container.access.authenticate(f"Bearer {old_token}")
    (tmp_path / "demo-token").write_text(old_token + "\n", encoding="utf-8")
    assert _search(demo_container, "default", "网关离线") == []
    # the old token was issued for tenant default by today's code: make it an old one, of tenant demo
    session = demo_container.state.sessions.get_session(_hash(old_token))
    assert session is not None and old.tenant == "default"
    demo_container.state.sessions.put_session(_hash(old_token), session.model_copy(update={"tenant": "demo"}))

    serve_command._seed_demo(demo_container, tmp_path)
    lines = capsys.readouterr().out.splitlines()
    notes = [line for line in lines if line.startswith("note:")]
    assert len(notes) == 1 and "from tenant 'demo' to 'default'" in notes[0]
    assert f"{len(legacy)} document(s)" in notes[0]
    assert f"{len(legacy)} documents in {DEMO_SOURCE} (tenant default)" in lines[1]
    new_token = lines[-1]
    assert new_token != old_token and (tmp_path / "demo-token").read_text().strip() == new_token
    assert demo_container.access.authenticate(f"Bearer {new_token}").tenant == "default"
    assert _search(demo_container, "default", "网关离线")
    assert demo.adopt_default_tenant(demo_container) == 0  # idempotent: a second start says nothing


def _hash(token: str) -> str:
    from knowledge_core.services.access import token_hash

    return token_hash(token)


def test_p5_banner_counts_the_stored_documents(demo_container, tmp_path, capsys):
    """The banner counts what the demo source holds after a restart, not the seed corpus."""
    extra = demo.markdown_document(DEMO_SOURCE, "extra", "# Extra\nbody")
    demo_container.admin.put_documents([extra])
    serve_command._seed_demo(demo_container, tmp_path)
    out = capsys.readouterr().out
    assert f"{len(demo.demo_documents()) + 1} documents in {DEMO_SOURCE}" in out
    assert json.dumps(out)  # printable


def test_g_local_a_first_start_stores_the_demo_at_once_and_fills_its_vectors_after(
    tmp_path, clock, monkeypatch, capsys
):
    """G-LOCAL: with a model in force the first `kb serve` stores the demo's text without embedding it (it
    listens at once), says so first, and answers by BM25 saying `filling`; the background fill then gives
    the passages their vectors and the same search ranks hybrid. A restart, which keeps the seeded
    workspace, says nothing of seeding."""
    from knowledge_core.domain.wire import SearchRequest

    from kb_cli.local_env import VectorFill
    from tests.conftest import embedded_container
    from tests.unit.test_vector_fill import CountingEmbedder

    embedder = CountingEmbedder()
    container = embedded_container(tmp_path, clock, embedding_model_dir="fake")
    container._embedder = embedder  # the port override: this embedder, no model files
    serve_command._seed_demo(container, tmp_path, embedded=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("seeding the demo workspace 'demo': searchable by BM25 at once")
    assert "demo workspace 'demo' seeded" in lines[1]
    assert embedder.passages == 0
    principal = Principal(client_id="c", session_id="s", subject="u", tenant="default", routes=["demo"])
    ranking = container.knowledge.capabilities(principal, "demo").extensions.ranking
    assert (ranking.mode, ranking.vectors) == ("bm25", "filling")
    assert container.knowledge.search(principal, "demo", SearchRequest(query="网关离线")).hints
    fill = VectorFill(container, say=print)
    assert fill.start() and fill.wait(60)
    assert embedder.passages > 0
    assert "hybrid ranking in force" in capsys.readouterr().out
    ranking = container.knowledge.capabilities(principal, "demo").extensions.ranking
    assert (ranking.mode, ranking.vectors) == ("hybrid", "ready")
    assert container.knowledge.search(principal, "demo", SearchRequest(query="网关离线")).hints
    serve_command._seed_demo(container, tmp_path, embedded=True)
    assert "seeding" not in capsys.readouterr().out


# --- make serve installs only when something changed --------------------------------------------------------


def test_p8_make_serve_installs_only_when_pyproject_changed(tmp_path):
    import os
    import shutil
    import subprocess
    import time

    if shutil.which("make") is None:
        import pytest

        pytest.skip("no make here")
    root = KB_CLI.parents[1]
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(root / name, tmp_path / name)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)

    def dry_run() -> str:
        done = subprocess.run(
            ["make", "-n", "venv"], cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = dry_run()
    assert "pip install" in first and "PYTHONWARNINGS=ignore" in first  # no setuptools notice box
    (tmp_path / ".venv" / ".installed-semantic").touch()
    assert "pip install" not in dry_run()
    later = time.time() + 5
    os.utime(tmp_path / "pyproject.toml", (later, later))
    assert "pip install" in dry_run()


def test_p8_handlers_do_not_warn_about_empty_metrics(tmp_path, monkeypatch):
    """kb serve's worker processes inherit PYTHONWARNINGS ignoring Powertools' empty-metrics warning."""
    import os
    import subprocess
    import sys

    from kb_cli import local_env

    monkeypatch.setattr(os, "environ", dict(os.environ))
    os.environ["PYTHONWARNINGS"] = "error::ResourceWarning"
    local_env.configure_local_env(tmp_path / "state")
    assert os.environ["PYTHONWARNINGS"].split(",") == [
        "error::ResourceWarning",
        local_env.QUIET_METRICS_WARNING,
    ]
    code = (
        "import warnings; warnings.warn('No application metrics to publish. The cold-start metric may be "
        "published if enabled.', UserWarning)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0 and done.stderr == ""


# --- readable, stable doc ids -------------------------------------------------------------------------------


def test_p7_cjk_file_names_get_readable_ids_with_the_same_suffix_under_any_prefix():
    from pathlib import PurePath

    from knowledge_core.domain.ingestion import directory_doc_id, path_doc_id

    a = directory_doc_id("manuals", PurePath("阀门检修.txt"))
    b = directory_doc_id("guides", PurePath("阀门检修.txt"))
    assert a.startswith("manuals-FaMenJianXiu-") and b.startswith("guides-FaMenJianXiu-")
    assert a.removeprefix("manuals-") == b.removeprefix("guides-") == path_doc_id("阀门检修")
    assert directory_doc_id("p", PurePath("sub/valve.md")) == "p-sub-valve"  # valid names unchanged
    assert path_doc_id("阀门") != path_doc_id("閥門")  # names that read alike stay apart


def test_p7_L6_M5_kb_ingest_files_client_side(tmp_path, monkeypatch, capsys):
    """A single file without --doc-id takes its file name; a .txt without a heading is titled by its file
    name; a remote directory walk skips links and hidden files; a file that is not text or is > 5 MiB gets
    one typed line and the rest is sent; exit 1."""
    from kb_cli import main

    sent: list[dict] = []
    monkeypatch.setattr(main, "call", lambda endpoint, method, path, body=None: sent.append(body))
    (tmp_path / "notes.txt").write_text("plain words", encoding="utf-8")
    assert (
        main.main(["ingest", "--source", "s@1", str(tmp_path / "notes.txt"), "--endpoint", "http://x"]) == 0
    )
    doc = sent[-1]["documents"][0]
    assert (doc["doc_id"], doc["title"], doc["body"]) == ("notes", "notes", "plain words")
    root = tmp_path / "dir"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config.md").write_text("# no", encoding="utf-8")
    (root / ".env.md").write_text("# no", encoding="utf-8")
    (root / "link.md").symlink_to(tmp_path / "notes.txt")
    (root / "linked").symlink_to(root / ".git", target_is_directory=True)
    (root / "ok.md").write_text("# OK\nbody", encoding="utf-8")
    (root / "bad.txt").write_bytes(b"\x00\x01\x02bad\xff")
    (root / "big.md").write_bytes(b"x" * (5 * 1024 * 1024 + 1))
    sent.clear()
    assert main.main(["ingest", "--source", "s@1", "--doc-id", "d", str(root), "--endpoint", "http://x"]) == 1
    assert [d["doc_id"] for d in sent[0]["documents"]] == ["d-ok"]
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1].strip() for line in err] == ["bad.txt", "big.md"]
    assert err[0].startswith("kb ingest: bad.txt: corrupt") and err[1].startswith(
        "kb ingest: big.md: too_large"
    )


def test_i_ingest_kb_ingest_takes_several_paths_as_one_directory(tmp_path, monkeypatch):
    """`kb ingest --doc-id mine docs/*.md` (a shell glob: several paths, before or among its flags) sends
    every file, each with the id a directory upload gives it (`mine docs/` names `boiler.md`
    `mine-boiler`), and refuses what only one path may take (an s3:// prefix, --sync, --title) or two files
    of one id, before any job."""
    import pytest
    from knowledge_core.domain.ingestion import directory_doc_id

    from kb_cli import main

    sent: list[dict] = []
    monkeypatch.setattr(main, "call", lambda endpoint, method, path, body=None: sent.append(body))
    docs = tmp_path / "docs"
    (docs / "more").mkdir(parents=True)
    (docs / "boiler.md").write_text("# Boiler\nbody", encoding="utf-8")
    (docs / "阀门.md").write_text("# 阀门\n正文", encoding="utf-8")
    (docs / "more" / "pump.md").write_text("# Pump\nbody", encoding="utf-8")
    base = ["ingest", "--source", "s@1", "--endpoint", "http://127.0.0.1:9", "--doc-id", "mine"]
    assert main.main([*base, str(docs / "boiler.md"), str(docs / "阀门.md"), str(docs / "more")]) == 0
    several = sorted(d["doc_id"] for job in sent for d in job["documents"])
    sent.clear()
    # paths after flags too: argparse alone reads one run of positionals (`a.md --sync b.md` was an error)
    assert (
        main.main(["ingest", str(docs / "boiler.md"), *base[1:], str(docs / "阀门.md"), str(docs / "more")])
        == 0
    )
    assert sorted(d["doc_id"] for job in sent for d in job["documents"]) == several
    sent.clear()
    monkeypatch.setattr("kb_cli.commands.ingest._is_loopback", lambda endpoint: False)
    assert main.main([*base, str(docs)]) == 0  # the directory itself, as a remote upload walks it
    whole = sorted(d["doc_id"] for job in sent for d in job["documents"])
    assert whole == sorted(["mine-boiler", directory_doc_id("mine", Path("阀门.md")), "mine-more-pump"])
    # each file as in its own directory's upload, each directory named as in its own upload
    assert several == sorted([*whole[:2], "mine-pump"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "boiler.md").write_text("# Other\nbody", encoding="utf-8")
    for extra, message in (
        ([str(tmp_path / "other" / "boiler.md")], "would both be document mine-boiler"),
        (["s3://bucket/prefix/"], "s3:// prefix is ingested on its own"),
        (["--sync", str(docs / "阀门.md")], "--sync takes one directory"),
        (["--title", "T", str(docs / "阀门.md")], "--title names one file"),
        ([str(tmp_path / "missing.md")], "missing.md: no such file or directory"),
    ):
        sent.clear()
        with pytest.raises(SystemExit, match=message):
            main.main([*base, *extra[:-1], str(docs / "boiler.md"), extra[-1]])
        assert sent == []


def test_p6_kb_invoke_sends_to_kb_endpoint(monkeypatch, capsys):
    from kb_cli import main

    calls: list[tuple] = []
    monkeypatch.setattr(
        main, "call", lambda endpoint, method, path, body=None: calls.append((endpoint, path)) or {}
    )
    monkeypatch.setenv("KB_ENDPOINT", "http://127.0.0.1:9999")
    assert main.main(["invoke", "search", "-e", "events/search/search.json"]) == 0
    assert calls == [("http://127.0.0.1:9999", "/2015-03-31/functions/search/invocations")]


# --- kb search shows what the service chose to show ---------------------------------------------------------


def test_a_search_kb_search_prints_whole_summaries_and_json(capsys, monkeypatch):
    """`kb search` prints each hint's whole summary (the window the service sized to carry the answer, issue
    24; it used to cut it at 200 characters: "…Alarm A31 mean"), wrapped to the terminal; `--json` prints
    the search API's answer as it came."""
    from kb_cli.main import build_parser

    summary = "p. 3: 5. Alarms " + " ".join(f"Alarm A{n} means check item {n} first." for n in range(10, 32))
    answer = {"status": "ok", "hints": [{"title": "chiller", "score": 22.886353, "summary": summary}]}
    asked: list[tuple[str, str, dict]] = []

    def call(endpoint, method, path, body=None, headers=None):
        asked.append((method, path, body))
        return answer

    monkeypatch.setenv("COLUMNS", "80")
    args = build_parser().parse_args(
        ["search", "--route", "plant", "--token", "t", "what does alarm A31 mean"]
    )
    assert args.func(args, call) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1. chiller  (score 22.886)"
    assert all(line.startswith("   ") and len(line) <= 80 for line in lines[1:])
    assert " ".join(line.strip() for line in lines[1:]) == summary
    assert asked == [
        (
            "POST",
            "/agent-api/v1/workspaces/plant/knowledge/search",
            {"query": "what does alarm A31 mean", "limit": 3},
        )
    ]
    args = build_parser().parse_args(["search", "--route", "plant", "--token", "t", "--json", "alarm"])
    assert args.func(args, call) == 0
    assert json.loads(capsys.readouterr().out) == answer


def test_kb_doc_takes_the_document_after_its_action(monkeypatch, capsys):
    """`kb doc show ID --source S` (as a newcomer types it; it was refused as an unrecognized argument) is
    `kb doc show --doc-id ID`; two different documents, none, or one given to `list` get a one-line refusal
    (exit 2) and no request."""
    from kb_cli import main

    calls: list[tuple] = []

    def call(endpoint, method, path, body=None):
        calls.append((method, path))
        doc = {"doc_id": "faq", "title": "FAQ", "tenant": "default", "status": "ready", "chars": 9}
        return {"documents": [{**doc, "revision": "sha256:ab", "updated_at": "2026-12-04T17:52:16Z"}]}

    monkeypatch.setattr(main, "call", call)
    base = ["--source", "s@1", "--endpoint", "http://x"]
    assert main.main(["doc", "disable", "faq", *base]) == 0
    assert main.main(["doc", "delete", *base, "--doc-id", "faq"]) == 0
    assert main.main(["doc", "enable", "faq", *base, "--doc-id", "faq"]) == 0
    assert calls == [
        ("POST", "/admin/v1/sources/s@1/documents/faq/disable"),
        ("DELETE", "/admin/v1/sources/s@1/documents/faq"),
        ("POST", "/admin/v1/sources/s@1/documents/faq/enable"),
    ]
    assert main.main(["doc", "show", "faq", *base]) == 0
    assert "title:     FAQ" in capsys.readouterr().out
    calls.clear()
    assert main.main(["doc", "show", "faq", *base, "--doc-id", "other"]) == 2
    assert main.main(["doc", "show", *base]) == 2
    assert main.main(["doc", "list", "faq", *base]) == 2
    assert calls == []
    assert capsys.readouterr().err.splitlines() == [
        "kb doc show: two documents given: faq and --doc-id other",
        "kb doc show: the following arguments are required: DOC_ID (or --doc-id)",
        "kb doc list: list takes no document (given: faq)",
    ]


def test_m_mcp_embedded_seeds_the_demo_only_for_its_own_route(tmp_path, capsys):
    """M-MCP: `kb mcp --embedded --route mine` on a state of one's own (`kb serve --no-demo`) leaves it
    without the demo workspace and starts at once; on the default route `demo` it seeds it, once."""
    from kb_cli.local_env import LocalRanking, local_container
    from kb_cli.mcp_stdio import embedded_door

    mine, default = tmp_path / "mine", tmp_path / "default"
    assert embedded_door(mine, "mine", None, True, LocalRanking())[1] is None
    registry = local_container(mine, ranking=LocalRanking()).state.registry
    assert registry.get_workspace_agent(demo.ROUTE) is None
    assert embedded_door(default, demo.ROUTE, None, True, LocalRanking())[1] is None  # seeded here, at once
    container = local_container(default, ranking=LocalRanking())
    assert container.state.registry.get_workspace_agent(demo.ROUTE) is not None
    assert demo.seeding_note(container, embedded=True) is None  # seeded: a restart says nothing
    assert "seeding" not in capsys.readouterr().err  # BM25: nothing to embed, nothing to wait for


def test_m_mcp_embedded_answers_at_once_by_bm25_while_the_demo_vectors_fill(tmp_path, monkeypatch, capsys):
    """M-MCP: on a first start with a model, `kb mcp --embedded` (route demo) stores the demo's text before
    it serves and fills the vectors in the background once the server runs: a tool call meanwhile answers
    by BM25 (never `knowledge_unavailable`) and capabilities say `filling`; once filled, hybrid."""
    import threading

    from knowledge_core.bootstrap import Container
    from knowledge_core.mcp_server import HINT_SEARCH_TOOL, call_tool

    from kb_cli.local_env import LocalRanking
    from kb_cli.mcp_stdio import embedded_door
    from tests.unit.test_vector_fill import CountingEmbedder

    release = threading.Event()
    embedder = CountingEmbedder(on_call=lambda: release.wait(30))
    monkeypatch.setattr(Container, "embedder", property(lambda self: embedder))
    door, filling = embedded_door(
        tmp_path / "state", demo.ROUTE, None, True, LocalRanking("fake", None, "hybrid")
    )
    assert filling is not None
    err = capsys.readouterr().err
    assert "seeding the demo workspace 'demo': searchable by BM25 at once" in err
    assert "ranking: BM25 while vectors fill in, then hybrid" in err
    filling.start()
    answered = call_tool(door, HINT_SEARCH_TOOL, {"query": "网关离线怎么排查"})
    assert not answered.is_error and answered.body["hints"]
    assert door.capabilities()["extensions"]["ranking"] == {"mode": "bm25", "vectors": "filling"}
    release.set()
    assert filling.wait(60)
    assert door.capabilities()["extensions"]["ranking"] == {"mode": "hybrid", "vectors": "ready"}
    answered = call_tool(door, HINT_SEARCH_TOOL, {"query": "网关离线怎么排查"})
    assert not answered.is_error and answered.body["hints"]
    assert "hybrid ranking in force" in capsys.readouterr().err


def test_a_seed_cut_short_is_done_again_on_the_next_start(container, monkeypatch):
    """A first start interrupted while the demo's passages are stored (Ctrl-C during the embedding) leaves
    no route `demo`, so the next start seeds it again instead of serving a half-filled workspace."""
    real_put = container.admin.put_documents

    def interrupted(documents):
        real_put(documents[:3])
        raise KeyboardInterrupt

    monkeypatch.setattr(container.admin, "put_documents", interrupted)
    with contextlib.suppress(KeyboardInterrupt):
        demo.seed_if_absent(container)
    assert container.state.registry.get_workspace_agent(demo.ROUTE) is None
    monkeypatch.setattr(container.admin, "put_documents", real_put)
    assert demo.seed_if_absent(container) is True
    key = f"{demo.SOURCE['id']}@{demo.SOURCE['version']}"
    assert len(container.backend.document_ids(key)) == len(demo.demo_documents())
    assert _search(container, "default", "网关离线")

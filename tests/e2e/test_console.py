"""The console (`kb serve` at /console/) in a real headless browser: Debian's chromium driven by
Playwright for Python (no browser download). Every page in English and Chinese at 1280x800 and 390x844
(screenshots under test-artifacts/console/), search and read to the end, tool calls whose rule fires
and whose rule does not (the seed's troubleshooting hint shown), tokens issued and revoked, an axe-core
check with no serious or critical violation, and the loopback/cross-site guards of the admin API."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, KbServer, running_kb_serve

ARTIFACTS = ROOT / "test-artifacts" / "console"
AXE = ROOT / "tests" / "console" / "node_modules" / "axe-core" / "axe.min.js"
VIEWS = ["sources", "agents", "try", "tokens"]
SIZES = [(1280, 800), (390, 844)]


def _require(what: str) -> None:
    message = f"console browser tests need {what} (scripts/browser_deps.sh installs it)"
    if os.environ.get("KB_REQUIRE_REAL_BACKENDS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KbServer]:
    with running_kb_serve(tmp_path_factory.mktemp("kb-console")) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        _require("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require("playwright")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any, console: KbServer) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(console.console_url)  # as kb serve prints it: the operator credential in the fragment
    page.wait_for_selector("main h2")
    yield page
    context.close()
    assert not errors, errors  # no uncaught script error on any page


def open_view(page: Any, console: KbServer, view: str) -> None:
    page.goto(f"{console.endpoint}/console/#{view}")
    page.wait_for_selector("main h2")
    page.wait_for_function("!document.querySelector('main').textContent.includes('Loading')")


def no_horizontal_overflow(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"))


def test_g_local_console_without_the_operator_credential_says_how_to_open_it(
    browser: Any, console: KbServer
) -> None:
    """G-LOCAL: the console opened without the credential calls no admin action and says to open the URL
    kb serve prints; that URL's fragment is kept for the tab and leaves the address bar."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    page = context.new_page()
    admin_calls: list[str] = []
    page.on("request", lambda r: admin_calls.append(r.url) if "/admin/" in r.url else None)
    try:
        page.goto(f"{console.endpoint}/console/")
        page.wait_for_selector("#operator-missing")
        assert "#operator=" in page.inner_text("#operator-missing") and admin_calls == []
        page.goto(console.console_url)
        page.wait_for_selector("main h2")
        assert "operator" not in page.url and admin_calls
        assert all(console.operator not in url for url in admin_calls)
        stored = page.evaluate("sessionStorage.getItem('kb-operator')")
        assert stored == console.operator
    finally:
        context.close()


def test_console_every_page_in_both_languages_and_sizes(page: Any, console: KbServer) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    headings = {}
    for lang in ("en", "zh"):
        if lang == "zh":
            page.click("#lang")
            page.wait_for_function("document.documentElement.lang === 'zh-CN'")
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            for view in VIEWS:
                open_view(page, console, view)
                assert no_horizontal_overflow(page), (view, width, lang)
                headings[(lang, view)] = page.inner_text("main h2")
                page.screenshot(path=str(ARTIFACTS / f"{view}-{width}x{height}-{lang}.png"), full_page=True)
    assert headings[("en", "sources")] == "Knowledge sources" and headings[("zh", "sources")] == "知识库"
    assert headings[("zh", "try")] == "试用" and page.inner_text("nav").count("令牌") == 1
    page.click("#lang")  # back to English for the next test (the choice is remembered)


def test_console_sources_list_documents_and_ingest_by_upload(
    page: Any, console: KbServer, tmp_path: Path
) -> None:
    open_view(page, console, "sources")
    row = page.locator("tr", has_text="demo-docs@1.0.0")
    assert "yes" in row.inner_text()
    row.get_by_role("button", name="Documents").click()
    page.wait_for_selector("text=Documents of demo-docs@1.0.0")
    assert page.locator("section table tbody tr").count() >= 20
    note = tmp_path / "console-note.md"
    note.write_text("# Console upload note\n\nThe zzconsole pump is checked weekly.\n", encoding="utf-8")
    page.set_input_files("input[name=file]", str(note))
    page.click("form button[type=submit]")
    page.wait_for_selector("td >> text=console-note")
    hints = console.knowledge("demo", "search", {"query": "zzconsole"}).json["hints"]
    assert [h["title"] for h in hints] == ["Console upload note"]


def test_console_search_and_read_to_the_end(page: Any, console: KbServer) -> None:
    open_view(page, console, "try")
    page.fill("input[name=query]", "database failover runbook")
    page.click("section[aria-labelledby=try-search] button[type=submit]")
    page.wait_for_selector("text=Status ok")
    page.get_by_role("button", name="Read").first.click()
    pages = 1
    page.wait_for_selector("text=Page 1")
    while page.get_by_role("button", name="Next page").count():
        page.get_by_role("button", name="Next page").last.click()
        pages += 1
        page.wait_for_selector(f"text=Page {pages}")
    assert page.is_visible("text=End of the document.") or page.is_visible("text=The read chain limit")
    meters = page.locator("section[aria-label^='Page'] .meter").all_inner_texts()
    assert len(meters) == pages
    for meter in meters:  # "Page n · X bytes of 4096 · Document: N bytes"
        used, limit = meter.split(" · ")[1].replace(" bytes", "").split(" of ")
        assert int(used) <= int(limit) == 4096


def test_console_shows_the_search_index_and_compacts_it(page: Any, console: KbServer) -> None:
    """The Sources page lists the passages index as `GET /admin/v1/search-indices` does, and "Compact now"
    starts an operator's compaction (`POST /admin/v1/search-indices/compact`) and says what it did."""
    open_view(page, console, "sources")
    row = page.locator("tr", has_text="passages")
    listed = console.request("GET", "/admin/v1/search-indices").json["indices"][0]
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == "passages" and cells[1] == "1" and cells[3] == str(listed["target_segments"])
    page.get_by_role("button", name="Compact now").click()
    page.wait_for_selector("#status >> text=/Compaction started|Nothing to compact/")
    page.wait_for_selector("tr >> text=passages")
    page.click("nav a[href='#agents']")  # another view, at once: the Sources page's message goes with it
    page.wait_for_selector("nav a[href='#agents'][aria-current=page]")
    assert page.locator("#status").inner_text() == ""


def test_g_local_console_header_says_the_ranking_in_force(page: Any, console: KbServer) -> None:
    """G-LOCAL: the console's header says how searches rank now, as `GET /admin/v1/search-indices`
    (`ranking`) and capabilities' `extensions.ranking` do (this server has no model: BM25), in both
    languages."""
    assert console.request("GET", "/admin/v1/search-indices").json["ranking"] == {
        "mode": "bm25",
        "vectors": "none",
    }
    assert console.ranking() == {"mode": "bm25", "vectors": "none"}
    page.wait_for_selector("#ranking >> text=Ranking: BM25 (no embedding model)")
    page.click("#lang")
    page.wait_for_selector("#ranking >> text=排序：BM25（无嵌入模型）")


def test_console_tool_call_rule_fires_and_rule_does_not(page: Any, console: KbServer) -> None:
    open_view(page, console, "try")
    tool = page.locator("section[aria-labelledby=try-tool]")
    tool.locator("select[name=agent]").select_option("demo-router@1.0.0")
    tool.locator("input[name=query]").fill("设备安装规范")
    tool.locator("textarea[name=trusted_context]").fill(json.dumps({"projectType": "monitor"}))
    tool.locator("button[type=submit]").click()
    tool.get_by_text("Citation created").first.wait_for()
    timeline = tool.locator(".timeline").inner_text()
    assert (
        "Planned" in timeline and "demo-docs@1.0.0 — reason: always" in timeline
    )  # the rule (always + context)
    assert "Fused" in timeline and "Retrievals: 1 used" in timeline
    assert tool.locator("table").count() == 1  # the budgets per chain level

    # The rule's context does not hold and nothing in the query matches the source: not selected.
    tool.locator("input[name=query]").fill("zzzz qqqq")
    tool.locator("textarea[name=trusted_context]").fill("{}")
    tool.locator("button[type=submit]").click()
    tool.get_by_text("Not selected").first.wait_for()
    text = tool.inner_text()
    assert (
        "demo-docs@1.0.0" in text and "compare the query terms, tags, trusted context and maxSources" in text
    )

    # A typed error with the seed's hint: an explicit source outside allowedKnowledge.
    tool.locator("input[name=sources]").fill("other-docs@1.0.0")
    tool.locator("input[name=query]").fill("网关")
    tool.locator("button[type=submit]").click()
    tool.get_by_text("Error KNOWLEDGE_SOURCE_DENIED").first.wait_for()
    assert "names a wrong exact version" in tool.inner_text()


def test_console_tokens_issue_and_revoke_then_refused(page: Any, console: KbServer) -> None:
    open_view(page, console, "tokens")
    page.fill("input[name=subject]", "console-user")
    page.click("form button[type=submit]")
    page.wait_for_selector("[data-token]")
    token = page.inner_text("[data-token]").strip()
    assert console.knowledge("demo", "capabilities", token=token).status == 200
    row = page.locator("tr", has_text="console-user").first
    row.get_by_role("button", name="Revoke").click()
    page.get_by_role("button", name="Confirm").click()
    # The console's own message once the server answered (a bare "revoked" would match the column header).
    page.wait_for_selector("text=/Token tok_\\S+ revoked/")
    refused = console.knowledge("demo", "capabilities", token=token)
    assert refused.status == 401 and refused.json["error"]["code"] == "unauthorized"


def test_console_accessibility_has_no_serious_violations(browser: Any, console: KbServer) -> None:
    if not AXE.exists():
        _require("axe-core")
    # The console's CSP forbids injected scripts: only this checking context bypasses it.
    context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
    page = context.new_page()
    page.goto(console.console_url)  # the operator credential, kept for the tab
    for view in VIEWS:
        open_view(page, console, view)
        page.add_script_tag(path=str(AXE))
        result = page.evaluate("async () => (await axe.run(document)).violations")
        serious = [
            (v["id"], v["impact"], len(v["nodes"])) for v in result if v["impact"] in ("serious", "critical")
        ]
        assert not serious, (view, serious)


def test_console_is_loopback_and_same_origin_only(console: KbServer) -> None:
    page = console.request("GET", "/console/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"
    assert console.request("GET", "/console/../template.yaml").status == 404
    assert console.request("GET", "/console/.hidden.js").status == 404
    # A page on another site cannot drive the loopback admin API through the user's browser.
    import urllib.request

    for header, value in (("Origin", "http://evil.example"), ("Sec-Fetch-Site", "cross-site")):
        request = urllib.request.Request(
            console.endpoint + "/admin/v1/sources",
            headers={header: value, **console.operator_headers},  # the credential does not make it local
            method="GET",
        )
        try:
            urllib.request.urlopen(request, timeout=30)
            raise AssertionError("cross-site admin request was answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 403
    same = urllib.request.Request(
        console.endpoint + "/admin/v1/sources",
        headers={"Origin": console.endpoint, **console.operator_headers},
        method="GET",
    )
    with urllib.request.urlopen(same, timeout=30) as resp:
        assert resp.status == 200


# --- uploads extracted through jobs, Try it explains no hints, the favicon ----------------------------------

PDF = ROOT / "examples" / "manuals" / "compressor-oil.pdf"


def test_p3_console_pdf_upload_is_extracted_through_a_job(page: Any, console: KbServer) -> None:
    open_view(page, console, "sources")
    page.set_input_files("input[name=file]", str(PDF))
    page.click("form button[type=submit]")
    page.wait_for_selector("text=Ingested compressor-oil.pdf into demo-docs@1.0.0", timeout=60_000)
    page.wait_for_selector("td >> text=compressor-oil")  # the id `kb ingest` gives the file
    hints = console.knowledge("demo", "search", {"query": "compressor oil ISO 46"}).json["hints"]
    assert hints and hints[0]["title"] == "Compressor oil change"
    content = console.knowledge("demo", "read", {"ref": hints[0]["ref"]}).json["content"]
    assert "litres of ISO 46 oil" in content and "%PDF" not in content and "/BaseFont" not in content


def test_i_ingest_console_uploads_several_files_with_the_ids_kb_ingest_gives(
    page: Any, console: KbServer, tmp_path: Path
) -> None:
    """Several files in one upload, named by the service as `kb ingest` names them (a Chinese file name
    included: the console once made its own, different id for it), under the doc-id field as prefix."""
    from knowledge_core.domain.ingestion import directory_doc_id

    files = [tmp_path / "阀门检修.md", tmp_path / "zzboiler.md", tmp_path / "sheet.xlsx"]
    files[0].write_text("# 阀门检修\n\n每月检查一次 zzvalve 阀门的密封。\n", encoding="utf-8")
    files[1].write_text("# Boiler\n\nThe zzboiler water pH stays between 9 and 11.\n", encoding="utf-8")
    files[2].write_bytes(b"PK\x03\x04 not a document")
    open_view(page, console, "sources")
    twin = tmp_path / "zzboiler.txt"  # the same name but its suffix: the same id, refused before any job
    twin.write_text("The zzboiler twin.", encoding="utf-8")
    page.set_input_files("input[name=file]", [str(files[1]), str(twin)])
    page.click("form button[type=submit]")
    page.wait_for_selector("text=zzboiler.md and zzboiler.txt would be one document")
    page.fill("input[name=doc_id]", "plant")
    page.set_input_files("input[name=file]", [str(f) for f in files])
    page.click("form button[type=submit]")
    page.wait_for_selector("text=Ingested 2 of 3 files into demo-docs@1.0.0", timeout=60_000)
    assert page.locator("text=sheet.xlsx (unsupported_format)").count() == 1
    listed = console.request("GET", "/admin/v1/sources/demo-docs@1.0.0/documents").json["documents"]
    ids = {d["doc_id"] for d in listed}
    assert {directory_doc_id("plant", Path(f.name)) for f in files[:2]} <= ids
    assert directory_doc_id("plant", Path("阀门检修.md")).startswith("plant-FaMenJianXiu-")
    hints = console.knowledge("demo", "search", {"query": "zzboiler water pH"}).json["hints"]
    assert [h["title"] for h in hints] == ["Boiler"]


def test_i_ingest_console_uploads_into_the_source_whose_documents_are_shown(
    page: Any, console: KbServer, tmp_path: Path
) -> None:
    """Opening a source's documents points the upload at that source, and choosing the upload's source
    shows its documents: the form once stayed on the first source listed, so a file meant for the source
    on screen went into another one."""
    source = {
        "id": "zzshelf-docs",
        "version": "1.0.0",
        "description": "Shelf notes",
        "topK": 5,
        "minScore": 0.0,
    }
    assert console.request("POST", "/admin/v1/sources", source).status in (200, 201)
    note = tmp_path / "zzshelf.md"
    note.write_text("# Shelf note\n\nThe zzshelf racks hold 400 kg per level.\n", encoding="utf-8")
    open_view(page, console, "sources")
    page.locator("tr", has_text="zzshelf-docs@1.0.0").get_by_role("button", name="Documents").click()
    page.wait_for_selector("text=Documents of zzshelf-docs@1.0.0")
    assert page.locator("select[name=source]").input_value() == "zzshelf-docs@1.0.0"
    page.set_input_files("input[name=file]", str(note))
    page.click("form button[type=submit]")
    page.wait_for_selector("text=Ingested zzshelf.md into zzshelf-docs@1.0.0", timeout=60_000)
    page.wait_for_selector("td >> text=zzshelf")
    listed = console.request("GET", "/admin/v1/sources/zzshelf-docs@1.0.0/documents").json["documents"]
    assert [d["doc_id"] for d in listed] == ["zzshelf"]
    demo = console.request("GET", "/admin/v1/sources/demo-docs@1.0.0/documents").json["documents"]
    assert "zzshelf" not in {d["doc_id"] for d in demo}
    page.locator("select[name=source]").select_option("demo-docs@1.0.0")
    page.wait_for_selector("text=Documents of demo-docs@1.0.0")


def test_p9_console_try_it_defaults_to_demo_and_explains_no_hints(page: Any, console: KbServer) -> None:
    open_view(page, console, "try")
    panel = page.locator("section[aria-labelledby=try-search]")
    assert panel.locator("select[name=route]").input_value() == "demo"
    panel.locator("button[type=submit]").click()
    page.wait_for_selector("text=Status ok")
    assert not panel.get_by_text("Why no hints").count()
    panel.locator("input[name=tenant]").fill("nobody")
    panel.locator("button[type=submit]").click()
    panel.get_by_text("Why no hints").wait_for()
    assert "holds no ready document of tenant nobody" in panel.inner_text()


def test_p8_console_asks_for_no_missing_favicon(browser: Any, console: KbServer) -> None:
    context = browser.new_context()
    page = context.new_page()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(console.console_url)
    page.wait_for_selector("main h2")
    page.wait_for_timeout(500)
    context.close()
    assert not [u for u in asked if "favicon" in u], asked


def test_console_shows_document_metadata_and_agent_source_filters(page: Any, console: KbServer) -> None:
    """F-FILTER: a document's metadata in the source's document view, and an agent's sourceFilters
    (a trusted-context value shown as {key}) in the agent view."""
    doc = {
        "title": "Metadata note",
        "body": "zzmeta pump",
        "acl": {"tenant": "default"},
        "metadata": {"region": "eu", "year": 2024},
    }
    assert console.request("PUT", "/admin/v1/sources/demo-docs@1.0.0/documents/meta-note", doc).status == 200
    knowledge = {"id": "demo-docs", "version": "1.0.0"}
    agent = {
        "id": "filtered-agent",
        "version": "1.0.0",
        "modelProfile": {"candidates": [{"model": "m", "toolCalling": True}]},
        "allowedKnowledge": [knowledge],
        "knowledgeRouting": {
            "mode": "AUTO",
            "rules": [{"knowledge": knowledge, "always": True}],
            "sourceFilters": [
                {
                    "knowledge": knowledge,
                    "filter": {"equals": {"key": "region", "value": {"context": "region"}}},
                }
            ],
        },
    }
    assert console.request("POST", "/admin/v1/agents", agent).status in (200, 201)
    open_view(page, console, "sources")
    page.locator("tr", has_text="demo-docs@1.0.0").get_by_role("button", name="Documents").click()
    row = page.locator("section table tbody tr", has_text="meta-note")
    row.wait_for()
    assert "region = eu" in row.inner_text() and "year = 2024" in row.inner_text()
    open_view(page, console, "agents")
    page.wait_for_selector("text=Source filters")
    assert "region equals {region}" in page.locator("main").inner_text()

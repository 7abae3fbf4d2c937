"""The documentation: a README that stays short and links only to files that exist, and a MkDocs Material
site (mkdocs.yml, docs/) that builds with `--strict` and 0 warnings, every page in its navigation."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README_MAX_BYTES = 15 * 1024
# Every block a page marks runnable (`<!-- name: tests/… runs this block … -->`) and the test that runs it.
RUNNABLE_BLOCKS = {
    "five-minutes": "tests/e2e/test_readme.py",
    "http-door": "tests/e2e/test_readme.py",
    "metadata-example": "tests/e2e/test_readme.py",
}


def _nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def _config() -> dict:
    # mkdocs.yml holds no custom tags; safe_load reads it as plain data
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_readme_is_at_most_15_kb_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= README_MAX_BYTES
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links, "the README links to the documentation"
    missing = [link for link in links if "://" not in link and not (ROOT / link).is_file()]
    assert missing == []


def test_docs_navigation_lists_every_page_and_the_newcomer_pages_at_one_click() -> None:
    """Every page under docs/ is in the navigation; the agent tool (with the agent definition format) and
    MCP are entries of their own, not sections of a longer page."""
    pages = _nav_pages(_config()["nav"])
    on_disk = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(pages) == on_disk
    for page in ("getting-started.md", "agent-tool.md", "mcp.md", "cli.md", "quality.md"):
        assert page in pages
    agent_tool = (ROOT / "docs" / "agent-tool.md").read_text(encoding="utf-8")
    assert "\n## The agent definition\n" in agent_tool


def test_every_block_marked_runnable_has_its_test() -> None:
    """A page that marks a command block runnable names a test that runs it; a new marker needs one."""
    found: dict[str, list[str]] = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for name, test in re.findall(r"<!-- ([a-z-]+): (tests/\S+) ", text):
            assert (ROOT / test).is_file(), f"{page.name}: {test}"
            assert RUNNABLE_BLOCKS.get(name) == test, f"{page.name}: block {name} has no test that runs it"
            found.setdefault(name, []).append(page.name)
    assert found == {
        "five-minutes": ["README.md", "getting-started.md"],
        "http-door": ["README.md"],
        "metadata-example": ["metadata.md"],
    }


def test_readme_json_blocks_are_the_example_agent_and_an_mcp_entry_for_its_route() -> None:
    """The README's two JSON blocks: the agent it publishes (exactly examples/agent.json) and an MCP client
    entry for the route the five minutes create (M-MCP: Streamable HTTP, one route named in the URL)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", readme, re.S)]
    agent = json.loads((ROOT / "examples" / "agent.json").read_text(encoding="utf-8"))
    assert blocks[0] == agent
    [entry] = blocks[1]["mcpServers"].values()
    assert entry["type"] == "http" and entry["url"] == "http://127.0.0.1:3000/mcp?route=plant"
    assert entry["headers"]["Authorization"].startswith("Bearer kbt_")
    assert len(blocks) == 2


def test_mkdocs_build_strict_has_no_warnings(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "agent-tool" / "index.html").is_file()

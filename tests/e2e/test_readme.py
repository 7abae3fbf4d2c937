"""The README's "your own documents in five minutes" block (also on the docs' Get started page) and the
metadata worked example (docs, Metadata filters), run verbatim (bash) on a fresh `kb serve` state: they find
the example PDF, HTML, Markdown and Chinese text files and the agent tool answers on the user's own route."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.e2e.conftest import ROOT, running_kb_serve


def marked_block(page: str, marker: str) -> str:
    """The bash block after `<!-- marker: … -->` on a page (README.md or a docs page)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = re.search(rf"<!-- {marker}:[^>]*-->\n```bash\n(.*?)```", text, re.S)
    assert found, f"{page} lost its {marker} block"
    return found.group(1)


def five_minute_block() -> str:
    return marked_block("README.md", "five-minutes")


def test_docs_get_started_shows_the_readme_five_minutes_block_verbatim():
    """The docs' Get started page carries the very block the README runs (so running one runs both)."""
    assert marked_block("docs/getting-started.md", "five-minutes") == five_minute_block()


def run_verbatim(script: str, tmp_path) -> str:
    """README commands run as they are (bash, -euo pipefail) against a fresh `kb serve`; their stdout."""
    if not (ROOT / ".venv" / "bin" / "activate").exists():
        pytest.skip("the README's `source .venv/bin/activate` needs the repository's .venv (make dev)")
    (tmp_path / "state").mkdir()
    with running_kb_serve(tmp_path / "state") as server:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            # KB_STATE: the kb CLI finds the operator credential of this server's state, as it finds
            # ./.kb-state beside `make serve` in the README's own use.
            env={
                **os.environ,
                "KB_ENDPOINT": server.endpoint,
                "KB_STATE": str(server.state),
                "POWERTOOLS_LOG_LEVEL": "ERROR",
            },
        )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_readme_five_minutes_commands_work_verbatim_on_a_fresh_state(tmp_path):
    """The five minutes, then the README's HTTP example on the route they made (search, then read a page)."""
    out = run_verbatim(five_minute_block() + marked_block("README.md", "http-door"), tmp_path)
    assert "ingested 4 document(s) into plant-manuals@1.0.0 (0 unchanged, 0 failed, 0 deleted)" in out
    assert "Pump seal replacement" in out  # Markdown: title from its heading
    assert "阀门检修" in out  # text file: title from its file name
    assert "Compressor oil change" in out  # PDF, extracted
    assert "no hints" not in out
    # doc list: the tenant of every document is the default one
    rows = [line for line in out.splitlines() if line.startswith("manuals-")]
    assert len(rows) == 4 and all(line.split()[1] == "default" for line in rows), out
    # R-TOOL: the agent tool, invoked as the user's own agent, cites the user's own documents
    tool, end = json.JSONDecoder().raw_decode(out, out.rindex('{\n  "references"'))
    assert tool["references"][0]["source"]["title"] == "Pump seal replacement", tool
    assert tool["references"][0]["knowledge"] == {"id": "plant-manuals", "version": "1.0.0"}
    # A-READ: the HTTP example reads the first page of the top hint on route plant, within 4096 bytes
    page = out[end:].strip()
    assert len(page.encode("utf-8")) <= 4096, page
    read = json.loads(page)
    assert read["schema"] == "bailing.agent-knowledge-read.v1" and read["route"] == "plant", read
    assert read["title"] == "Pump seal replacement" and read["content"], read


def metadata_block() -> str:
    return marked_block("docs/metadata.md", "metadata-example")


def test_readme_metadata_example_works_verbatim(tmp_path):
    """F-FILTER: the docs' worked example (sidecar + --meta + filtered search + an agent bound to the
    trusted context) run verbatim after the five-minutes block, on a fresh state."""
    out = run_verbatim(five_minute_block() + metadata_block(), tmp_path)
    assert "ingested 4 document(s) into plant-manuals@1.0.0 (0 unchanged, 0 failed, 0 deleted)" in out
    assert 'metadata:  equipment=["pump","seal"] region=eu reviewed=true site=plant-7 year=2024' in out
    search = json.loads(next(line for line in out.splitlines() if line.startswith('{"schema"')))
    assert [h["title"] for h in search["hints"]] == ["Pump seal replacement"]
    startup = json.loads(out[out.rindex('{\n  "references"') :])
    assert [r["source"]["title"] for r in startup["references"]] == ["Boiler cold start"]

"""The docs' reference pages are generated from their sources (docs/reference/: the HTTP API from
openapi.json, the settings from `Settings`) and say what the sources say: a stale page, or an operation, an
error code or a setting the page lacks, fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from knowledge_core.settings import ENV, Settings

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"


def test_reference_pages_are_current() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/docs_reference.py", "--check"],
        cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'layers' / 'knowledge_core'}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_http_reference_lists_every_operation_and_error_code() -> None:
    page = (REFERENCE / "http-api.md").read_text(encoding="utf-8")
    document = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
    for path, item in document["paths"].items():
        for method in item:
            assert f"### `{method.upper()} {path}`" in page
    for code in ("invalid_request", "unauthorized", "knowledge_reference_expired", "turn_conflict"):
        assert f"| `{code}` |" in page
    assert "| `limit` | integer | default `3` | ≥ 1; ≤ 3 |" in page  # SearchRequest's bounds, from the schema


def test_settings_reference_names_every_variable_with_its_reason() -> None:
    """Every setting is documented by its environment variable, and every field says what it does."""
    page = (REFERENCE / "settings.md").read_text(encoding="utf-8")
    for field, names in ENV.items():
        assert f"| `{names[0]}`" in page
        assert Settings.model_fields[field].description, field

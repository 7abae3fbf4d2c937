"""I-INGEST: `kb ingest` through each of its doors (a file alone, several files, a directory the service
reads, a directory sent file by file) against the embedded service, and the job rules every door shares:
the exit code, empty files, doc_id collisions, another tenant's documents, file names and hard links."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.models import SourceDefinition
from knowledge_core.domain.wire import parse_request

from kb_cli.commands.ingest import cmd_ingest
from kb_cli.main import parse
from tests.conftest import FakeClock, embedded_container

SOURCE = "manuals@1.0.0"
LOOPBACK = "http://127.0.0.1:3000"  # the service reads a directory itself
REMOTE = "http://kb.example"  # the CLI reads a directory and sends its files


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock) -> Container:
    container = embedded_container(tmp_path, clock, ingest_directories=True)
    container.admin.publish_source(SourceDefinition.model_validate({"id": "manuals", "version": "1.0.0"}))
    return container


def service_call(c: Container) -> Any:
    """The admin API's ingestion-job routes, answered by the embedded service; a job is worked at once."""

    def call(endpoint: str, method: str, path: str, body: Any = None) -> Any:
        parts = path.split("/")  # /admin/v1/sources/{source}/ingestion-jobs[/{job_id}]
        source = unquote(parts[4])
        if method == "POST":
            accepted = c.ingestion.submit(source, parse_request(IngestionJobRequest, json.dumps(body)))
            c.ingestion.work("w")
            return accepted.model_dump(mode="json")
        return c.ingestion.status(source, parts[6]).model_dump(mode="json")

    return call


def kb_ingest(c: Container, *argv: str, endpoint: str = LOOPBACK) -> int:
    args: argparse.Namespace = parse(["ingest", "--source", SOURCE, "--endpoint", endpoint, *argv])
    return cmd_ingest(args, service_call(c))


# --- exit code ---------------------------------------------------------------------------------------------


def test_i_ingest_kb_ingest_exits_1_when_a_file_of_an_unsupported_format_failed(
    c: Container, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .csv alone, or in a folder the service reads, fails `unsupported_format`: listed in the summary,
    and the command exits 1 as for any failed document."""
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n", "utf-8")
    assert kb_ingest(c, str(data)) == 1
    out = capsys.readouterr()
    assert "(0 unchanged, 1 failed, 0 deleted)" in out.out and "data: unsupported_format" in out.err
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha text", "utf-8")
    (folder / "sheet.csv").write_text("a,b\n1,2\n", "utf-8")
    assert kb_ingest(c, str(folder)) == 1
    out = capsys.readouterr()
    assert "ingested 1 document(s)" in out.out and "1 failed" in out.out
    assert "sheet: unsupported_format (sheet.csv)" in out.err
    assert c.backend.get_document(SOURCE, "a") is not None  # the rest is ingested

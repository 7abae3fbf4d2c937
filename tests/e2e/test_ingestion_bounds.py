"""Ingestion bounds (M2) and job cancel through `kb serve`: a directory holding the review's four bombs
ingests to typed errors while `kb serve` stays small and keeps answering searches (extraction runs in a
resource-limited child process, not in the serve process); `kb job cancel` stops a job."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests import bombs
from tests.e2e.test_durability import own_group_kb_serve

SOURCE = "demo-docs@1.0.0"
JOBS = f"/admin/v1/sources/{SOURCE}/ingestion-jobs"


def _peak_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0


@pytest.mark.timeout(240)
def test_m2_kb_serve_stays_small_and_answers_while_it_ingests_bombs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_INGEST_EXTRACTION_SECONDS", "5")  # the PDF bomb ends at the wall bound
    term = f"zb{uuid.uuid4().hex[:8]}"
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    bombs.docx_of_spaces(corpus / "spaces.docx")
    (corpus / "tables.html").write_bytes(bombs.nested_tables())
    (corpus / "divs.html").write_bytes(bombs.nested_divs())
    (corpus / "pages.pdf").write_bytes(bombs.pdf_shared_stream())
    (corpus / "good.md").write_text(f"# Good\n\n{term} survives its batch\n", "utf-8")
    state = tmp_path / "state"
    state.mkdir()
    with own_group_kb_serve(state) as (kb, proc):
        before = _peak_mib(proc.pid)
        submitted = kb.kb(
            "ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", term, "--no-wait", str(corpus)
        )
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        deadline, searches = time.monotonic() + 180, 0
        while (job := kb.request("GET", f"{JOBS}/{job_id}").json)["state"] != "completed":
            assert time.monotonic() < deadline, job
            assert kb.knowledge("demo", "search", {"query": "gateway"}).status == 200
            searches += 1
            time.sleep(0.2)
        after = _peak_mib(proc.pid)
        errors = {e["doc_id"]: e["code"] for e in job["errors"]}
        assert errors == {
            f"{term}-spaces": "too_large",
            f"{term}-tables": "too_complex",
            f"{term}-divs": "too_complex",
            f"{term}-pages": "timeout",
        }
        assert job["counts"]["done"] == 1 and searches > 0
        assert kb.knowledge("demo", "search", {"query": term}).json["hints"]
        print(f"kb serve peak RSS: {before} MiB before the job, {after} MiB after it")
        assert after - before < 100  # the 1 GiB of spaces never reaches kb serve


@pytest.mark.timeout(180)
def test_job_cancel_through_kb_job_cancel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first batch holds two slow PDFs (each ends at the 2 s wall bound): the cancel sent meanwhile
    stops the job after that batch, its counts kept, the other batches never worked."""
    monkeypatch.setenv("KB_INGEST_EXTRACTION_SECONDS", "2")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(2):
        (corpus / f"a-slow-{i}.pdf").write_bytes(bombs.pdf_shared_stream())
    for i in range(150):
        (corpus / f"doc-{i:04d}.md").write_text(f"# Doc {i}\n\nbody {i}\n", "utf-8")
    state = tmp_path / "state"
    state.mkdir()
    with own_group_kb_serve(state) as (kb, _):
        submitted = kb.kb("ingest", "--source", SOURCE, "--doc-id", "many", "--no-wait", str(corpus))
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        cancelled = kb.kb("job", "cancel", "--source", SOURCE, job_id)
        assert cancelled.returncode == 0, cancelled.stderr
        assert job_id in cancelled.stdout
        deadline = time.monotonic() + 60
        while (job := kb.request("GET", f"{JOBS}/{job_id}").json)["state"] != "cancelled":
            assert time.monotonic() < deadline and job["state"] != "completed", job
            time.sleep(0.2)
        counts = job["counts"]
        assert job["cancel_requested"] and counts["queued"] >= 100  # stopped after (at most) one batch
        assert counts["done"] + counts["failed"] + counts["queued"] == 152  # counts kept

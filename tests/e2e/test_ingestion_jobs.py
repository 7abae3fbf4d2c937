"""I-INGEST end to end through `kb serve`: a directory of Markdown, HTML, PDF and DOCX files syncs through
`kb ingest` (plain progress lines when not on a terminal); `kb serve` killed with SIGKILL (its whole
process group) in the middle of a job of a few hundred documents, then started again on the same state,
completes the job: every document searchable exactly once, none half-indexed. A PDF hit names its page."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

from tests.e2e.conftest import KbServer, index_integrity
from tests.e2e.test_durability import own_group_kb_serve
from tests.unit.test_extraction import make_docx, make_pdf

SOURCE = "demo-docs@1.0.0"
JOBS = f"/admin/v1/sources/{SOURCE}/ingestion-jobs"


def make_corpus(folder: Path, term: str, n: int) -> None:
    """n files: mostly Markdown, every 8th HTML, every 16th PDF (two pages), every 16th DOCX."""
    folder.mkdir(parents=True)
    paragraph = "Routine maintenance keeps the plant running; inspect seals, bearings and filters. " * 4
    for i in range(n):
        body = f"{term} document {i} {term}x{i}"
        if i % 16 == 3:
            pdf = make_pdf([f"Cover of {i}. " + paragraph * 3, f"{body} on page two."])
            (folder / f"doc-{i:04d}.pdf").write_bytes(pdf)
        elif i % 16 == 11:
            (folder / f"doc-{i:04d}.docx").write_bytes(make_docx())
            (folder / f"doc-{i:04d}-note.md").write_text(f"# Note {i}\n\n{body}\n", "utf-8")
        elif i % 8 == 5:
            (folder / f"doc-{i:04d}.html").write_text(
                f"<html><head><title>Page {i}</title></head><body><nav>menu</nav>"
                f"<main><h1>Page {i}</h1><p>{body}</p><p>{paragraph}</p></main></body></html>",
                "utf-8",
            )
        else:
            (folder / f"doc-{i:04d}.md").write_text(
                f"# Doc {i}\n\n{body}\n\n" + "\n\n".join([paragraph] * 3), "utf-8"
            )


def kill_mid_job(kb: KbServer, proc: subprocess.Popen[bytes], job_id: str, done: int = 50) -> dict:
    """SIGKILL kb serve's process group once `done` documents of the job are done; the job as last seen."""
    deadline = time.monotonic() + 120
    while (seen := job(kb, job_id))["counts"]["done"] < done:
        assert time.monotonic() < deadline and seen["state"] != "completed", seen
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return seen


def until_completed(kb: KbServer, job_id: str, timeout_s: float) -> dict:
    """The job once it is completed (polled), within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (done := job(kb, job_id))["state"] != "completed":
        assert time.monotonic() < deadline, done
        time.sleep(0.2)
    return done


def job(kb: KbServer, job_id: str) -> dict:
    response = kb.request("GET", f"{JOBS}/{job_id}")
    assert response.status == 200, response.raw
    return response.json


def test_i_ingest_kill_9_mid_job_then_restart_completes_it_exactly_once(tmp_path: Path) -> None:
    term = f"zq{uuid.uuid4().hex[:8]}"
    corpus = tmp_path / "corpus"
    make_corpus(corpus, term, 400)
    files = len(list(corpus.iterdir()))
    state = tmp_path / "state"
    state.mkdir()
    with own_group_kb_serve(state) as (kb, proc):
        submitted = kb.kb(
            "ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", term, "--no-wait", str(corpus)
        )
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip()
        seen = kill_mid_job(kb, proc, job_id)
    assert seen["state"] == "running" and seen["counts"]["queued"] > 0, "killed too late to test anything"
    documents, orphans, empty, unindexed = index_integrity(state, term)
    assert 50 <= documents < files and orphans == empty == unindexed == 0  # whole documents only

    with own_group_kb_serve(state) as (kb, _):
        done = until_completed(kb, job_id, 120)
        counts = done["counts"]
        assert counts["failed"] == 0 and counts["queued"] == 0, done["errors"]
        # A batch written just before the kill is found already stored on resume: `unchanged`.
        assert counts["done"] + counts["unchanged"] == files == done["total"]
        assert done["finished_at"] and done["started_at"]
        assert index_integrity(state, term) == (files, 0, 0, 0)  # exactly once each, none half-indexed
        for i in (0, 3, 5, 11):
            hints = kb.knowledge("demo", "search", {"query": f"{term}x{i}"}).json["hints"]
            assert hints, i
        listed = kb.kb("job", "list", "--source", SOURCE)
        assert listed.returncode == 0 and job_id in listed.stdout and "completed" in listed.stdout


def test_i_ingest_kb_ingest_syncs_a_mixed_directory_with_progress_lines(tmp_path: Path) -> None:
    term = f"zs{uuid.uuid4().hex[:8]}"
    corpus = tmp_path / "corpus"
    make_corpus(corpus, term, 24)
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 truncated")
    (corpus / "sheet.xlsx").write_bytes(b"PK\x03\x04")
    state = tmp_path / "state"
    state.mkdir()
    with own_group_kb_serve(state) as (kb, _):
        done = kb.kb(
            "ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", term, "--sync", str(corpus)
        )
        assert done.returncode == 1, done.stderr  # non-zero when any document failed
        files = len(list(corpus.iterdir()))
        assert f"ingested {files - 2} document(s)" in done.stdout and "completed" in done.stdout
        assert f"{term}-broken: corrupt" in done.stderr and f"{term}-sheet: unsupported_format" in done.stderr
        # Doc 3 is a PDF whose second page has the term: the hint says which page.
        hints = kb.knowledge("demo", "search", {"query": f"{term}x3"}).json["hints"]
        assert hints and hints[0]["summary"].startswith("p. 2: "), hints
        (corpus / "doc-0000.md").unlink()
        again = kb.kb(
            "ingest", "--tenant", "default", "--source", SOURCE, "--doc-id", term, "--sync", str(corpus)
        )
        assert again.returncode == 1, again.stderr
        assert f"({files - 3} unchanged, 2 failed, 1 deleted)" in again.stdout
        assert kb.knowledge("demo", "search", {"query": f"{term}x0"}).json["hints"] == []

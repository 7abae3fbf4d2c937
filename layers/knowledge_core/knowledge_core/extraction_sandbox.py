"""Extraction in a worker process with resource limits (I-INGEST).

A hostile file (a zip bomb, thousands of nested tables, a PDF whose pages share one huge content stream)
must not take the serving process down with it, nor hold the only ingestion worker forever. So HTML, PDF
and DOCX are extracted in a child process (`python -m knowledge_core.extraction_sandbox`) that runs with
an address-space bound (RLIMIT_AS), a CPU bound per document (RLIMIT_CPU), no core files, a minimal
environment (no credentials of the parent) and its stdout kept for the protocol; the parent kills it at a
wall-time bound. The child is reused for many documents (imports are paid once) and replaced after it
dies, after a document that exhausted a bound, and every RECYCLE_AFTER documents.

Protocol (pipes, never pickle: the child parses hostile input, so its answers are data to check): the
parent writes a 4-byte length and a JSON header `{"filename", "size"}`, then `size` bytes; the child
answers a 4-byte length and JSON `{"ok": {format, title, body, page_starts}}` or `{"error": code}`.

Markdown and plain text are only decoded (bounded by size), so they stay in-process."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from .domain.ingestion import ERROR_CODES, FORMATS, ErrorCode, file_format
from .extraction import DEFAULT_LIMITS, Extracted, ExtractionError, ExtractionLimits, extract

_LENGTH = struct.Struct(">I")
RECYCLE_AFTER = 200  # documents per child: a long-lived heap only grows
GRACE_SECONDS = 2.0  # the child checks its own deadline first; the parent kills it this much later
MAX_REPLY_BYTES = 64 * 1024 * 1024
_IN_PROCESS = ("markdown", "text")
_RESTART_AFTER: tuple[ErrorCode, ...] = ("too_large", "too_complex", "timeout", "extraction_failed")
_log = logging.getLogger(__name__)


class _ChildGone(Exception):
    """The child died, closed its pipe, or sent something that is not a reply."""


class ProcessExtractor:
    """`extract` with the HTML, PDF and DOCX work done in a resource-limited child process. Thread-safe:
    one document at a time goes through the child (kb serve has one ingestion worker)."""

    def __init__(self, limits: ExtractionLimits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._served = 0
        self._isolated = True

    @property
    def limits(self) -> ExtractionLimits:
        return self._limits

    def __call__(self, filename: str, data: bytes) -> Extracted:
        kind = file_format(filename)
        if kind is None:
            raise ExtractionError("unsupported_format")
        if len(data) > self._limits.max_input_bytes:
            raise ExtractionError("too_large")  # before a byte is sent anywhere
        if kind in _IN_PROCESS or not self._isolated:
            return extract(filename, data, self._limits)
        with self._lock:
            return self._in_child(filename, data)

    def close(self) -> None:
        with self._lock:
            self._stop_child()

    # --- the parent's side -----------------------------------------------------------------------------
    def _in_child(self, filename: str, data: bytes) -> Extracted:
        try:
            child = self._ready_child()
        except OSError:
            # No child process here (a sandbox without fork): the in-process bounds still hold.
            _log.warning("extraction worker process unavailable; extracting in-process")
            self._isolated = False
            return extract(filename, data, self._limits)
        deadline = time.monotonic() + self._limits.wall_seconds + GRACE_SECONDS
        try:
            _send(child, {"filename": filename, "size": len(data)}, data)
            reply = _receive(child, deadline)
        except TimeoutError:
            self._stop_child()
            raise ExtractionError("timeout") from None
        except (_ChildGone, OSError):
            code = _death_verdict(self._stop_child())
            raise ExtractionError(code) from None
        self._served += 1
        return self._answer(reply)

    def _answer(self, reply: dict[str, Any]) -> Extracted:
        error = reply.get("error")
        if error is not None:
            if error not in ERROR_CODES:
                self._stop_child()
                raise ExtractionError("extraction_failed")
            if error in _RESTART_AFTER or self._served >= RECYCLE_AFTER:
                self._stop_child()  # its heap may hold what the bound stopped
            raise ExtractionError(error)
        if self._served >= RECYCLE_AFTER:
            self._stop_child()
        try:
            return _extracted(reply["ok"])
        except (KeyError, TypeError, ValueError):
            self._stop_child()
            raise ExtractionError("extraction_failed") from None

    def _ready_child(self) -> subprocess.Popen[bytes]:
        if self._child is not None and self._child.poll() is None:
            return self._child
        self._stop_child()
        package_root = str(Path(__file__).resolve().parents[1])
        search_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        # Only what Python needs: none of the parent's credentials reach code parsing hostile files.
        env = {"PYTHONPATH": search_path, "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
        limits = json.dumps(asdict(self._limits))
        self._child = subprocess.Popen(
            [sys.executable, "-s", "-P", "-m", "knowledge_core.extraction_sandbox", limits],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd="/",
            close_fds=True,
        )
        self._served = 0
        return self._child

    def _stop_child(self) -> int | None:
        """Kill the child (if any) and reap it; its exit status, None when there was none."""
        child, self._child = self._child, None
        if child is None:
            return None
        if child.poll() is None:
            child.kill()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        try:
            return child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None


def _death_verdict(status: int | None) -> ErrorCode:
    """Why a child died without answering: over its CPU bound (SIGXCPU) is `timeout`, killed by the
    kernel (out of memory) is `too_large`, anything else `extraction_failed`."""
    if status == -signal.SIGXCPU:
        return "timeout"
    if status == -signal.SIGKILL:
        return "too_large"
    return "extraction_failed"


def _send(child: subprocess.Popen[bytes], header: dict[str, Any], data: bytes) -> None:
    assert child.stdin is not None
    raw = json.dumps(header).encode("utf-8")
    try:
        child.stdin.write(_LENGTH.pack(len(raw)) + raw)
        child.stdin.write(data)
        child.stdin.flush()
    except (BrokenPipeError, ValueError):
        raise _ChildGone() from None


def _receive(child: subprocess.Popen[bytes], deadline: float) -> dict[str, Any]:
    assert child.stdout is not None
    fd = child.stdout.fileno()
    (length,) = _LENGTH.unpack(_read_exact(fd, _LENGTH.size, deadline))
    if length > MAX_REPLY_BYTES:
        raise _ChildGone()
    try:
        reply = json.loads(_read_exact(fd, length, deadline))
    except ValueError:
        raise _ChildGone() from None
    if not isinstance(reply, dict):
        raise _ChildGone()
    return reply


def _read_exact(fd: int, size: int, deadline: float) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError()
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise TimeoutError()
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise _ChildGone()
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _extracted(ok: dict[str, Any]) -> Extracted:
    """A child's answer checked field by field (it parsed hostile input: trust nothing it says)."""
    fmt, title, body, starts = ok["format"], ok["title"], ok["body"], ok["page_starts"]
    if fmt not in FORMATS.values() or not isinstance(body, str):
        raise ValueError("format")
    if title is not None and not isinstance(title, str):
        raise ValueError("title")
    if not isinstance(starts, list) or not all(type(s) is int and 0 <= s <= len(body) for s in starts):
        raise ValueError("page_starts")
    return Extracted(fmt, title, body, starts)


# --- the child's side ----------------------------------------------------------------------------------
def _child_limits(limits: ExtractionLimits) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))


def _cpu_bound(limits: ExtractionLimits) -> None:
    """This document's CPU budget: the soft RLIMIT_CPU moved to what was used so far plus the bound
    (the hard limit stays, so the soft one can be moved again for the next document)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + int(limits.wall_seconds) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _child_reply(filename: str, data: bytes, limits: ExtractionLimits) -> dict[str, Any]:
    try:
        extracted = extract(filename, data, limits)
    except ExtractionError as exc:
        return {"error": exc.code}
    return {"ok": asdict(extracted)}


def _child_main(argv: list[str]) -> int:
    limits = ExtractionLimits(**json.loads(argv[1]))
    _child_limits(limits)
    import bs4  # noqa: F401  (paid once per child, not per document)
    import docx  # noqa: F401
    import pypdf  # noqa: F401

    inbox: IO[bytes] = sys.stdin.buffer
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a library that prints cannot corrupt the protocol
    while True:
        raw = inbox.read(_LENGTH.size)
        if len(raw) < _LENGTH.size:
            return 0
        header = json.loads(inbox.read(_LENGTH.unpack(raw)[0]))
        data = inbox.read(int(header["size"]))
        _cpu_bound(limits)
        try:
            reply = _child_reply(str(header["filename"]), data, limits)
            answer = json.dumps(reply, ensure_ascii=False).encode("utf-8")
        except MemoryError:
            answer = b'{"error":"too_large"}'
        outbox.write(_LENGTH.pack(len(answer)) + answer)
        outbox.flush()


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv))

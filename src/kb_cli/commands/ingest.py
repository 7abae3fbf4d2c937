"""`kb ingest`: documents from a file or a directory through ingestion jobs (I-INGEST), and the wait for
them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..http import ApiError, seg
from . import Call, Subparsers, add_endpoint
from .jobs import job_line as _job_line


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "ingest",
        help="create or replace documents from a file, a directory or s3://bucket/prefix/ (Markdown, text, "
        "HTML, PDF, DOCX) through an ingestion job",
    )
    add_endpoint(p)
    p.add_argument("--source", required=True, help="exact id@version")
    p.add_argument("--doc-id", help="document id (a prefix for a directory)")
    p.add_argument("--title")
    p.add_argument("--tenant", default="default", help="the documents' tenant (SPEC §1: always named)")
    p.add_argument(
        "--share-tenant", action="append", metavar="TENANT", help="also visible to this tenant (repeatable)"
    )
    p.add_argument(
        "--sync",
        action="store_true",
        help="directory or s3://bucket/prefix/: also delete documents under the prefix that left it",
    )
    p.add_argument(
        "--meta",
        action="append",
        metavar="KEY=VALUE",
        help="metadata of every document (repeatable): true/false, numbers and JSON lists are parsed, "
        '"…" keeps a string; a sidecar FILE.metadata.json adds its own, and --meta wins key by key',
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="a file alone: replace the document of its id even when that came from another file "
        "(`empty.txt` over `empty.md`: both are `empty`); without it that file fails doc_id_taken",
    )
    p.add_argument("--no-wait", action="store_true", help="print the job id and return at once")
    p.add_argument(
        "file",
        nargs="+",
        help="a file, a directory or s3://bucket/prefix/; several files and directories at once (a shell "
        "glob) take the ids one directory would give them (--doc-id their prefix)",
    )
    p.set_defaults(func=cmd_ingest)


def _is_loopback(endpoint: str) -> bool:
    from urllib.parse import urlparse

    return (urlparse(endpoint).hostname or "") in ("127.0.0.1", "localhost", "::1")


def _acl(args: argparse.Namespace) -> dict:
    """The documents' tenant (SPEC §1: always named) and the tenants they are shared with."""
    return {"tenant": args.tenant, "shared_tenants": list(args.share_tenant or [])}


def flag_metadata(args: argparse.Namespace) -> dict[str, Any] | None:
    """The documents' `--meta KEY=VALUE` values (SPEC §7), checked here by the §8 rules so that a bad one
    is an error naming the flag, not a 400 about a document."""
    from knowledge_core.domain.metadata_sources import MetadataError, parse_meta_flag

    given: dict[str, Any] = {}
    for text in getattr(args, "meta", None) or []:
        try:
            key, value = parse_meta_flag(text)
        except MetadataError as exc:
            raise SystemExit(f"kb ingest: --meta {exc}") from None
        given[key] = value
    if not given:
        return None
    problem = metadata_problem(given)
    if problem:
        raise SystemExit(f"kb ingest: --meta {problem}")
    return given


def metadata_problem(metadata: dict[str, Any]) -> str | None:
    """What breaks SPEC §8 in `metadata` (the Document's own rule), naming the key; None when valid."""
    from knowledge_core.domain.filters import FilterInvalid, validate_metadata

    try:
        validate_metadata(metadata)
    except FilterInvalid as exc:
        return f"{exc.path.lstrip('.') or 'metadata'}: {exc.reason}"
    return None


def _sidecar_metadata(file: Path) -> dict[str, Any] | None:
    """The attributes of `file`'s sidecar (`FILE.metadata.json` beside it), or None without one.
    FileRefused (`invalid_metadata`) when it is not one: that file fails, the others go on."""
    from knowledge_core.domain.metadata_sources import (
        MAX_SIDECAR_BYTES,
        MetadataError,
        parse_sidecar,
        sidecar_name,
    )

    sidecar = file.with_name(sidecar_name(file.name))
    if not sidecar.exists() and not sidecar.is_symlink():
        return None
    try:
        data = _read_regular(sidecar, MAX_SIDECAR_BYTES)
        return parse_sidecar(data)
    except (FileRefused, MetadataError) as exc:
        raise FileRefused("invalid_metadata", f"{sidecar.name}: {exc}") from None


MAX_BODY_BYTES = 5 * 1024 * 1024  # SPEC §1: a document body is at most 5 MiB
MAX_DIRECTORY_FILES = 10_000  # as the service's own directory scan


class FileRefused(Exception):
    """A file `kb ingest` does not send, with the typed code printed for it (the rest goes on)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code


def _read_regular(file: Path, max_bytes: int = 0) -> bytes:
    """The bytes of a regular file, opened without following a link and checked after opening (a file
    swapped for a link or a FIFO after the walk is refused, never read or waited on; a hard link too)."""
    import os
    import stat

    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        raise FileRefused("not_found", "cannot be opened as a regular file (missing, or a link)") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused("unsupported_format", "not a regular file")
        if info.st_nlink > 1:  # refused like a symlink, as the service's own reader does
            raise FileRefused("not_a_file", "a hard link (the file has another name)")
        limit = max_bytes or MAX_BODY_BYTES
        if info.st_size > limit:
            raise FileRefused("too_large", f"{info.st_size} bytes (at most {limit})")
        return f.read(limit + 1)


def _file_document(args: argparse.Namespace, doc_id: str, file: Path, uri: str, title: str | None) -> dict:
    """A file as a job document: Markdown/text as a body (its own title — extraction.plain_title — else its
    file name), other formats as bytes the worker extracts. `uri` is what the caller named or the path
    relative to the directory: never this machine's absolute path, which agents would see in references.
    FileRefused when it is larger than a document may be, a text file is not text (decode_text) or has
    none (`empty`, as a job extracting it)."""
    import base64

    from knowledge_core.domain.ingestion import FORMATS, file_format
    from knowledge_core.domain.metadata_sources import combine_metadata
    from knowledge_core.extraction import ExtractionError, decode_text, printable_document

    if file_format(file.name) is None:  # never read: a job would fail it so
        raise FileRefused("unsupported_format", f"not a format a job takes ({' '.join(FORMATS)})")
    source = {"uri": uri}
    acl = _acl(args)
    metadata = combine_metadata(_sidecar_metadata(file), flag_metadata(args))
    if metadata is not None and (problem := metadata_problem(metadata)):
        raise FileRefused("invalid_metadata", problem)
    extra: dict[str, Any] = {"metadata": metadata} if metadata is not None else {}
    data = _read_regular(file)
    if len(data) > MAX_BODY_BYTES:
        raise FileRefused("too_large", f"more than {MAX_BODY_BYTES} bytes (5 MiB)")
    if (kind := file_format(file.name)) in ("markdown", "text"):
        try:
            text = decode_text(data)  # what a job that reads the file decodes, so either door stores one text
        except ExtractionError:
            raise FileRefused("corrupt", "not text in UTF-8, UTF-16, GB18030, Big5 or Windows-1252") from None
        own_title, body = printable_document(kind, text)  # as a job extracting it: one document either way
        if not body.strip():  # a job's extraction fails such a file `empty`: so does this door
            raise FileRefused("empty", "no text")
        return {
            "doc_id": doc_id,
            "title": title or own_title or file.stem,  # no title of its own: the file's name, not an id
            "body": body,
            # with its format, as a job that extracts the file records it (the console's upload, a
            # directory the service reads): one file through either door is one stored document, unchanged
            "structured_source": {**source, "format": kind},
            "acl": acl,
            **extra,
        }
    document = {
        "doc_id": doc_id,
        "filename": file.name,
        "content_base64": base64.b64encode(data).decode("ascii"),
        "structured_source": source,
        "acl": acl,
        **extra,
    }
    if title:
        document["title"] = title
    return document


def directory_files(root: Path) -> list[Path]:
    """The files of a directory upload, by the service's own rules (I-INGEST): regular files
    but sidecars (a file of an unsupported format is listed, to fail `unsupported_format` as in a job),
    no symlink (file or directory) followed, nothing hidden (`.git/…`, `.env.md`), at most
    MAX_DIRECTORY_FILES."""
    import os

    from knowledge_core.domain.metadata_sources import is_sidecar

    found: list[Path] = []
    for here, dirs, names in os.walk(root, followlinks=False):
        base = Path(here)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (base / d).is_symlink())
        for name in sorted(names):
            p = base / name
            if name.startswith(".") or is_sidecar(name) or p.is_symlink() or not p.is_file():
                continue
            found.append(p)
            if len(found) > MAX_DIRECTORY_FILES:
                raise SystemExit(f"kb ingest: {root.name}: more than {MAX_DIRECTORY_FILES} files")
    return sorted(found)


def _directory(prefix: str, path: Path) -> list[tuple[str, Path, str]]:
    """(doc_id, file, uri) of each file of a directory: the id its path inside the directory gives."""
    from knowledge_core.domain.ingestion import directory_doc_id

    return [
        (directory_doc_id(prefix, p.relative_to(path)), p, p.relative_to(path).as_posix())
        for p in directory_files(path)
    ]


def _without_collisions(
    files: list[tuple[str, Path, str]],
) -> tuple[list[tuple[str, Path, str]], list[tuple[str, str]]]:
    """A directory's files but those whose names map to one doc_id (`a/b.md` and `a-b.md`), which are
    refused, each naming the others and the id (as the service fails them): the rest is sent."""
    uris: dict[str, list[str]] = {}
    for doc_id, _, uri in files:
        uris.setdefault(doc_id, []).append(uri)
    refused = [
        (uri, f"doc_id_collision: {' and '.join(uris[doc_id])} would all be document {doc_id}")
        for doc_id, _, uri in files
        if len(uris[doc_id]) > 1
    ]
    return [f for f in files if len(uris[f[0]]) == 1], refused


def _files(
    args: argparse.Namespace, path: Path, named: str
) -> tuple[list[tuple[str, Path, str]], str | None]:
    """(doc_id, file, uri) of each file to send, and the title given for a single file (`named`: the path
    as the caller wrote it, a single file's uri)."""
    from knowledge_core.domain.ingestion import path_doc_id

    if path.is_dir():
        return _directory(args.doc_id or "", path), None
    # A single file without --doc-id takes its file name (without suffix), as a file of a directory does.
    return [(args.doc_id or path_doc_id(path.stem), path, named)], args.title


def _several_files(args: argparse.Namespace, paths: list[str]) -> list[tuple[str, Path, str]]:
    """(doc_id, file, uri) of each file of several paths (a shell glob: `docs/*.md`), each id the one a
    directory upload gives (--doc-id their prefix: `mine docs/boiler.md` -> `mine-boiler`, as `mine docs/`
    names it); SystemExit for what takes one path only, a missing path, or two files of one id."""
    from knowledge_core.domain.ingestion import directory_doc_id

    if any(p.startswith("s3://") for p in paths):
        raise SystemExit("kb ingest: an s3:// prefix is ingested on its own")
    if getattr(args, "sync", False):
        raise SystemExit("kb ingest: --sync takes one directory")
    if args.title:
        raise SystemExit("kb ingest: --title names one file")
    prefix = args.doc_id or ""
    files: list[tuple[str, Path, str]] = []
    for named in paths:
        path = Path(named)
        if path.is_dir():
            files += _directory(prefix, path)
        elif path.exists():
            files.append((directory_doc_id(prefix, Path(path.name)), path, path.name))
        else:
            raise SystemExit(f"kb ingest: {named}: no such file or directory")
    seen: dict[str, str] = {}
    for doc_id, file, _ in files:
        if doc_id in seen:
            raise SystemExit(f"kb ingest: {seen[doc_id]} and {file} would both be document {doc_id}")
        seen[doc_id] = str(file)
    return files


def _inline_jobs(
    args: argparse.Namespace, files: list[tuple[str, Path, str]], title: str | None
) -> tuple[list[dict], list[tuple[str, str]]]:
    """Job requests carrying the files themselves (a single file, several, or a directory on a remote
    endpoint), at most 500 documents and about 5 MB each; and the files refused here, as (uri, "code:
    detail")."""
    jobs: list[dict] = []
    refused: list[tuple[str, str]] = []
    batch: list[dict] = []
    size = 0
    for doc_id, file, uri in files:
        try:
            document = _file_document(args, doc_id, file, uri, title)
        except FileRefused as exc:
            refused.append((uri, str(exc)))
            continue
        weight = len(document.get("body") or document.get("content_base64") or "")
        if batch and (len(batch) >= 500 or size + weight > 5_000_000):
            jobs.append({"documents": batch})
            batch, size = [], 0
        batch.append(document)
        size += weight
    if batch:
        jobs.append({"documents": batch})
    return jobs, refused


def _wait_for_jobs(args: argparse.Namespace, call: Call, job_ids: list[str], total: int) -> list[dict]:
    """Poll the jobs until they complete: a progress bar on a terminal (documents, passages, rate, ETA),
    a plain line every few seconds otherwise."""
    import time

    from tqdm import tqdm

    base = f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs/"
    tty = sys.stderr.isatty()
    bar = tqdm(total=total, unit="doc", disable=not tty, dynamic_ncols=True)
    finished: dict[str, dict] = {}
    last_line = 0.0
    try:
        while len(finished) < len(job_ids):
            jobs = [finished.get(j) or call(args.endpoint, "GET", base + seg(j)) for j in job_ids]
            for job in jobs:
                if job["state"] in ("completed", "cancelled"):
                    finished[job["job_id"]] = job
            handled = sum(
                j["counts"]["done"] + j["counts"]["unchanged"] + j["counts"]["failed"] for j in jobs
            )
            bar.update(handled - bar.n)
            bar.set_postfix(passages=sum(j["passages"] for j in jobs), refresh=False)
            if not tty and (time.monotonic() - last_line > 2 or len(finished) == len(job_ids)):
                for job in jobs:
                    print(_job_line(job), flush=True)
                last_line = time.monotonic()
            if len(finished) < len(job_ids):
                time.sleep(0.2)
    finally:
        bar.close()
    return [finished[j] for j in job_ids]


def cmd_ingest(args: argparse.Namespace, call: Call) -> int:
    """Exit 0 when every document was ingested (or unchanged), 1 when any failed (an unsupported format
    included) or was refused here."""
    named: list[str] = [args.file] if isinstance(args.file, str) else list(args.file)
    path = Path(named[0])
    sync = getattr(args, "sync", False)  # callers building their own Namespace may leave the job flags out
    refused: list[tuple[str, str]] = []
    given = flag_metadata(args)  # a bad --meta stops here, before any job
    meta: dict[str, Any] = {"metadata": given} if given else {}
    if len(named) > 1:  # several paths: every file read here, one directory's ids
        requests, refused = _inline_jobs(args, _several_files(args, named), None)
    elif named[0].startswith("s3://"):
        # The service lists and reads the prefix itself (boto3's AWS_ENDPOINT_URL_S3 and credentials).
        requests = [
            {"s3_uri": named[0], "doc_id_prefix": args.doc_id or "", "acl": _acl(args), "sync": sync, **meta}
        ]
    elif path.is_dir() and _is_loopback(args.endpoint):
        # kb serve reads the directory itself when it is under one of its --ingest-root directories;
        # otherwise the files are read here and uploaded (a --sync needs the former).
        body: dict[str, Any] = {
            "directory": str(path.resolve()),
            "doc_id_prefix": args.doc_id or "",
            "acl": _acl(args),
            **meta,
        }
        if sync:
            body["sync"] = True
        requests = [body]
    else:
        if sync:
            raise SystemExit("kb ingest: --sync needs a directory and a kb serve on this machine")
        if not path.exists():
            raise SystemExit(f"kb ingest: {named[0]}: no such file or directory")
        requests, refused = _uploads(args, path, named[0])
    url = f"/admin/v1/sources/{seg(args.source)}/ingestion-jobs"
    if len(requests) == 1 and "directory" in requests[0]:
        try:
            responses = [call(args.endpoint, "POST", url, requests[0])]
        except ApiError as exc:
            if sync or not _directory_refused(exc):
                raise
            requests, refused = _uploads(args, path, named[0])
            responses = [call(args.endpoint, "POST", url, request) for request in requests]
    else:
        responses = [call(args.endpoint, "POST", url, request) for request in requests]
    for uri, reason in refused:
        print(f"kb ingest: {uri}: {reason}", file=sys.stderr)
    accepted = [a for a in responses if isinstance(a, dict) and "job_id" in a]
    if getattr(args, "no_wait", False):
        for job in accepted:
            print(job["job_id"])
        return 1 if refused else 0
    jobs = _wait_for_jobs(args, call, [a["job_id"] for a in accepted], sum(a["total"] for a in accepted))
    return _report(args, jobs, len(refused))


def _uploads(
    args: argparse.Namespace, path: Path, name: str
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The jobs that upload `path`'s files read here, and the files refused before any job (colliding
    ids, unreadable files). A file alone never silently replaces another file's document."""
    files, title = _files(args, path, name)
    files, refused = _without_collisions(files)
    requests, unsent = _inline_jobs(args, files, title)
    if not path.is_dir() and not getattr(args, "replace", False):
        for request in requests:
            for document in request["documents"]:
                document["replace"] = False
    return requests, refused + unsent


def _directory_refused(exc: ApiError) -> bool:
    """Whether kb serve refused to read a directory itself (not under its --ingest-root directories, or
    directory jobs off): the files can still be uploaded."""
    error = exc.body.get("error", {}) if isinstance(exc.body, dict) else {}
    return exc.status in (400, 403) and str(error.get("message", "")).startswith("directory: not ")


def _report(args: argparse.Namespace, jobs: list[dict], refused: int) -> int:
    ingested = sum(j["counts"]["done"] + j["counts"]["unchanged"] for j in jobs)
    # each error with its own file: two files of one doc_id (`doc_id_collision`) are both named
    failed = [
        (e["doc_id"], e["code"], f" ({e['uri']})" if e.get("uri") else "") for j in jobs for e in j["errors"]
    ]
    print(f"ingested {ingested} document(s) into {args.source}", end="")
    unchanged = sum(j["counts"]["unchanged"] for j in jobs)
    deleted = sum(j["counts"]["deleted"] for j in jobs)
    print(f" ({unchanged} unchanged, {len(failed) + refused} failed, {deleted} deleted)")
    for doc_id, code, where in failed:
        print(f"  {doc_id}: {code}{where}", file=sys.stderr)
    if any(code == "doc_id_taken" for _, code, _ in failed):
        print(
            "kb ingest: a document of that id came from another file and was kept: --replace replaces "
            "it, --doc-id ID gives this file an id of its own",
            file=sys.stderr,
        )
    return 1 if refused or failed else 0

"""The local S3-API server of `kb services`: versitygw (Apache-2.0, github.com/versity/versitygw)
with its posix backend, built with ``go build`` from the version pinned in ``services/versitygw/go.mod``.

Chosen over s3proxy (Apache-2.0, Maven Central ``org.gaul:s3proxy``) by measurement on this machine:
ready in 0.1 s against 6-9 s, about 55 MB resident against 130-270 MB, and it answers boto3's default
requests (flexible checksums: ``x-amz-checksum-crc32`` on PUT, ``x-amz-checksum-mode`` on GET), which
s3proxy 2.7 refuses with 501 NotImplemented unless every client turns them off. Both listed with
ListObjectsV2 pagination, ETags (MD5) and DeleteObject correctly. Not moto (an in-process fake for unit
tests only), not MinIO (AGPL).

Layout under ``<state>/services/``: ``s3.json``, ``s3.pid``, ``s3.log``, ``s3.credentials`` (0600; the
access key pair the server requires, made once per state dir), ``s3/data/<bucket>/<key>`` (objects, kept
across restarts) and ``s3/meta/`` (their metadata): the server runs with umask 077 (the supervisor's
``_spawn``), so objects are 0600 in 0700 directories, and wider ones an earlier kb left are narrowed at
each start. Stdlib only, and the core's private_files."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from knowledge_core.adapters.private_files import private_path, private_tree

MARKER = "versitygw"
MODULE = "github.com/versity/versitygw/cmd/versitygw"
CREDENTIALS_FILE = "s3.credentials"


def module_dir(sources: Path) -> Path:
    return sources / "versitygw"


def binary(svc_dir: Path, sources: Path, go: str) -> Path:
    """Build versitygw into the state dir; cached until the pinned module (go.mod/go.sum) changes. The
    build's output goes to ``go-build-s3.log``; a failure raises RuntimeError naming that log."""
    src = module_dir(sources)
    out = svc_dir / "bin" / "versitygw"
    pins = [src / "go.mod", src / "go.sum"]
    if out.is_file() and out.stat().st_mtime >= max(p.stat().st_mtime for p in pins):
        return out
    private_path(out.parent, directory=True)
    log = private_path(svc_dir / "go-build-s3.log")
    cmd = [go, "build", "-o", str(out), MODULE]
    with open(log, "w") as fh:
        fh.write(f"$ (cd {src} && {' '.join(cmd)})\n")
        fh.flush()
        rc = subprocess.call(cmd, cwd=src, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if rc != 0 or not out.is_file():
        raise RuntimeError(f"go build of versitygw failed (exit {rc}); see {log}")
    private_tree(out.parent)
    return out


def credentials(svc_dir: Path) -> tuple[str, str]:
    """The server's root access key pair: random, made once per state dir, readable by its owner only."""
    path = svc_dir / CREDENTIALS_FILE
    if path.exists():
        private_path(path)  # one an earlier kb left wider
    try:
        data = json.loads(path.read_text())
        return str(data["access_key_id"]), str(data["secret_access_key"])
    except (OSError, ValueError, KeyError):
        pass
    pair = (f"KBLOCAL{secrets.token_hex(6).upper()}", secrets.token_urlsafe(30))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"access_key_id": pair[0], "secret_access_key": pair[1]}, fh)
    return pair


def command(exe: Path, svc_dir: Path, host: str, port: int) -> list[str]:
    """The server's command line: loopback only, quiet, objects under the state dir (0700 directories,
    objects 0600: those an earlier kb left wider are narrowed here). The key pair is passed in the
    environment (`environment`), never on the command line (`ps` shows that)."""
    data, meta = svc_dir / "s3" / "data", svc_dir / "s3" / "meta"
    for directory in (svc_dir / "s3", data, meta):
        private_path(directory, directory=True)
    private_tree(svc_dir / "s3")
    # The posix backend sets its own modes on what it creates (not reduced by the umask): owner-only.
    owner_only = ["--dir-perms", str(0o700), "--file-perms", str(0o600)]
    return [
        str(exe),
        "--port",
        f"{host}:{port}",
        "--quiet",
        "posix",
        *owner_only,
        "--sidecar",
        str(meta),
        str(data),
    ]


def environment(svc_dir: Path) -> dict[str, str]:
    access, secret = credentials(svc_dir)
    return {"ROOT_ACCESS_KEY_ID": access, "ROOT_SECRET_ACCESS_KEY": secret}


def healthy(url: str, timeout: float = 2.0) -> bool:
    """Answers S3: an unsigned request gets an S3 error document (403) back."""
    try:
        with urllib.request.urlopen(url + "/", timeout=timeout) as resp:
            return b"ListAllMyBucketsResult" in resp.read()
    except urllib.error.HTTPError as exc:
        return b"<Error>" in exc.read()
    except (OSError, ValueError):
        return False

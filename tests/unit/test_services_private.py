"""G-LOCAL: the backing services `kb services` starts keep their data private to their owner. Everything
under `<state>/services/` is 0700 (directories) and 0600 (files) whatever the umask: the directories the
supervisor makes, the files it writes, and what the services themselves write (they run with umask 077);
what an earlier kb left wider is narrowed at start. No service is started: a stand-in program takes the
S3-API server's place on its own command line and writes an object as a POSIX backend does."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kb_cli import s3_server, supervisor


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): mode(p) for p in sorted(root.rglob("*"))}


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


# Writes one object under the data directory (the command line's last argument) with the default modes a
# server's mkdir/create would ask for (0777/0666 before the umask), then exits.
_STAND_IN = """#!{python}
import os, sys
data = sys.argv[-1]
os.makedirs(os.path.join(data, "bucket", "docs"), exist_ok=True)
with open(os.path.join(data, "bucket", "docs", "a.md"), "w") as fh:
    fh.write("# object")
"""


def _stand_in_server(tmp_path: Path) -> Path:
    exe = tmp_path / "stand-in-versitygw"
    exe.write_text(_STAND_IN.format(python=sys.executable))
    exe.chmod(0o700)
    return exe


def test_services_directories_are_owner_only_whatever_the_umask_g_local(tmp_path: Path, umask: int):
    """The state and services directories, the S3-API server's data and metadata directories and an
    OpenSearch node's base path."""
    state = tmp_path / "state"
    svc = supervisor._svc_dir(state)
    s3_server.command(Path("versitygw"), svc, "127.0.0.1", 9620)
    assert (mode(state), mode(svc)) == (0o700, 0o700)
    assert modes(svc) == {"s3": 0o700, "s3/data": 0o700, "s3/meta": 0o700}
    base = supervisor.opensearch_base(svc)
    assert base == svc / "opensearch"
    assert modes(base) == {"node_1": 0o700, "node_1/config": 0o700} and mode(base) == 0o700


def _launch_stand_in_s3(tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The S3-API server's launch path under a permissive umask, a stand-in on its command line."""
    monkeypatch.setattr(supervisor, "_pick_port", lambda preferred, fallback_any: 9620)  # no socket
    old = os.umask(0o022)
    try:
        meta = supervisor._launch_s3(state, _stand_in_server(tmp_path))
    finally:
        os.umask(old)
    _, status = os.waitpid(meta["pid"], 0)  # the stand-in is this process's child: reap it
    assert os.waitstatus_to_exitcode(status) == 0


def test_s3_server_objects_and_service_files_are_0600_in_0700_directories_g_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """An object the S3-API server writes is 0600 in 0700 directories; its log, pid, metadata and key pair
    files are 0600."""
    state = tmp_path / "state"
    _launch_stand_in_s3(tmp_path, state, monkeypatch)
    svc = state / "services"
    assert modes(svc / "s3") == {
        "data": 0o700,
        "data/bucket": 0o700,
        "data/bucket/docs": 0o700,
        "data/bucket/docs/a.md": 0o600,
        "meta": 0o700,
    }
    assert {
        name: mode(svc / name) for name in ("s3.log", "s3.json", "s3.pid", "s3.credentials")
    } == dict.fromkeys(("s3.log", "s3.json", "s3.pid", "s3.credentials"), 0o600)


def test_services_narrow_what_an_earlier_kb_left_wider_g_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Objects, OpenSearch data and logs, service logs and the key pair an earlier kb wrote 0644 in 0755
    directories are narrowed when the services start again; a symlink's target is left alone."""
    svc = tmp_path / "state" / "services"
    outside = tmp_path / "outside"
    outside.write_text("x")
    outside.chmod(0o644)
    wide = [
        svc / "s3" / "data" / "bucket" / "docs" / "a.md",
        svc / "s3" / "meta" / "bucket" / "docs" / "a.md" / "user.etag",
        svc / "opensearch" / "node_1" / "data" / "nodes" / "0" / "_state" / "state-1.st",
        svc / "opensearch" / "node_1" / "logs" / "kb-local.log",
        svc / "s3.log",
        svc / "s3.credentials",
    ]
    for path in wide:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    (svc / "s3" / "data" / "bucket" / "link").symlink_to(outside)
    for path in [svc, *svc.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    _launch_stand_in_s3(tmp_path, tmp_path / "state", monkeypatch)
    s3_files = {
        p: mode(p) for p in [svc, *svc.rglob("*")] if "opensearch" not in p.parts and not p.is_symlink()
    }
    assert s3_files == {p: 0o700 if p.is_dir() else 0o600 for p in s3_files}
    supervisor.opensearch_base(svc)
    found = {p: mode(p) for p in [svc, *svc.rglob("*")] if not p.is_symlink()}
    assert len(found) > len(wide) and found == {p: 0o700 if p.is_dir() else 0o600 for p in found}
    assert mode(outside) == 0o644

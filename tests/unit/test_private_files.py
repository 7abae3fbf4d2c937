"""G-LOCAL: the embedded state, index and vector cache are created 0600 (their SQLite
sidecars too) whatever the umask, and wider modes left by an earlier kb are narrowed when opened again."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from knowledge_core.adapters.embedding import CachedEmbedder
from knowledge_core.adapters.private_files import private_path
from knowledge_core.adapters.sqlite import open_state_database
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend

from tests.unit.test_hybrid import CountingEmbedder


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask022", "umask000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_m6_private_path_creates_owner_only_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    state = private_path(tmp_path / "a" / "state", directory=True)
    assert mode(state) == 0o700
    assert mode(private_path(state / "f")) == 0o600


def test_m6_private_path_narrows_what_exists(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    for name in ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm"):
        (state / name).write_bytes(b"")
        os.chmod(state / name, 0o644)
    os.chmod(state / "db.sqlite3-shm", 0o666)
    private_path(state, directory=True)
    private_path(state / "db.sqlite3")
    assert mode(state) == 0o700
    assert {p.name: mode(p) for p in state.iterdir()} == dict.fromkeys(
        ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm"), 0o600
    )


def test_m6_private_path_leaves_a_symlinks_target_alone(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("x")
    os.chmod(outside, 0o644)
    (tmp_path / "link").symlink_to(outside)
    private_path(tmp_path / "link")
    assert mode(outside) == 0o644
    assert str(private_path(":memory:")) == ":memory:"


def test_m6_state_index_and_cache_files_are_0600(tmp_path: Path, umask: int) -> None:
    """Every SQLite file the embedded adapters write, with its WAL and shared-memory files."""
    db = open_state_database(tmp_path / "state.sqlite3")
    with db.transaction() as conn:
        conn.execute("SELECT 1")
    SqliteFtsBackend(tmp_path / "search.sqlite3").list_documents("demo-docs@1.0.0")
    cache = CachedEmbedder(CountingEmbedder(), tmp_path / "embedding-cache.sqlite3")
    cache.embed_passages(["aa"])
    files = sorted(tmp_path.iterdir())
    names = {p.name for p in files}
    assert {"state.sqlite3", "state.sqlite3-wal", "state.sqlite3-shm", "search.sqlite3"} <= names
    assert "embedding-cache.sqlite3" in names
    assert {p.name: mode(p) for p in files} == dict.fromkeys(names, 0o600)

"""G-LOCAL through `kb serve`: everything it writes under `--state` is 0600 in a 0700
directory whatever the umask, and a state directory an earlier kb left readable is narrowed on start."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.e2e.conftest import running_kb_serve


def modes(state: Path) -> dict[str, int]:
    """The mode of the directory ('.') and of every file kb serve wrote in it (the test's log aside)."""
    found = {".": stat.S_IMODE(state.stat().st_mode)}
    for path in state.rglob("*"):
        if path.name != "serve.log":
            found[str(path.relative_to(state))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def exercise(server) -> None:  # type: ignore[no-untyped-def]
    """A search and a read: the index, the state file and their WAL/shared-memory files all exist."""
    hint = server.knowledge("demo", "search", {"query": "webhook signature verification"}).json["hints"][0]
    assert server.knowledge("demo", "read", {"ref": hint["ref"]}).status == 200


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask022", "umask000"])
def test_m6_state_files_0600_in_a_0700_directory(tmp_path: Path, umask: int) -> None:
    state = tmp_path / "state"
    with running_kb_serve(state_dir(state), umask=umask, args=("--embedding-model", "none")) as server:
        exercise(server)
        found = modes(state)
    expected = {"state.sqlite3", "search.sqlite3", "token-secret", "demo-token"}
    assert expected | {"state.sqlite3-wal", "search.sqlite3-wal"} <= set(found)
    assert found.pop(".") == 0o700
    assert found == dict.fromkeys(found, 0o600)


def test_m6_existing_state_is_narrowed_on_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with running_kb_serve(state_dir(state), args=("--embedding-model", "none")) as server:
        exercise(server)
    for path in [state, *state.iterdir()]:  # what a kb from before this rule left behind
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    with running_kb_serve(state, args=("--embedding-model", "none")) as server:
        exercise(server)
        found = modes(state)
    assert found.pop(".") == 0o700
    assert found == dict.fromkeys(found, 0o600)


def state_dir(state: Path) -> Path:
    """The directory the test's serve.log goes in; kb serve itself makes it private."""
    state.mkdir(mode=0o755)
    return state

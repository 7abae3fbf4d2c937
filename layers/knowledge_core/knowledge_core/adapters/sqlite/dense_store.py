"""Saved dense graphs of the embedded backend: the usearch HNSW graph of one (source, model) is
written beside the search file, `<search.sqlite3>.dense/<sha256 of source and model>.usearch`, with a JSON
sidecar (`.json`) naming what it holds: source key, model, the source version and key count it was saved
at, the vector width, the graph parameters, the usearch version and the graph file's SHA-256. A new process
loads it and brings it up to date by the delta of passage ids (dense_cache.py) instead of rebuilding it.

Each file is written to a temporary one, fsynced, then `os.replace`d (the graph, then its sidecar), so a
crash leaves the previous pair or a pair whose checksum disagrees, never a half graph that loads. A missing,
unreadable, corrupt (checksum), or mismatched (another source, model, width, parameters or usearch version)
graph is not returned (`load` is None, logged): the caller rebuilds it, a searcher never sees an error.
A `.lock` file beside each graph is the build claim the processes of one file share (`build_claim`).
0600 files in a 0700 directory (G-LOCAL): a graph holds the vectors of every tenant's passages."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..private_files import private_path
from .dense_index import CONNECTIVITY, DTYPE, EXPANSION_ADD, METRIC, HnswIndex, usearch_index

logger = logging.getLogger(__name__)

FORMAT = 1
_STALE_TEMPORARY_S = 3600.0  # a temporary file this old is a crashed save's: removed by the next save


@dataclass(frozen=True)
class SavedGraph:
    version: int  # the source's version the graph holds (its passages of that version, no others)
    index: HnswIndex


def _usearch_version() -> str:
    usearch_index()  # the package's own import, done safely once
    import usearch

    return str(usearch.__version__)


class GraphStore:
    """The saved graphs of one search file."""

    def __init__(self, search_path: str | Path) -> None:
        path = Path(search_path)
        self.directory = path.with_name(path.name + ".dense")

    def paths(self, source_key: str, model: str) -> tuple[Path, Path]:
        """The graph file and its sidecar of (source, model)."""
        stem = hashlib.sha256(f"{source_key}\0{model}".encode()).hexdigest()[:32]
        return self.directory / f"{stem}.usearch", self.directory / f"{stem}.json"

    @contextmanager
    def build_claim(self, source_key: str, model: str) -> Iterator[bool]:
        """Held while one process builds and saves the graph of (source, model) (`flock` on a lock file
        beside it; the system drops it when the process dies), so the processes of one file (`kb serve`
        and its instances) build it once. Waits for another process' claim; yields whether it waited:
        then that process most likely saved the graph, which the caller loads instead of building."""
        lock_path = self.paths(source_key, model)[0].with_suffix(".lock")
        try:
            private_path(self.directory, directory=True)
            private_path(lock_path)
            lock = open(lock_path, "rb")  # noqa: SIM115 - closed below, after the claim
        except OSError:  # a read-only state directory: build unclaimed (it cannot be saved either)
            yield False
            return
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                waited = False
            except BlockingIOError:
                fcntl.flock(lock, fcntl.LOCK_EX)
                waited = True
            try:
                yield waited
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _expected(self, source_key: str, model: str) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "source_key": source_key,
            "model": model,
            "metric": METRIC,
            "dtype": DTYPE,
            "connectivity": CONNECTIVITY,
            "expansion_add": EXPANSION_ADD,
            "usearch": _usearch_version(),
        }

    def save(self, source_key: str, model: str, version: int, index: HnswIndex) -> None:
        """Write the graph and its sidecar (OSError when the directory cannot be written)."""
        graph_path, sidecar_path = self.paths(source_key, model)
        private_path(self.directory, directory=True)
        self._remove_stale_temporaries(graph_path.stem)
        suffix = f".{os.getpid()}.{threading.get_ident()}.tmp"
        graph_tmp = graph_path.with_name(graph_path.name + suffix)
        sidecar_tmp = sidecar_path.with_name(sidecar_path.name + suffix)
        try:
            private_path(graph_tmp)  # 0600 before usearch writes into it
            count = index.save(graph_tmp)
            digest = _sha256_synced(graph_tmp)
            os.replace(graph_tmp, graph_path)
            sidecar = self._expected(source_key, model) | {
                "version": version,
                "count": count,
                "width": index.width,
                "sha256": digest,
                "saved_at": time.time(),
            }
            private_path(sidecar_tmp)
            with open(sidecar_tmp, "w", encoding="utf-8") as out:
                json.dump(sidecar, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(sidecar_tmp, sidecar_path)
        finally:
            for leftover in (graph_tmp, sidecar_tmp):
                leftover.unlink(missing_ok=True)

    def _remove_stale_temporaries(self, stem: str) -> None:
        cutoff = time.time() - _STALE_TEMPORARY_S
        for leftover in self.directory.glob(f"{stem}.*.tmp"):
            try:
                if leftover.stat().st_mtime < cutoff:
                    leftover.unlink()
            except OSError:
                pass

    def load(self, source_key: str, model: str) -> SavedGraph | None:
        """The saved graph of (source, model) when one is there whole and of these parameters; else None."""
        graph_path, sidecar_path = self.paths(source_key, model)
        if not sidecar_path.exists():
            return None
        try:
            return self._load(source_key, model, graph_path, sidecar_path)
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
            logger.warning("saved dense graph of %s (%s) not used, rebuilt: %s", source_key, model, exc)
            return None

    def _load(self, source_key: str, model: str, graph_path: Path, sidecar_path: Path) -> SavedGraph:
        sidecar = json.loads(sidecar_path.read_text(encoding="utf-8"))
        expected = self._expected(source_key, model)
        differing = sorted(k for k, v in expected.items() if sidecar.get(k) != v)
        if differing:
            raise ValueError(f"saved with other {', '.join(differing)}")
        with open(graph_path, "rb") as graph_file:
            hashed = os.fstat(graph_file.fileno())
            if hashlib.file_digest(graph_file, "sha256").hexdigest() != sidecar["sha256"]:
                raise ValueError("checksum mismatch (a partial or damaged file)")
        index = HnswIndex.load(model, graph_path)
        if os.stat(graph_path).st_ino != hashed.st_ino:  # replaced by another process's save meanwhile
            raise ValueError("replaced while it was read")
        if len(index) != sidecar["count"] or index.width != sidecar["width"]:
            raise ValueError(f"{len(index)} x {index.width} vectors, the sidecar says {sidecar['count']}")
        return SavedGraph(int(sidecar["version"]), index)


def _sha256_synced(path: Path) -> str:
    """The file's SHA-256, after its bytes reached the disk."""
    with open(path, "rb") as written:
        os.fsync(written.fileno())
        return hashlib.file_digest(written, "sha256").hexdigest()

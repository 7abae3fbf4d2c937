"""The dense stage's index of one (source, model) of the embedded backend: exact below `EXACT_MAX`
vectors, HNSW (usearch) above, so a query costs a bounded time at a million vectors.

Why these numbers (bench/results/scale.md has the runs): the exact scan (float32 BLAS over the int8
vectors) needs 4 bytes of RAM per dimension and, on this loaded 2-core machine, ~1-4 ms per 10,000 vectors
(~20 ms at 50k, 160-300 ms and 1.5 GB at 1M), so past 20,000 vectors the dense stage uses usearch's HNSW
over the stored int8 vectors with the inner-product metric: ~0.4 ms at 100k with recall@10 0.998 against
the exact scan (tests/unit/test_sqlite_scale.py); its distance is exactly 1 - the int8 dot product, so
cosines (dot / 127²) are the exact ones. usearch: Apache-2.0, maintained, wheels for Linux x86-64 and
arm64, one small package. At 1M: recall@10 0.994 with the parameters below (docs/search-at-scale.md).

An HNSW index follows writes by delta (passage ids are never reused within a source, candidates.py): a
version change adds the new ids and removes the gone ones, instead of rebuilding a million-node graph.

A graph is never built in a request (dense_cache.py): while one is built in the background, the dense stage
answers with `ExactScan`, usearch's exact SIMD int8 inner product over the int8 rows (measured here: 10 ms at
100k vectors of 384 dimensions, 75 ms at 1M on 2 cores, 0.4 GB at 1M against 1.5 GB as float32), the same
ranking and cosines as the exact matrix. A built graph is saved beside the search file (dense_store.py) and
loaded at the next start."""

from __future__ import annotations

import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from ...ports import Vector
from ..embedding import VectorMatrix

if TYPE_CHECKING:
    from usearch.index import Index

EXACT_MAX = 20_000
# HNSW M 32, 128 candidates per insertion (chosen by measurement at 1M synthetic vectors, ef 400 = the dense
# stage's depth): recall@10 0.994 against exact, 0.9 ms/query, 172 s to build, 1.07 GB; M 16 / 64 gave 0.928.
CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 64  # at least the number of neighbours asked for (set per search)
METRIC, DTYPE = "ip", "i8"
_SCALE2 = 127 * 127
_IMPORT_LOCK = threading.Lock()


def usearch_index() -> ModuleType:
    """`usearch.index`, imported once under a lock: a second thread importing it while the first is inside
    the package's `__init__` (which loads NumKong's symbols globally first) would load the compiled module
    without them (an ImportError, "undefined symbol"), e.g. a search beside a background build."""
    with _IMPORT_LOCK:
        import usearch.index

    return usearch.index


class DenseIndex(Protocol):
    model: str

    def __len__(self) -> int: ...

    def nearest(self, query: Vector, k: int) -> list[tuple[int, float]]: ...


# Vectors added per usearch `add` call: a build checks its stop flag between chunks (a thread still inside
# usearch's add when the interpreter exits aborts the process: "terminate called without an active
# exception"), so a stop waits at most one chunk (~0.3 s at 384 dimensions on this 2-core machine).
ADD_CHUNK = 2_048


class BuildStopped(Exception):
    """A graph build or delta was stopped between two chunks (the process is shutting down)."""


class HnswIndex:
    """usearch HNSW over int8 vectors keyed by passage id (inner product: distance = 1 - int8 dot)."""

    def __init__(
        self, model: str, ids: Any, vectors: Any, *, threads: int = 0, stop: threading.Event | None = None
    ) -> None:
        self._adopt(
            model,
            usearch_index().Index(
                ndim=int(vectors.shape[1]),
                metric=METRIC,
                dtype=DTYPE,
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            ),
        )
        self.update(ids, vectors, [], threads=threads, stop=stop)

    def _adopt(self, model: str, graph: Index) -> None:
        self.model = model
        self.width = int(graph.ndim)
        self._lock = threading.Lock()
        self._index = graph

    @classmethod
    def load(cls, model: str, path: Path) -> HnswIndex:
        """The graph saved at `path` (`save`); ValueError when it is not one of these parameters."""
        usearch = usearch_index()
        graph: Index | None = usearch.Index.restore(path)
        if graph is None:
            raise ValueError(f"{path} holds no usearch index")
        if (graph.metric_kind, graph.dtype, graph.connectivity, graph.multi) != (
            usearch.MetricKind.IP,
            usearch.ScalarKind.I8,
            CONNECTIVITY,
            False,
        ):
            raise ValueError(f"{path} is a graph of other parameters ({graph})")
        # usearch's stubs declare these setters under one name: both set their own parameter.
        graph.expansion_add = EXPANSION_ADD  # type: ignore[misc]
        graph.expansion_search = EXPANSION_SEARCH  # type: ignore[misc]
        index = cls.__new__(cls)
        index._adopt(model, graph)
        return index

    def save(self, path: Path) -> int:
        """Write the graph to `path` (between updates: none runs while it writes); its number of vectors."""
        with self._lock:
            self._index.save(path)
            return len(self._index)

    def vectors_of(self, ids: Any) -> Any:
        """The int8 rows the graph holds for `ids` (every one of them must be in it)."""
        import numpy as np

        if not len(ids):
            return np.zeros((0, self.width), dtype=np.int8)
        rows: Any = self._index.get(np.asarray(ids, dtype=np.uint64), dtype=DTYPE)  # one row per key
        return np.stack(rows).astype(np.int8, copy=False)

    def __len__(self) -> int:
        return len(self._index)

    def keys(self) -> Any:
        import numpy as np

        return np.asarray(self._index.keys, dtype=np.int64)

    def update(
        self,
        added_ids: Any,
        added_vectors: Any,
        removed_ids: Any,
        *,
        threads: int = 0,
        stop: threading.Event | None = None,
    ) -> None:
        """Add new passages' vectors and drop gone ones (one writer at a time; searches go on). `threads`
        0: every core. `stop` set: BuildStopped before the next `ADD_CHUNK` (the graph then holds part of
        the delta: the caller drops it)."""
        import numpy as np

        keys = np.asarray(added_ids, dtype=np.uint64)
        with self._lock:
            if len(removed_ids):
                self._index.remove(np.asarray(removed_ids, dtype=np.uint64))
            for start in range(0, len(keys), ADD_CHUNK):
                if stop is not None and stop.is_set():
                    raise BuildStopped
                chunk = slice(start, start + ADD_CHUNK)
                self._index.add(keys[chunk], added_vectors[chunk], threads=threads)

    def nearest(self, query: Vector, k: int) -> list[tuple[int, float]]:
        """The `k` passage ids most similar to `query` (same model only), best first, with their cosine."""
        import numpy as np

        if query.model != self.model or not len(self._index) or k <= 0 or self.width != len(query.data):
            return []
        k = min(k, len(self._index))
        # usearch declares the setter under expansion_add's name; it does set expansion_search.
        self._index.expansion_search = max(EXPANSION_SEARCH, k)  # type: ignore[misc]
        found = self._index.search(np.frombuffer(query.data, dtype=np.int8), k)
        return [
            (int(key), (1.0 - float(distance)) / _SCALE2)
            for key, distance in zip(found.keys, found.distances, strict=True)
        ]


class ExactScan:
    """Every int8 row scanned for each query (usearch's exact inner product, SIMD, every core): the dense
    stage's exact answer over a large source while its graph is built. Never changed in place: a write
    makes a new one (`updated`), so a search holding this one reads a consistent set."""

    def __init__(self, model: str, ids: Any, vectors: Any) -> None:
        import numpy as np

        self.model = model
        self.ids = np.asarray(ids, dtype=np.int64)
        self.vectors = np.ascontiguousarray(vectors, dtype=np.int8)
        self.width = int(self.vectors.shape[1]) if self.vectors.ndim == 2 else 0

    def __len__(self) -> int:
        return len(self.ids)

    def updated(self, added_ids: Any, added_vectors: Any, removed_ids: Any) -> ExactScan:
        """This scan without `removed_ids` and with the added rows."""
        import numpy as np

        keep = ~np.isin(self.ids, removed_ids) if len(removed_ids) else slice(None)
        ids = np.concatenate([self.ids[keep], np.asarray(added_ids, dtype=np.int64)])
        vectors = np.concatenate([self.vectors[keep], np.asarray(added_vectors, dtype=np.int8)])
        return ExactScan(self.model, ids, vectors)

    def nearest(self, query: Vector, k: int) -> list[tuple[int, float]]:
        """The `k` passage ids most similar to `query` (same model only), best first, with their cosine."""
        import numpy as np

        if query.model != self.model or not len(self.ids) or k <= 0 or self.width != len(query.data):
            return []
        k = min(k, len(self.ids))
        usearch = usearch_index()
        query_row = np.frombuffer(query.data, dtype=np.int8)
        found = usearch.search(self.vectors, query_row, k, usearch.MetricKind.IP, exact=True)
        return [
            (int(self.ids[row]), (1.0 - float(distance)) / _SCALE2)
            for row, distance in zip(found.keys, found.distances, strict=True)
        ]


def build(model: str, ids: Any, vectors: Any) -> DenseIndex:
    """The index for these vectors (int8 rows, one per passage id): exact when few, HNSW otherwise."""
    if len(ids) <= EXACT_MAX:
        return VectorMatrix(model, [int(i) for i in ids], [bytes(row) for row in vectors])
    return HnswIndex(model, ids, vectors)

"""The dense stage's index of one (source, model) of the embedded backend: exact below `EXACT_MAX`
vectors, HNSW (usearch) above, so a query costs a bounded time at a million vectors (issue 23).

Why these numbers (bench/results/scale.md has the runs): the exact scan (float32 BLAS over the int8
vectors) needs 4 bytes of RAM per dimension and, on this loaded 2-core machine, ~1-4 ms per 10,000 vectors
(~20 ms at 50k, 160-300 ms and 1.5 GB at 1M), so past 20,000 vectors the dense stage uses usearch's HNSW
over the stored int8 vectors with the inner-product metric: ~0.4 ms at 100k with recall@10 0.998 against
the exact scan (tests/unit/test_sqlite_scale.py); its distance is exactly 1 - the int8 dot product, so
cosines (dot / 127²) are the exact ones. usearch: Apache-2.0, maintained, wheels for Linux x86-64 and
arm64, one small package. At 1M: recall@10 0.994 with the parameters below (README, Scale).

An HNSW index follows writes by delta (passage ids are never reused within a source, candidates.py): a
version change adds the new ids and removes the gone ones, instead of rebuilding a million-node graph."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from ...ports import Vector
from ..embedding import VectorMatrix

EXACT_MAX = 20_000
# HNSW M 32, 128 candidates per insertion (chosen by measurement at 1M synthetic vectors, ef 400 = the dense
# stage's depth): recall@10 0.994 against exact, 0.9 ms/query, 172 s to build, 1.07 GB; M 16 / 64 gave 0.928.
CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 64  # at least the number of neighbours asked for (set per search)
_SCALE2 = 127 * 127


class DenseIndex(Protocol):
    model: str

    def __len__(self) -> int: ...

    def nearest(self, query: Vector, k: int) -> list[tuple[int, float]]: ...


class HnswIndex:
    """usearch HNSW over int8 vectors keyed by passage id (inner product: distance = 1 - int8 dot)."""

    def __init__(self, model: str, ids: Any, vectors: Any) -> None:
        from usearch.index import Index

        self.model = model
        self.width = int(vectors.shape[1])
        self._lock = threading.Lock()
        self._index = Index(
            ndim=self.width,
            metric="ip",
            dtype="i8",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )
        self.update(ids, vectors, [])

    def __len__(self) -> int:
        return len(self._index)

    def keys(self) -> Any:
        import numpy as np

        return np.asarray(self._index.keys, dtype=np.int64)

    def update(self, added_ids: Any, added_vectors: Any, removed_ids: Any) -> None:
        """Add new passages' vectors and drop gone ones (one writer at a time; searches go on)."""
        import numpy as np

        with self._lock:
            if len(removed_ids):
                self._index.remove(np.asarray(removed_ids, dtype=np.uint64))
            if len(added_ids):
                self._index.add(np.asarray(added_ids, dtype=np.uint64), added_vectors, threads=0)

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


def build(model: str, ids: Any, vectors: Any) -> DenseIndex:
    """The index for these vectors (int8 rows, one per passage id): exact when few, HNSW otherwise."""
    if len(ids) <= EXACT_MAX:
        return VectorMatrix(model, [int(i) for i in ids], [bytes(row) for row in vectors])
    return HnswIndex(model, ids, vectors)

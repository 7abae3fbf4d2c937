"""A per-process memo bounded by bytes, not by entries (S5): a cache keyed by caller input (query words of
up to 2,000 characters) must not grow with what callers send."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def approx_bytes(value: object) -> int:
    """Shallow size of a key or value, plus its items for tuples (the memos here hold str and int tuples)."""
    size = sys.getsizeof(value)
    if isinstance(value, tuple):
        size += sum(sys.getsizeof(v) for v in value)
    return size


class BoundedCache(Generic[K, V]):
    """Least-recently-used entries are dropped once the keys and values together exceed `max_bytes`; an
    entry larger than `max_entry_bytes` is never kept."""

    ENTRY_OVERHEAD = 100  # the dict slot and the OrderedDict links, roughly

    def __init__(
        self,
        max_bytes: int,
        max_entry_bytes: int | None = None,
        size: Callable[[object], int] = approx_bytes,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes if max_entry_bytes is not None else max_bytes // 64
        self._size = size
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: K, value: V) -> None:
        cost = self._size(key) + self._size(value) + self.ENTRY_OVERHEAD
        if cost > self.max_entry_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, cost)
            self._bytes += cost
            while self._bytes > self.max_bytes and self._entries:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def pop(self, key: K) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def memo(self, compute: Callable[[K], V]) -> Callable[[K], V]:
        def cached(key: K) -> V:
            value = self.get(key)
            if value is None:
                value = compute(key)
                self.put(key, value)
            return value

        return cached

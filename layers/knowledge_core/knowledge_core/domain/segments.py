"""When a full-text index's segments are worth merging: one rule for every backend.

Both backends store the passages index log-structured: every write adds a segment and background merges keep
a few of each size, so an index written in many batches is read as tens of segments, each looked up for every
query term. Merging them down makes searches faster (SQLite's FTS5: 0.74x the raw top-k at 10k passages;
OpenSearch at 1M passages merged into one segment: BM25 p50 0.79-0.82x and hybrid 0.63-0.66x the index as
written; docs/benchmarks.md).

Merging rewrites the index, so it is worth it only when the segments beside the ones a merge would keep hold
a real share of them: a few small writes after a compaction never rewrite a large index."""

from __future__ import annotations

import math
from collections.abc import Sequence

FRAGMENTED_SHARE = 0.05
# Lucene's tiered merge policy never merges into a segment above this (OpenSearch's default
# `index.merge.policy.max_merged_segment`): a shard merged to fewer, larger segments could no longer be merged
# by it after later writes, so a compaction keeps one segment per started 5 GiB of the shard.
MAX_SEGMENT_BYTES = 5 * 1024**3


def target_segments(shard_bytes: int) -> int:
    """How many segments a compaction merges one shard of `shard_bytes` into: one per started 5 GiB."""
    return max(1, math.ceil(shard_bytes / MAX_SEGMENT_BYTES))


def fragmented(sizes: Sequence[int] | None, keep: int = 1) -> bool:
    """Worth compacting: the segments beside the `keep` largest hold at least FRAGMENTED_SHARE of their size
    (`sizes`: one shard's segments, in pages or bytes; None or one segment: not fragmented)."""
    if not sizes or len(sizes) <= keep:
        return False
    ordered = sorted(sizes, reverse=True)
    return sum(ordered[keep:]) >= FRAGMENTED_SHARE * sum(ordered[:keep])

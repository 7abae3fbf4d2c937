"""Compacting the passages index on a real OpenSearch node (A-SEARCH): writes in many refreshed
requests leave it in many segments; `index_states` reads them (primary shards, searchable segments) and the
rule of `domain.segments`; `compact` starts a background force merge to the target and returns at once;
searches answer the same throughout and after; an index at its target is left alone."""

from __future__ import annotations

import time

from knowledge_core.adapters.opensearch import OpenSearchBackend
from knowledge_core.ports import IndexState

from tests.integration.opensearch_kit import DOCS, row_ids, top_doc


def _settled(backend: OpenSearchBackend, timeout_s: float = 120.0) -> IndexState:
    deadline = time.monotonic() + timeout_s
    while True:
        [state] = backend.index_states()
        if (not state.merging and state.segments == state.target_segments) or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def test_a_search_compaction_merges_the_segments_and_changes_no_answer(
    opensearch_url: str, index_prefix: str
) -> None:
    backend = OpenSearchBackend(opensearch_url, index_prefix=index_prefix)
    assert backend.index_states() == []  # not prepared: nothing to show, no error
    assert backend.compact() is False
    backend.prepare()
    for doc in DOCS:  # one refreshed request each: one segment each
        backend.put_documents([doc])
    [state] = backend.index_states()
    assert state.index == backend.passages_index and state.shards == 1 and state.target_segments == 1
    assert state.segments >= 3 and state.fragmented and state.size_bytes > 0
    rows = row_ids(backend)
    answers = {q: top_doc(backend, q) for q in ("promote standby", "heartbeat seconds", "safety valve")}

    assert backend.compact() is True  # returns at once; the node merges in the background
    state = _settled(backend)
    assert (state.segments, state.fragmented, state.merging) == (1, False, False)
    assert row_ids(backend) == rows
    assert {q: top_doc(backend, q) for q in answers} == answers
    assert backend.compact() is False and backend.compact(force=True) is False  # at its target

    backend.put_documents([DOCS[0].model_copy(update={"doc_id": "late"})])  # one more segment
    [state] = backend.index_states()
    assert state.segments == 2
    assert backend.compact(force=True) is True  # an operator's: whenever above the target
    assert _settled(backend).segments == 1


def test_a_search_compaction_of_two_shards_leaves_one_segment_each(
    opensearch_url: str, index_prefix: str
) -> None:
    """`KB_OPENSEARCH_PASSAGE_SHARDS=2`: segments and their target are counted over the primary shards, and
    a compaction merges each shard to its own target (the index_prefix fixture drops the two-shard index)."""
    backend = OpenSearchBackend(opensearch_url, index_prefix=index_prefix, passage_shards=2)
    backend.prepare()
    for doc in DOCS:  # one refreshed request each: a segment in each shard it wrote
        backend.put_documents([doc])
    [state] = backend.index_states()
    assert state.shards == 2 and state.target_segments == 2 and state.segments > 2
    answers = {q: top_doc(backend, q) for q in ("promote standby", "safety valve")}
    assert backend.compact(force=True) is True
    state = _settled(backend)
    assert (state.segments, state.merging) == (2, False)
    assert {q: top_doc(backend, q) for q in answers} == answers

"""Hits are citable as returned on every backend (K-PIPE, SPEC §3.9): a search right after
a write that disables, deletes or re-shares a document away from the reader never shows it — the OpenSearch
backend no longer reads the documents back (`live_hits`: its passage rows carry the document's status,
ACL and stored version and are rewritten in the same refreshed bulk), so this is checked without
any `_mget` of the search, and the hit's version is the stored document's (its ref reads)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.contract.conftest import World, doc

ROUNDS = 8


@contextmanager
def _requests(world: World) -> Iterator[list[str]]:
    """The OpenSearch requests made meanwhile (none recorded on the embedded backend)."""
    calls: list[str] = []
    if world.c.settings.search_backend != "opensearch":
        yield calls
        return
    transport = world.c.backend.client.transport  # type: ignore[attr-defined]
    perform = transport.perform_request

    def counted(method: str, url: str, *args: object, **kwargs: object) -> object:
        calls.append(url.split("?")[0].rsplit("/", 1)[-1])
        return perform(method, url, *args, **kwargs)

    transport.perform_request = counted
    try:
        yield calls
    finally:
        transport.perform_request = perform


def _found(world: World, word: str) -> list[str]:
    """The titles a search finds; the search reads no document (one `_msearch` on OpenSearch)."""
    with _requests(world) as calls:
        titles = [h["title"] for h in world.search(word, limit=3)["hints"]]
    assert calls in ([], ["_msearch"]), calls
    return titles


def test_k_pipe_opensearch_hits_live_without_mget(world: World) -> None:
    """Each round: a fresh document is found; disabled, it is not (at once, no wait); enabled again, found;
    re-shared to another tenant only, not found; deleted, not found — and no search reads a document."""
    (key,) = world.publish({"kit": {"topK": 5, "minScore": 0}})
    admin = world.c.admin
    for n in range(ROUNDS):
        word = f"zebrafinch{n}x"
        name, title = f"live-{n}", f"Live {n}"
        world.ingest(doc(key, name, title, f"The {word} gearbox needs grease every {n} hours."))
        assert _found(world, word) == [title]
        admin.set_document_status(key, name, "disabled")
        assert _found(world, word) == []
        admin.set_document_status(key, name, "ready")
        assert _found(world, word) == [title]
        world.ingest(
            doc(key, name, f"Live {n}", f"The {word} gearbox needs grease every {n} hours.", tenant="t2")
        )
        assert _found(world, word) == []
        admin.delete_document(key, name)
        assert _found(world, word) == []


def test_k_pipe_hit_carries_the_stored_version(world: World) -> None:
    """The version a hit (and so its ref) binds is the stored document's, after every kind of write."""
    (key,) = world.publish({"kit": {"topK": 5, "minScore": 0}})
    first = doc(key, "v", "Versioned", "The okapi gearbox needs grease.")
    world.ingest(first)
    hint = world.search("okapi gearbox", limit=1)["hints"][0]
    assert world.read(hint["ref"])["content"] == first.body
    shared = doc(key, "v", "Versioned", "The okapi gearbox needs grease.", shared_tenants=["partner"])
    world.ingest(shared)
    assert first.version != shared.version
    hint = world.search("okapi gearbox", limit=1)["hints"][0]
    assert world.read(hint["ref"])["content"] == shared.body  # bound to the new version: it reads

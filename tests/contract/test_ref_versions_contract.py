"""Any change of what is stored is an update (SPEC §1, A-REF), on every backend: a ref binds the
document's stored version (revision, ACL, structured source and metadata), so after a re-ingest that
changes only the structured source or the metadata, or an ACL change that still admits the reader, the old
ref answers 409 `knowledge_changed` — never the newer state under the old ref — while an identical
re-write keeps it."""

from __future__ import annotations

import pytest
from knowledge_core.domain.errors import KnowledgeChanged

from tests.contract.conftest import World, doc

TITLE, BODY = "Quagga maintenance", "Grease the quagga gearbox every 400 hours; check the belt."


def _ref(world: World) -> str:
    [hint] = world.search("quagga gearbox", limit=1)["hints"]
    return hint["ref"]


def test_a_ref_identical_rewrite_keeps_the_ref(world: World) -> None:
    (key,) = world.publish({"kit": {}})
    world.ingest(doc(key, "q", TITLE, BODY))
    ref = _ref(world)
    world.ingest(doc(key, "q", TITLE, BODY))
    assert world.read(ref)["content"] == BODY


def test_a_ref_structured_source_change_answers_409(world: World) -> None:
    (key,) = world.publish({"kit": {}})
    world.ingest(doc(key, "q", TITLE, BODY))
    ref = _ref(world)
    moved = doc(key, "q", TITLE, BODY).model_copy(update={"structured_source": {"uri": "manuals/q.md"}})
    world.ingest(moved)
    with pytest.raises(KnowledgeChanged):
        world.read(ref)
    assert world.read(_ref(world))["content"] == BODY  # a new search gives a ref that reads


def test_a_ref_acl_change_that_still_admits_the_reader_answers_409(world: World) -> None:
    (key,) = world.publish({"kit": {}})
    world.ingest(doc(key, "q", TITLE, BODY))
    ref = _ref(world)
    world.ingest(doc(key, "q", TITLE, BODY, shared_tenants=["partner"]))
    with pytest.raises(KnowledgeChanged):
        world.read(ref)
    assert world.read(_ref(world))["content"] == BODY


def test_a_ref_metadata_change_answers_409(world: World) -> None:
    """SPEC §1: metadata is stored, so changing it alone is an update an old ref sees."""
    (key,) = world.publish({"kit": {}})
    world.ingest(doc(key, "q", TITLE, BODY).model_copy(update={"metadata": {"team": "pumps"}}))
    ref = _ref(world)
    world.ingest(doc(key, "q", TITLE, BODY).model_copy(update={"metadata": {"team": "valves"}}))
    with pytest.raises(KnowledgeChanged):
        world.read(ref)
    assert world.read(_ref(world))["content"] == BODY


def test_a_ref_identical_rewrite_with_metadata_keeps_the_ref(world: World) -> None:
    (key,) = world.publish({"kit": {}})
    tagged = doc(key, "q", TITLE, BODY).model_copy(update={"metadata": {"team": "pumps", "year": 2024}})
    world.ingest(tagged)
    ref = _ref(world)
    world.ingest(doc(key, "q", TITLE, BODY).model_copy(update={"metadata": {"year": 2024, "team": "pumps"}}))
    assert world.read(ref)["content"] == BODY

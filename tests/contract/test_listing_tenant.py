"""SPEC §1 default tenant, on every backend: a source's document listing names each document's own tenant
(`kb doc list`, the console), shared tenants aside."""

from __future__ import annotations

from tests.contract.conftest import World, doc


def test_p4_document_listing_names_each_documents_tenant(world: World):
    (key,) = world.publish({"tenanted": {}})
    world.ingest(
        doc(key, "mine", "Mine", "first body", tenant="default"),
        doc(key, "shared", "Shared", "second body", tenant="tenant-b", shared_tenants=["default"]),
    )
    listed = world.c.admin.list_documents(key)
    assert [(d.doc_id, d.tenant) for d in listed.documents] == [("mine", "default"), ("shared", "tenant-b")]

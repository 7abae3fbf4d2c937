"""I-INGEST, F-FILTER: metadata key quotas on the embedded backend. Every distinct metadata key is a field of
the search index's shared mapping, so a source, and a tenant across its sources, may hold at most a quota of
distinct keys: the document that would pass it is refused at write time with a typed error naming the
limit, and nothing of it is stored; documents with keys already held are written as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from knowledge_core.bootstrap import Container
from knowledge_core.domain.admin_wire import IngestionJobRequest
from knowledge_core.domain.errors import InvalidRequest
from knowledge_core.domain.models import Document, DocumentAcl, SourceDefinition
from knowledge_core.domain.wire import parse_request
from knowledge_core.settings import Settings

from tests.conftest import FakeClock, embedded_container

SOURCE, OTHER = "manuals@1.0.0", "policies@1.0.0"


@pytest.fixture
def c(tmp_path: Path, clock: FakeClock) -> Container:
    container = embedded_container(
        tmp_path, clock, ingest_directories=True, metadata_keys_per_source=4, metadata_keys_per_tenant=6
    )
    for key in (SOURCE, OTHER):
        id_, version = key.split("@")
        container.admin.publish_source(SourceDefinition.model_validate({"id": id_, "version": version}))
    return container


def doc(doc_id: str, keys: list[str], source: str = SOURCE, tenant: str = "acme") -> Document:
    return Document(
        source_key=source,
        doc_id=doc_id,
        title=doc_id,
        body=f"pump valve torque {doc_id}",
        acl=DocumentAcl(tenant=tenant),
        metadata={k: f"v-{k}" for k in keys},
    )


def job(c: Container, documents: list[dict], source: str = SOURCE) -> dict[str, str]:
    """Run an inline job to its end: the errors by doc id."""
    body = {
        "documents": [{"acl": {"tenant": "acme"}, "title": d["doc_id"], "body": "b", **d} for d in documents]
    }
    accepted = c.ingestion.submit(source, parse_request(IngestionJobRequest, json.dumps(body)))
    assert c.ingestion.work("w") == accepted.job_id
    status = c.ingestion.status(source, accepted.job_id)
    assert status.state == "completed"
    return {e.doc_id: e.code for e in status.errors}


def test_i_ingest_a_put_past_the_source_key_quota_is_refused_and_stores_nothing(c: Container) -> None:
    c.admin.put_documents([doc("first", ["region", "year", "site"])])
    with pytest.raises(InvalidRequest) as refused:
        c.admin.put_documents([doc("wide", ["region", "owner", "shift"])])
    assert refused.value.status == 400 and refused.value.field == "metadata"
    assert refused.value.message == "metadata: at most 4 distinct keys per source; this document adds 2 new"
    assert "v-owner" not in refused.value.message and "owner" not in refused.value.message
    assert c.backend.get_document(SOURCE, "wide") is None
    assert c.backend.metadata_keys(source_key=SOURCE) == {"region", "year", "site"}


def test_i_ingest_rewriting_with_keys_already_held_is_never_refused(c: Container) -> None:
    c.admin.put_documents([doc("first", ["region", "year", "site", "owner"])])  # the quota, reached
    c.admin.put_documents([doc("second", ["region", "site"]), doc("first", ["year", "owner"])])
    assert c.backend.get_document(SOURCE, "second") is not None
    assert c.backend.get_document(SOURCE, "first").metadata == {"year": "v-year", "owner": "v-owner"}
    c.admin.put_documents([doc("plain", [])])  # no metadata: nothing counted
    assert job(c, [{"doc_id": "again", "metadata": {"region": "eu", "owner": "ops"}}]) == {}


def test_i_ingest_a_bulk_with_one_document_past_the_quota_writes_none_of_it(c: Container) -> None:
    """Bad input loses nothing and writes nothing: the bulk is refused whole, naming the document; keys the
    earlier documents of the bulk bring count against the later ones."""
    bulk = [doc("a", ["region", "year"]), doc("b", ["site"]), doc("c", ["owner", "shift"])]
    with pytest.raises(InvalidRequest) as refused:
        c.admin.put_documents(bulk)
    assert refused.value.field == "documents[2].metadata"
    assert refused.value.message.startswith("documents[2].metadata: at most 4 distinct keys per source")
    assert all(c.backend.get_document(SOURCE, d) is None for d in ("a", "b", "c"))


def test_i_ingest_a_job_document_past_the_quota_fails_typed_and_the_job_goes_on(c: Container) -> None:
    errors = job(
        c,
        [
            {"doc_id": "a", "metadata": {"region": "eu", "year": 2024, "site": "p7"}},
            {"doc_id": "wide", "metadata": {"owner": "ops", "shift": "night"}},
            {"doc_id": "c", "metadata": {"region": "us", "owner": "qa"}},  # one new key: the fourth
        ],
    )
    assert errors == {"wide": "too_many_metadata_keys"}
    assert c.backend.get_document(SOURCE, "wide") is None
    assert c.backend.get_document(SOURCE, "c") is not None
    assert c.backend.metadata_keys(source_key=SOURCE) == {"region", "year", "site", "owner"}


def test_i_ingest_one_sidecar_file_cannot_take_the_source_past_its_quota(
    c: Container, tmp_path: Path
) -> None:
    """A sidecar is enough to bring many keys: its document fails, the directory's other files are written."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ok.md").write_text("# OK\n\npump seals", encoding="utf-8")
    (folder / "ok.md.metadata.json").write_text(json.dumps({"metadataAttributes": {"region": "eu"}}))
    (folder / "wide.md").write_text("# Wide\n\nvalve torque", encoding="utf-8")
    wide = {"metadataAttributes": {f"key{i}": f"value{i}" for i in range(30)}}
    (folder / "wide.md.metadata.json").write_text(json.dumps(wide))
    body = {"directory": str(folder), "acl": {"tenant": "acme"}, "doc_id_prefix": "d"}
    accepted = c.ingestion.submit(SOURCE, parse_request(IngestionJobRequest, json.dumps(body)))
    assert c.ingestion.work("w") == accepted.job_id
    status = c.ingestion.status(SOURCE, accepted.job_id)
    assert status.state == "completed" and status.counts.done == 1
    assert [e.code for e in status.errors] == ["too_many_metadata_keys"]
    assert c.backend.metadata_keys(source_key=SOURCE) == {"region"}


def test_i_ingest_a_tenant_quota_counts_its_keys_across_sources(c: Container) -> None:
    c.admin.put_documents([doc("a", ["region", "year", "site", "owner"])])
    c.admin.put_documents([doc("b", ["shift", "line"], source=OTHER)])  # the tenant's sixth key
    with pytest.raises(InvalidRequest) as refused:
        c.admin.put_documents([doc("c", ["grade"], source=OTHER)])
    assert refused.value.message == "metadata: at most 6 distinct keys per tenant; this document adds 1 new"
    c.admin.put_documents([doc("c", ["grade"], source=OTHER, tenant="globex")])  # another tenant's own
    assert c.backend.metadata_keys(tenant="acme") == {"region", "year", "site", "owner", "shift", "line"}
    assert c.backend.metadata_keys(source_key=OTHER) == {"shift", "line", "grade"}


def test_i_ingest_metadata_key_quotas_are_settings_with_documented_defaults() -> None:
    env = Settings.from_env({"KB_METADATA_KEYS_PER_SOURCE": "10", "KB_METADATA_KEYS_PER_TENANT": "20"})
    assert (env.metadata_keys_per_source, env.metadata_keys_per_tenant) == (10, 20)
    page = (Path(__file__).parents[2] / "docs" / "metadata.md").read_text(encoding="utf-8")
    defaults = Settings()
    assert (
        f"`KB_METADATA_KEYS_PER_SOURCE` distinct keys (default {defaults.metadata_keys_per_source})" in page
    )
    assert f"`KB_METADATA_KEYS_PER_TENANT` (default {defaults.metadata_keys_per_tenant})" in page


class _MappedNode:
    """An OpenSearch client whose passages index maps three typed metadata fields (one key with a dot) and
    whose rows of the asked scope hold two of them; it keeps the search body it was sent."""

    def __init__(self) -> None:
        properties = {
            "meta_s": {"properties": {"region": {"type": "keyword"}}},
            "meta_n": {"properties": {"year": {"type": "double"}}},
            "meta_l": {"properties": {"team~name": {"type": "keyword"}}},
        }
        mapping = {"kb-passages-v9": {"mappings": {"properties": properties}}}
        self.indices = type("Indices", (), {"get_mapping": lambda _self, **_: mapping})()
        self.sent: list[dict] = []

    def search(self, index: str, body: dict, **_: object) -> dict:
        self.sent.append(body)
        counts = {"meta_s.region": 3, "meta_n.year": 0, "meta_l.team~name": 1}
        return {
            "aggregations": {
                "keys": {
                    "buckets": {
                        f: {"doc_count": counts[f]} for f in body["aggs"]["keys"]["filters"]["filters"]
                    }
                }
            }
        }


def test_i_ingest_opensearch_metadata_keys_are_the_mapped_fields_the_scope_holds() -> None:
    """On OpenSearch the keys in use come from the passages index's typed fields (shared by every source),
    narrowed to the rows of the source or tenant by one `exists` filter per field."""
    from knowledge_core.adapters.opensearch import OpenSearchBackend

    node = _MappedNode()
    backend = OpenSearchBackend("http://127.0.0.1:1", client=node)
    backend._ready = True  # the fake node has no index templates to put
    assert backend.metadata_keys(source_key=SOURCE) == {"region", "team.name"}
    assert backend.metadata_keys(tenant="acme") == {"region", "team.name"}
    by_source, by_tenant = node.sent
    assert by_source["size"] == 0 and by_source["query"] == {
        "bool": {"filter": [{"term": {"source_key": SOURCE}}]}
    }
    assert by_tenant["query"] == {"bool": {"filter": [{"term": {"acl_tenant": "acme"}}]}}
    assert by_source["aggs"]["keys"]["filters"]["filters"]["meta_l.team~name"] == {
        "exists": {"field": "meta_l.team~name"}
    }

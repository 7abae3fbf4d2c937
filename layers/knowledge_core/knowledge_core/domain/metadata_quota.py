"""Metadata key quotas (SPEC §8, I-INGEST). Every distinct metadata key is a field of the search index's
mapping, shared by every source and tenant (OpenSearch: one field per key and value type, against the
index's `index.mapping.total_fields.limit`, and deleting documents frees none), so one sidecar file could
take every field of a deployment. A source, and a tenant across its sources, may each hold at most a quota
of distinct keys among their stored documents: a document that would take either past it is refused at
write time, before anything of it is stored, with an error naming the limit. Re-writing documents with keys
already held costs nothing. Pure: the stored keys come from a callable the service passes (the backend)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .models import Document

DEFAULT_METADATA_KEYS_PER_SOURCE = 64
DEFAULT_METADATA_KEYS_PER_TENANT = 64


class StoredKeys(Protocol):
    """The distinct metadata keys of the stored documents of a source, or of a tenant (its own documents)."""

    def __call__(self, *, source_key: str | None = None, tenant: str | None = None) -> set[str]: ...


@dataclass(frozen=True)
class MetadataQuota:
    per_source: int = DEFAULT_METADATA_KEYS_PER_SOURCE
    per_tenant: int = DEFAULT_METADATA_KEYS_PER_TENANT


class MetadataQuotaExceeded(ValueError):
    """A document whose metadata keys would take its source or tenant past its quota; the message names
    the field and the limit, never a key or a value."""

    field = "metadata"

    def __init__(self, scope: str, limit: int, new: int) -> None:
        super().__init__(f"metadata: at most {limit} distinct keys per {scope}; this document adds {new} new")
        self.scope, self.limit, self.new = scope, limit, new


def metadata_quota_refusals(
    documents: Sequence[Document], quota: MetadataQuota, stored_keys: StoredKeys
) -> dict[int, MetadataQuotaExceeded]:
    """The documents (by index) that the quota refuses, in order: each admitted document's new keys count
    against the ones after it, a refused one's do not. The stored keys are read once per source and
    tenant, and only when a document brings metadata."""
    known: dict[tuple[str, str], set[str]] = {}

    def held(scope: str, name: str) -> set[str]:
        if (scope, name) not in known:
            found = stored_keys(source_key=name) if scope == "source" else stored_keys(tenant=name)
            known[(scope, name)] = set(found)
        return known[(scope, name)]

    refused: dict[int, MetadataQuotaExceeded] = {}
    for i, document in enumerate(documents):
        if not document.metadata:
            continue
        keys = set(document.metadata)
        scopes = [("source", document.source_key, quota.per_source)]
        if document.acl.tenant is not None:
            scopes.append(("tenant", document.acl.tenant, quota.per_tenant))
        for scope, name, limit in scopes:
            have = held(scope, name)
            new = keys - have
            if new and len(have) + len(new) > limit:
                refused[i] = MetadataQuotaExceeded(scope, limit, len(new))
                break
        else:
            for scope, name, _ in scopes:
                held(scope, name).update(keys)
    return refused

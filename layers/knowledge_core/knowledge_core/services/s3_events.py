"""S3 as a data source on AWS: the ingestion worker's messages besides job ids. An object created
under the deployment's prefix becomes a one-document job, an object removed deletes the document that
object made (and nothing else), and the scheduled full sync is a sync job over the whole prefix — the
safety net for an event lost or an object changed while notifications were off."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..domain.ingestion import JobSpec
from ..domain.metadata_sources import SIDECAR_SUFFIX, is_sidecar, sidecar_name
from ..domain.models import DocumentAcl
from ..domain.s3_source import ObjectEvent, S3Location, StoredObject, is_document_key, object_doc_id
from ..ports import SearchBackend
from .ingestion import IngestionService
from .s3_ingestion import S3Origin

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class S3Feed:
    """Which source the deployment's prefix feeds, under which doc_id prefix and for which tenant."""

    location: S3Location
    source_key: str
    doc_id_prefix: str
    tenant: str

    @property
    def acl(self) -> DocumentAcl:
        return DocumentAcl(tenant=self.tenant)


class S3Events:
    def __init__(self, feed: S3Feed, ingestion: IngestionService, origin: S3Origin, backend: SearchBackend):
        self._feed = feed
        self._ingestion = ingestion
        self._origin = origin
        self._backend = backend

    def full_sync(self) -> str:
        """A sync job over the whole prefix (deletes what left it: only documents this feed made)."""
        feed = self._feed
        documents = self._origin.job_documents(feed.location, feed.doc_id_prefix, feed.acl)
        uri = feed.location.uri
        spec = JobSpec(prefix=feed.doc_id_prefix, sync=True, tenant=feed.tenant, origin=uri)
        return self._ingestion.create(feed.source_key, documents, spec).job_id

    def handle(self, events: list[ObjectEvent]) -> int:
        """Apply object events; the number acted on (events for other buckets and keys outside the prefix
        are ignored: never another prefix touched). A sidecar created or removed re-ingests its file."""
        feed, acted = self._feed, 0
        mine = [
            e for e in events if e.bucket == feed.location.bucket and is_document_key(feed.location, e.key)
        ]
        created = [StoredObject(e.key, e.etag, e.size) for e in mine if e.kind == "created"]
        created += self._sidecar_files(events, {o.key for o in created})
        if created:
            listed = created + self._sidecars(created)
            documents = self._origin.documents(feed.location, feed.doc_id_prefix, feed.acl, listed)
            spec = JobSpec(prefix=feed.doc_id_prefix, tenant=feed.tenant, origin=feed.location.uri)
            self._ingestion.create(feed.source_key, documents, spec)
            acted += len(documents)
        for event in (e for e in mine if e.kind == "removed"):
            acted += self._remove(event.key)
        return acted

    def _sidecar_files(self, events: list[ObjectEvent], known: set[str]) -> list[StoredObject]:
        """The files whose sidecar an event created or removed (their metadata changed), as they are now:
        a file that is not there (or already in `known`) is left alone."""
        location, files = self._feed.location, []
        changed = [
            e.key.removesuffix(SIDECAR_SUFFIX)
            for e in events
            if e.bucket == location.bucket and is_sidecar(e.key)
        ]
        for key in dict.fromkeys(changed):
            if key in known or not is_document_key(location, key):
                continue
            head = self._origin.head(location.bucket, key)
            if head is not None:
                files.append(head)
        return files

    def _sidecars(self, files: list[StoredObject]) -> list[StoredObject]:
        """The sidecars of `files` that exist now (an event does not say whether a file has one)."""
        bucket = self._feed.location.bucket
        heads = (self._origin.head(bucket, sidecar_name(f.key)) for f in files)
        return [h for h in heads if h is not None]

    def _remove(self, key: str) -> int:
        """Delete the document this object made: same doc_id, its uri this very object, this tenant —
        unless the object is there again (events arrive out of order: a put after the delete wins)."""
        feed = self._feed
        if self._origin.exists(feed.location.bucket, key):
            return 0
        doc_id = object_doc_id(feed.location, feed.doc_id_prefix, key)
        stored = self._backend.get_document(feed.source_key, doc_id)
        made_here = (
            stored is not None
            and (stored.structured_source or {}).get("uri") == feed.location.object_uri(key)
            and stored.acl.tenant == feed.tenant
        )
        if not made_here:
            return 0
        return 1 if self._backend.delete_document(feed.source_key, doc_id) else 0

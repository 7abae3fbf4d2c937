"""OpenSearch search backend: passages and parent documents in two versioned indices, every selected
source searched in one `_msearch` round trip, hits collapsed to parent documents.

Indices (names start with `index_prefix`, default `kb`):
* `<prefix>-passages-v5`, alias `<prefix>-passages`: one row per passage (the same `split_structured` as
  the embedded backend) with the parent's title, revision, stored version (`version`, v4), status and ACL
  copied in for filtering;
  `title`, `headings` (the passage's heading path, v5) and `text` (the cited text) analysed like the
  embedded backend's `index_terms` (custom `kb_text` analyzer: CJK bigrams, English stop words, Snowball
  English stems), all copied into `content` (title + heading path + passage as one BM25 field, like the
  embedded backend's FTS5 row).
  With an embedder, each passage row also carries its vectors, one per model that covers its text
  (`vectors`: model id -> int8 as base64, not indexed; rows from before v3 have one, `vector` and
  `vector_model`), and each in the k-NN field of its model (`knn_<model id>`, a Lucene-engine HNSW
  `knn_vector` of bytes, inner product; `index.knn` is set at creation, v3).
* `<prefix>-documents-v2`, alias `<prefix>-documents`: the parent documents (title, body stored but not
  indexed, revision, status, ACL, structured source, passage count).
Both come from composable index templates named after the versioned index. The passages index has
`passage_shards` primary shards (`KB_OPENSEARCH_PASSAGE_SHARDS`, default 1), given when it is created; a
count other than one is part of its name (`<prefix>-passages-v5-s4`), so changing it moves the alias to a
new index as an upgrade does. `prepare` (deploy/admin time)
puts the templates, creates missing indices with their alias and moves an alias off an older version:
it copies the older index's rows into the new one, swaps the alias in one `_aliases` call and copies once
more what was written meanwhile (pause ingestion during an upgrade: a delete in that window may leave a
passage behind; the old index is left for the operator to delete). An older passages index cut by an
older splitter (before v4) is not copied but rebuilt: every stored document is re-split (and re-embedded)
from the documents index into the new index, the alias moves in one call, and the documents written
meanwhile are re-split once more — searches keep answering from the old index until the move.
Everything else goes through aliases.

Hits are citable as returned (`live_hits`, like the embedded backend): every write of a document — put,
status change, delete — changes its passage rows and its parent in one bulk request, and the write returns
only after a refresh of what it wrote (on the primary and every replica: `refresh=true` on a write of one
request, `_refresh` of the written indices after a larger one), so once a write is acknowledged no search
sees a passage row older than its document, and the row's status/ACL filters and its `version` are the
document's. A row without `version` (written by an older release during an upgrade) makes the retrieval
step check its hits against the documents (`_mget`) as before.

A model added after passages were indexed (a new embedder model, e.g. the multilingual one) gets its k-NN
field at `ensure_indices` (deploy/admin time, never the read path), and the passages without it are
backfilled there: those the embedder assigns the model (`models_for` of the text ingestion embeds: title,
heading path, passage) get its vector by bulk partial updates, BACKFILL_BATCH at a time (a stored vector of
the model is reused), each only if the row is unchanged since read. The fields still to backfill are
named in the passages mapping's `_meta` until done, so an interrupted backfill resumes at the next run
and a finished one is not repeated (the embedded backend's `_embed_missing`).

Search (domain.hybrid): per source a BM25 search (with the passage vectors in `_source`) and, when the
query has a vector, a filtered k-NN search on that model's field per query vector (same source, status,
ACL and metadata filters), all collapsed to parent documents, all in the one `_msearch`. With the mixed
design's evidence vector (the multilingual model under the question's own script's id) one more k-NN search
of it per source finds the EVIDENCE_DEPTH nearest documents (`ScriptEvidence.own`; never ranked); `other`
is the best hit of the dense search by the same model under the other script's id. With a translated
vector and no BM25 hit, each dense hit's passage gets its cosine with that vector (`dense_checks`, from the
stored vectors the k-NN hits carry: no extra request). Cosines are computed in process from the
stored int8 vectors, never across models; ranking is not the adapter's (services.retrieval fuses). A
node without the k-NN plugin (plain OpenSearch; Amazon OpenSearch Service has it) gets indices without
k-NN fields, and a k-NN search the node rejects leaves the BM25 candidates alone (logged once).

SigV4 (`es`, or `aoss` for OpenSearch Serverless) when the endpoint is on AWS; no auth on loopback.
opensearch-py (and boto3 for credentials) are imported where first needed, never at module import.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from ..domain.errors import SourceFailure
from ..domain.fusion import Hit
from ..domain.models import Document, DocumentAcl, DocumentState, Viewer, record_version, with_metadata
from ..domain.passages import (
    Passage,
    StoredPassage,
    document_passages,
    hit_source,
    indexed_text,
    page_starts_of,
    pages_of,
)
from ..domain.segments import fragmented, target_segments
from ..ports import (
    EVIDENCE_DEPTH,
    DocumentInfo,
    Embedder,
    IndexState,
    QueryAnalysis,
    ScriptEvidence,
    SearchBackend,
    SourceQuery,
    SourceResult,
    Vector,
    across_other,
)
from .embedding import (
    EmbeddingTimeout,
    cosines,
    document_vectors,
    matching,
    matching_cosines,
    passage_text,
)
from .opensearch_filters import (
    METADATA_PROPERTIES,
    METADATA_TEMPLATES,
    filter_query,
    mapped_metadata_fields,
    metadata_fields,
    metadata_keys_query,
)

logger = logging.getLogger(__name__)

PASSAGES_VERSION = "v5"  # v3: `index.knn` (a final setting) and a k-NN field per embedding model
# v4: the parent's stored `version` on every row (live hits); v5: structure-aware passages with heading
# paths. Rows of an index older than RESPLIT_BEFORE (the version that changed the splitter: keep
# it equal to the version number above when that change is the newest) are re-split from the documents
# index, not copied
RESPLIT_BEFORE = 5
DOCUMENTS_VERSION = "v2"
# Passages the k-NN search is asked for per wanted document (a document has several passages).
KNN_PASSAGES_PER_DOC = 4
# An index's default `index.max_result_window`: one search page never asks for more.
MAX_RESULT_WINDOW = 10_000
# After the node rejects a k-NN search, searches skip it this long before trying again.
DENSE_RETRY_S = 300.0
# Passages read, embedded and updated per request of a backfill of a model added later (`ensure_indices`).
BACKFILL_BATCH = 256
# The passages mapping's `_meta` key naming the k-NN fields whose backfill has not finished.
BACKFILL_PENDING = "kb_backfill_pending"
# One bulk request stays under the smallest Amazon OpenSearch Service HTTP payload limit (10 MiB).
BULK_MAX_BYTES = 8 * 1024 * 1024
_HIT_FIELDS = [
    "source_key",
    "doc_id",
    "title",
    "revision",
    "version",
    "text",
    "structured_source",
    "passage_no",
    "metadata",  # folded into the row's record version: the hit's stored version (models.with_metadata)
]
_VECTOR_FIELDS = ["vectors", "vector", "vector_model"]
CANDIDATES_DEPTH = 4  # passage_candidates reads per_doc x documents x this many passages in one query
_DOC_FIELDS = [
    "source_key",
    "doc_id",
    "title",
    "body",
    "revision",
    "status",
    "acl",
    "structured_source",
    "metadata",
]
_STATE_FIELDS = ["source_key", "doc_id", "revision", "status", "acl", "structured_source", "metadata"]


# The embedded backend's `analyzer.index_terms` in Lucene terms: CJK runs as bigrams (a lone character
# stays a unigram), Lucene's English stop set, Snowball English (Porter2) stems.
ANALYSIS: dict[str, Any] = {
    "filter": {
        "kb_cjk_bigram": {"type": "cjk_bigram", "output_unigrams": False},
        "kb_english_stop": {"type": "stop", "stopwords": "_english_"},
        "kb_english_stem": {"type": "snowball", "language": "English"},
    },
    "analyzer": {
        "kb_text": {
            "type": "custom",
            "tokenizer": "standard",
            "filter": ["cjk_width", "lowercase", "kb_cjk_bigram", "kb_english_stop", "kb_english_stem"],
        }
    },
}
# Extra weight of a title match on top of `content` (which already holds the title), tuned on SciFact train
# and the demo queries (docs/archive/quality-log.md).
TITLE_BOOST = 0.25


def _analysed(copy_to: str | None = None) -> dict[str, Any]:
    field: dict[str, Any] = {"type": "text", "analyzer": "kb_text"}
    if copy_to:
        field["copy_to"] = copy_to
    return field


_INDEX_SETTINGS = {"number_of_shards": 1, "auto_expand_replicas": "0-1"}
_PASSAGE_SETTINGS = {**_INDEX_SETTINGS, "analysis": ANALYSIS}
PASSAGE_MAPPINGS: dict[str, Any] = {
    "dynamic": "strict",
    "dynamic_templates": METADATA_TEMPLATES,  # typed metadata fields (opensearch_filters)
    "properties": {
        "source_key": {"type": "keyword"},
        "doc_id": {"type": "keyword"},
        "doc_key": {"type": "keyword"},  # parent id within the index: the collapse key
        "passage_no": {"type": "integer"},
        "title": _analysed(copy_to="content"),
        "headings": _analysed(copy_to="content"),  # the passage's heading path (v5), matched, not cited
        "text": _analysed(copy_to="content"),
        "content": _analysed(),  # title + passage, one BM25 length (not in _source)
        "revision": {"type": "keyword", "index": False},
        # the parent's models.record_version (v4), which the row's metadata completes to its stored version:
        # a hit's ref binds it without reading the document
        "version": {"type": "keyword", "index": False, "doc_values": False},
        "status": {"type": "keyword"},
        "acl_tenant": {"type": "keyword"},
        "acl_open": {"type": "boolean"},  # no subjects and no groups: the whole tenant
        "acl_subjects": {"type": "keyword"},
        "acl_groups": {"type": "keyword"},
        "structured_source": {"type": "object", "enabled": False},
        "vectors": {"type": "object", "enabled": False},  # model id -> int8 unit vector, base64
        **{  # one vector of one model: rows written before v3 (read, and copied by an upgrade)
            "vector": {"type": "binary"},
            "vector_model": {"type": "keyword", "index": False, "doc_values": False},
        },
        **METADATA_PROPERTIES,
    },
}
DOCUMENT_MAPPINGS: dict[str, Any] = {
    "dynamic": "strict",
    "dynamic_templates": METADATA_TEMPLATES,
    "properties": {
        "source_key": {"type": "keyword"},
        "doc_id": {"type": "keyword"},
        "title": {"type": "text", "analyzer": "cjk"},
        "body": {"type": "text", "index": False},
        "revision": {"type": "keyword"},
        "status": {"type": "keyword"},
        "acl": {"type": "object", "enabled": False},
        "structured_source": {"type": "object", "enabled": False},
        "passage_count": {"type": "integer"},
        "updated_at": {"type": "date", "format": "epoch_second"},
        **METADATA_PROPERTIES,
    },
}


def doc_key(source_key: str, doc_id: str) -> str:
    """The parent document's `_id`: a digest, so any source key / doc id pair is a safe, bounded id."""
    return hashlib.sha256(f"{source_key}\0{doc_id}".encode()).hexdigest()[:40]


def _passage_id(parent: str, number: int) -> str:
    return f"{parent}-{number}"


def knn_field(model: str) -> str:
    """The passages index's k-NN field of one embedding model."""
    return "knn_" + re.sub(r"[^0-9A-Za-z]", "_", model)


def knn_mapping(dimensions: int) -> dict[str, Any]:
    """Lucene HNSW over int8 vectors (the only engine without native libraries); inner product ranks
    like the in-process cosine (int8 dot / 127²)."""
    return {
        "type": "knn_vector",
        "dimension": dimensions,
        "data_type": "byte",
        "method": {"name": "hnsw", "engine": "lucene", "space_type": "innerproduct"},
    }


def knn_bytes(vector: Vector) -> list[int]:
    """A vector's int8 components as the signed bytes of a k-NN `byte` field."""
    return [b - 256 if b > 127 else b for b in vector.data]


def knn_value(vector: Vector) -> dict[str, Any]:
    """A vector as its model's k-NN field."""
    return {knn_field(vector.model): knn_bytes(vector)}


def knn_values(vectors: Iterable[Vector], fields: Collection[str]) -> dict[str, Any]:
    """The k-NN fields of `vectors` whose field is among `fields` (the ones the index maps)."""
    return {
        k: v for vector in vectors if knn_field(vector.model) in fields for k, v in knn_value(vector).items()
    }


def _no_knn(exc: Exception) -> bool:
    """The cluster refused a k-NN setting or field: it has no k-NN plugin (or the index predates it)."""
    text = str(getattr(exc, "info", "")) + str(getattr(exc, "error", ""))
    return "knn" in text.lower()


def node_urls(url: str) -> list[str]:
    """The nodes of `KB_OPENSEARCH_URL`: one URL, or several comma-separated (a self-managed cluster): the
    client sends each request to one of them and, when a node went away, retries on the next."""
    return [u.strip().rstrip("/") for u in url.split(",") if u.strip()]


def aws_service(url: str) -> str | None:
    """`aoss` for OpenSearch Serverless, `es` for an Amazon OpenSearch Service domain, None elsewhere."""
    host = (urlsplit(url).hostname or "").lower()
    if host.endswith(".aoss.amazonaws.com"):
        return "aoss"
    if ".es.amazonaws.com" in host:
        return "es"
    return None


def _failure(exc: Exception) -> SourceFailure:
    """A transport exception as the kind of source failure it is."""
    from opensearchpy.exceptions import ConnectionTimeout, TransportError

    if isinstance(exc, ConnectionTimeout):
        return SourceFailure("timeout", "opensearch timed out")
    if isinstance(exc, TransportError) and exc.status_code == 429:
        return SourceFailure("throttled", "opensearch throttled the request")
    return SourceFailure("unavailable", f"opensearch: {type(exc).__name__}")


def _sub_failure(response: dict[str, Any]) -> SourceFailure | None:
    """The failure of one `_msearch` sub-response, if any (an error, a timeout, or failed shards)."""
    if "error" in response:
        status = response.get("status")
        return SourceFailure("throttled" if status == 429 else "unavailable", f"opensearch status {status}")
    if response.get("timed_out"):
        return SourceFailure("timeout", "search timed out")
    if response.get("_shards", {}).get("failed"):
        return SourceFailure("unavailable", "shard failures")
    return None


def source_filter(source_key: str) -> dict[str, Any]:
    """The source's ready passages, as one bool query of its own (and `acl_filter` another): the node's query
    cache can keep each as a bitset per large segment, this one shared by every viewer and the ACL one by
    every source, while bare term clauses are never cached (Lucene's policy) and are checked one by one
    against every candidate passage: 13–25 % of BM25's time at 1M passages (docs/search-at-scale.md)."""
    return {"bool": {"filter": [{"term": {"source_key": source_key}}, {"term": {"status": "ready"}}]}}


def acl_filter(viewer: Viewer) -> dict[str, Any]:
    """`DocumentAcl.visible_to` as a query: one of the document's tenants (`acl_tenant` holds its own and
    the ones it is shared with; a document without one matches no viewer), and open or naming the
    subject/a group."""
    audience: list[dict[str, Any]] = [
        {"term": {"acl_open": True}},
        {"term": {"acl_subjects": viewer.subject}},
    ]
    if viewer.groups:
        audience.append({"terms": {"acl_groups": list(viewer.groups)}})
    return {
        "bool": {
            "filter": [
                {"term": {"acl_tenant": viewer.tenant}},
                {"bool": {"should": audience, "minimum_should_match": 1}},
            ]
        }
    }


def text_query(text: str) -> dict[str, Any]:
    """BM25 of the title + passage as one field (an OR of terms, like the embedded backend's match
    expression) plus a light title match; every term is scored once per field (no duplicate sub-fields)."""
    return {
        "bool": {
            "should": [
                {"match": {"content": {"query": text}}},
                {"match": {"title": {"query": text, "boost": TITLE_BOOST}}},
            ],
            "minimum_should_match": 1,
        }
    }


class OpenSearchBackend(SearchBackend):
    # Hits carry their document's status, ACL and version, as fresh as the document (module docstring).
    live_hits = True

    def __init__(
        self,
        url: str,
        region: str = "us-east-1",
        *,
        index_prefix: str = "kb",
        timeout_s: float = 10.0,
        max_retries: int = 1,
        client: Any = None,
        embedder: Embedder | None = None,
        passage_shards: int = 1,
        embedding_seconds: float | None = None,
    ) -> None:
        """`embedding_seconds`: the deadline of one write's embedding (None: none); past it the write is
        refused (`rejected`, cause `embedding_timeout`) before anything of it is sent."""
        if passage_shards < 1:
            raise ValueError("passage_shards must be at least 1")
        self._url = url.rstrip("/")
        self._embedder = embedder
        self._embedding_seconds = embedding_seconds
        self._region = region
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._client_obj = client
        self._client_lock = threading.Lock()
        self._ready = False
        self._knn_fields: frozenset[str] = frozenset()  # mapped in the passages index (`ensure_indices`)
        self._dense_off_until = 0.0  # the node rejected a k-NN search: BM25 candidates only until then
        self._dense_warned = False
        self.index_prefix = index_prefix
        # The passages template is per version; the index name also carries a shard count other than one,
        # so changing `passage_shards` is an index move like a version upgrade (`ensure_indices`).
        self.passages_template = passages_index_name(index_prefix)
        self.passage_shards = passage_shards
        self.passages_index = passages_index_name(index_prefix, passage_shards)
        self.documents_index = f"{index_prefix}-documents-{DOCUMENTS_VERSION}"
        self.passages_alias = f"{index_prefix}-passages"
        self.documents_alias = f"{index_prefix}-documents"

    # --- client and indices -------------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client_obj is None:
            with self._client_lock:
                if self._client_obj is None:
                    self._client_obj = self._make_client()
        return self._client_obj

    def _make_client(self) -> Any:
        from opensearchpy import OpenSearch

        kwargs: dict[str, Any] = {
            "timeout": self._timeout_s,
            "max_retries": self._max_retries,
            "retry_on_timeout": False,
            "pool_maxsize": 16,
            "http_compress": False,
        }
        service = aws_service(self._url)
        if service:
            import boto3
            from opensearchpy import Urllib3AWSV4SignerAuth

            host = urlsplit(self._url).hostname or ""
            parts = host.split(".")
            # search-x.<region>.es.amazonaws.com / x.<region>.aoss.amazonaws.com carry their region.
            region = parts[-4] if len(parts) >= 4 else self._region
            kwargs["http_auth"] = Urllib3AWSV4SignerAuth(boto3.Session().get_credentials(), region, service)
        return OpenSearch(hosts=node_urls(self._url), **kwargs)

    def knn_properties(self) -> dict[str, dict[str, Any]]:
        """The k-NN field of each of the embedder's models."""
        embedder = self._embedder
        if embedder is None:
            return {}
        return {knn_field(m): knn_mapping(embedder.dimensions(m)) for m in embedder.models}

    def index_templates(self, knn: bool = True) -> dict[str, dict[str, Any]]:
        """Template name -> body of the versioned composable index templates (`knn`: with `index.knn`
        and the models' k-NN fields, for a node with the k-NN plugin)."""

        def template(
            index: str, version: str, settings: dict[str, Any], mappings: dict[str, Any]
        ) -> dict[str, Any]:
            return {
                "index_patterns": [f"{index}*"],
                "priority": 100,
                "template": {"settings": settings, "mappings": mappings},
                "_meta": {"owner": "agent-knowledge", "version": version},
            }

        passage_settings, passage_mappings = _PASSAGE_SETTINGS, PASSAGE_MAPPINGS
        if knn:
            passage_settings = {**_PASSAGE_SETTINGS, "knn": True}
            properties = {**PASSAGE_MAPPINGS["properties"], **self.knn_properties()}
            passage_mappings = {**PASSAGE_MAPPINGS, "properties": properties}
        return {
            self.passages_template: template(
                self.passages_template, PASSAGES_VERSION, passage_settings, passage_mappings
            ),
            self.documents_index: template(
                self.documents_index, DOCUMENTS_VERSION, _INDEX_SETTINGS, DOCUMENT_MAPPINGS
            ),
        }

    def prepare(self) -> None:
        self.ensure_indices()

    def ensure_indices(self, timeout_s: float | None = None) -> None:
        """Put the templates, create missing indices, move an alias off an older version, add the k-NN
        fields of new models (idempotent, once per process). Deploy/admin time only (`prepare`,
        ingestion): the read path never writes schema (S2)."""
        if self._ready:
            return
        from opensearchpy.exceptions import NotFoundError, RequestError

        client, timeout = self.client, timeout_s or self._timeout_s
        knn = True
        for name, body in self.index_templates(knn=True).items():
            try:
                client.indices.put_index_template(name=name, body=body, request_timeout=timeout)
            except RequestError as exc:  # no k-NN plugin: `index.knn` is an unknown setting
                if not (name == self.passages_template and _no_knn(exc)):
                    raise
                self._dense_unavailable(exc.error)
                knn, body = False, self.index_templates(knn=False)[name]
                client.indices.put_index_template(name=name, body=body, request_timeout=timeout)
        # The k-NN fields before any move (a new index's copy has the old ones): the backfill's baseline.
        mapped_before = self._mapped_knn_fields(timeout) if knn and self._embedder is not None else None
        for index, alias in (
            (self.passages_index, self.passages_alias),
            (self.documents_index, self.documents_alias),
        ):
            try:
                current = sorted(client.indices.get_alias(name=alias, request_timeout=timeout))
            except NotFoundError:
                current = []
            if current and index not in current:
                self._clear_retired(index, alias, timeout)
            if index not in current:
                self._create_index(index, alias if not current else None, timeout)
            if current and index not in current:
                self._move_alias(current, index, alias)
            if current:  # an index made before metadata filters (a new one has them from its template)
                self._map_metadata(alias, timeout)
        self._knn_fields = frozenset()
        if knn and self._embedder is not None:
            properties = self.knn_properties()
            # Passages of a model's field new to the index (or of one an interrupted backfill left) get its
            # vectors; the pending mark goes in with the fields, so an interruption resumes at the next run.
            pending: list[str] = []
            if mapped_before is not None:
                fields, left = mapped_before
                pending = sorted((set(properties) - fields) | (left & set(properties)))
            mapping: dict[str, Any] = {"properties": properties}
            if pending:
                mapping["_meta"] = {BACKFILL_PENDING: pending}
            try:  # a model added since the index was made gets its field (a no-op when present)
                client.indices.put_mapping(index=self.passages_alias, body=mapping, request_timeout=timeout)
                self._knn_fields = frozenset(properties)
            except RequestError as exc:
                if not _no_knn(exc):
                    raise
                self._dense_unavailable(exc.error)
                pending = []
            if pending:
                self._backfill_vectors(pending)
                client.indices.put_mapping(
                    index=self.passages_alias,
                    body={"_meta": {BACKFILL_PENDING: []}},
                    request_timeout=timeout,
                )
        self._ready = True

    def _mapped_knn_fields(self, timeout: float) -> tuple[set[str], set[str]] | None:
        """The k-NN fields every index behind the passages alias maps, and those an interrupted backfill
        left pending (`_meta`); None when there is no passages index yet (nothing to backfill)."""
        from opensearchpy.exceptions import NotFoundError

        try:
            found = self.client.indices.get_mapping(index=self.passages_alias, request_timeout=timeout)
        except NotFoundError:
            return None
        if not found:
            return None
        fields: set[str] | None = None
        left: set[str] = set()
        for body in found.values():
            mappings = body.get("mappings") or {}
            mine = {f for f, m in (mappings.get("properties") or {}).items() if m.get("type") == "knn_vector"}
            fields = mine if fields is None else fields & mine
            left.update((mappings.get("_meta") or {}).get(BACKFILL_PENDING) or ())
        return fields or set(), left

    def _backfill_vectors(self, fields: Sequence[str]) -> None:
        """Give the passages without a vector of a model (its k-NN field missing, `fields`) one, where the
        embedder assigns the model to the passage's text (`models_for`, the text ingestion embeds). A
        stored vector of the model (a row copied from an index without its field) is reused; the others
        are embedded BACKFILL_BATCH at a time. Each row is updated only if unchanged since it was read
        (`if_seq_no`): a row rewritten meanwhile was embedded by its write. Idempotent: a second run
        finds only passages the model does not cover."""
        embedder = self._embedder
        if embedder is None:
            return
        by_field = {knn_field(m): m for m in embedder.models}
        for field in fields:
            model = by_field.get(field)
            if model is None:
                continue
            after: list[Any] | None = None
            seen = written = 0
            while True:
                body: dict[str, Any] = {
                    "size": BACKFILL_BATCH,
                    "sort": [
                        {"doc_key": "asc"},
                        {"passage_no": {"order": "asc", "unmapped_type": "integer"}},
                    ],
                    "query": {"bool": {"must_not": [{"exists": {"field": field}}]}},
                    "seq_no_primary_term": True,
                    "_source": ["title", "headings", "text", *_VECTOR_FIELDS],
                }
                if after is not None:
                    body["search_after"] = after
                hits = self.client.search(
                    index=self.passages_alias, body=body, request_timeout=max(self._timeout_s, 30.0)
                )["hits"]["hits"]
                seen += len(hits)
                written += self._backfill_batch(model, hits)
                if len(hits) < BACKFILL_BATCH:
                    break
                after = hits[-1]["sort"]
                logger.info("backfilling %s: %d passages read, %d given vectors so far", model, seen, written)
            logger.info("backfilled %s: %d passages read, %d given vectors", model, seen, written)

    def _backfill_batch(self, model: str, hits: list[dict[str, Any]]) -> int:
        """One batch of `_backfill_vectors`: the vectors of `model` of the rows it covers, as partial
        updates of their stored vectors and k-NN field; the number of rows written."""
        embedder = self._embedder
        if embedder is None:
            return 0
        mine: list[tuple[dict[str, Any], dict[str, Vector], str]] = []
        for h in hits:
            src = h["_source"]
            text = passage_text(
                src.get("title") or "", indexed_text(src.get("headings"), src.get("text") or "")
            )
            if model in embedder.models_for(text):
                mine.append((h, _stored_vectors(src), text))
        missing = [text for _, stored, text in mine if model not in stored]
        embedded = iter(embedder.embed_passages(missing, [model]) if missing else [])
        lines: list[dict[str, Any]] = []
        for h, stored, _ in mine:
            vs = [stored[model]] if model in stored else next(embedded)
            vector = next((v for v in vs if v.model == model), None)
            if vector is None:
                continue
            every = {**stored, model: vector}
            change = {
                "vectors": {m: base64.b64encode(v.data).decode("ascii") for m, v in every.items()},
                **knn_value(vector),
            }
            meta = {"_index": h["_index"], "_id": h["_id"], "if_seq_no": h["_seq_no"]}
            lines += [{"update": {**meta, "if_primary_term": h["_primary_term"]}}, {"doc": change}]
        if lines:
            self._bulk([lines], tolerate=(409,))  # 409: rewritten since it was read (embedded by its write)
        return len(lines) // 2

    def _map_metadata(self, alias: str, timeout: float) -> None:
        """Indices made before metadata filters get its typed fields and templates (a no-op when present):
        their documents simply have no metadata until re-ingested."""
        body = {"dynamic_templates": METADATA_TEMPLATES, "properties": METADATA_PROPERTIES}
        self.client.indices.put_mapping(index=alias, body=body, request_timeout=timeout)

    def _create_index(self, index: str, alias: str | None, timeout: float) -> None:
        """Create `index` (its template gives settings and mappings; the passages index takes its shard
        count from this backend), with `alias` when nothing holds it yet."""
        from opensearchpy.exceptions import RequestError

        body: dict[str, Any] = {"aliases": {alias: {}}} if alias else {}
        if index == self.passages_index and self.passage_shards != 1:
            body["settings"] = {"number_of_shards": self.passage_shards}
        try:
            self.client.indices.create(index=index, body=body, request_timeout=max(timeout, 30.0))
        except RequestError as exc:
            if exc.error != "resource_already_exists_exception":
                raise

    def _move_alias(self, old: list[str], new: str, alias: str) -> None:
        """Upgrade: copy the older indices' rows into `new`, move the alias in one call, then copy what was
        written to the older indices meanwhile (rows already in `new` are kept)."""
        if new == self.passages_index and any(_older_splitter(o, self.index_prefix) for o in old):
            self._resplit_move(old, new, alias)
            return
        self._copy_rows(old, new)
        self._swap_alias(old, new, alias)
        self._copy_rows(old, new)

    def _clear_retired(self, index: str, alias: str, timeout: float) -> None:
        """Before the alias moves (back) to `index`: if a move took the alias off it before, its rows are as
        they were then — passages of documents deleted or changed since would come back — so they are
        deleted (the move then copies every row) and its retired mark removed. An index being filled by a
        move in progress is not retired and is kept. (`_delete_by_query` and `_aliases` are POSTs: the
        prepare function's permissions need no index deletion.)"""
        retired = retired_alias(alias)
        if not self.client.indices.exists_alias(index=index, name=retired, request_timeout=timeout):
            return
        logger.warning("clearing %s: it held %s before an earlier move, its rows are stale", index, alias)
        self.client.delete_by_query(
            index=index,
            body={"query": {"match_all": {}}},
            conflicts="proceed",
            refresh=True,
            request_timeout=max(timeout, 600.0),
        )
        self.client.indices.update_aliases(
            body={"actions": [{"remove": {"index": index, "alias": retired}}]},
            request_timeout=max(timeout, 30.0),
        )

    def _swap_alias(self, old: list[str], new: str, alias: str) -> None:
        """Move `alias` from `old` to `new` in one call; `old` are marked retired (`_clear_retired`)."""
        actions = [{"remove": {"index": o, "alias": alias}} for o in old] + [
            {"add": {"index": new, "alias": alias}},
            *({"add": {"index": o, "alias": retired_alias(alias)}} for o in old),
        ]
        self.client.indices.update_aliases(
            body={"actions": actions}, request_timeout=max(self._timeout_s, 30.0)
        )

    def _resplit_move(self, old: list[str], new: str, alias: str) -> None:
        """Upgrade across a splitter change without downtime: re-split every stored document into `new`
        while `alias` still serves `old`, move the alias in one call, then re-split the documents written
        since the rebuild began."""
        started = int(time.time()) - 1
        self._resplit_documents(new, None)
        self._swap_alias(old, new, alias)
        self._resplit_documents(new, started)

    def _resplit_documents(self, index: str, since: int | None) -> None:
        """Every stored document (or those updated at or after `since`) cut by this splitter into `index`,
        and its new passage count recorded on the document."""
        query: dict[str, Any] = (
            {"match_all": {}} if since is None else {"range": {"updated_at": {"gte": since}}}
        )
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": 200,
                "sort": [{"source_key": "asc"}, {"doc_id": "asc"}],
                "query": query,
            }
            if after is not None:
                body["search_after"] = after
            hits = self.client.search(
                index=self.documents_alias,
                body=body,
                _source_includes=_DOC_FIELDS,
                request_timeout=max(self._timeout_s, 30.0),
            )["hits"]["hits"]
            docs = {h["_id"]: _document(h["_source"]) for h in hits}
            passages = {p: document_passages(d.body, d.title, d.structured_source) for p, d in docs.items()}
            # The new index maps every model's k-NN field (the rebuild runs before ensure_indices notes it).
            vectors = self._passage_vectors(docs, passages, self.knn_properties())
            lines: list[dict[str, Any]] = []
            for parent, doc in docs.items():
                lines += self._passage_lines(parent, doc, passages[parent], vectors[parent], index)
                lines += [
                    {"update": {"_index": self.documents_alias, "_id": parent}},
                    {"doc": {"passage_count": len(passages[parent])}},
                ]
            self._bulk([lines])
            if len(hits) < 200:
                return
            after = hits[-1]["sort"]

    def _copy_rows(self, old: list[str], new: str) -> None:
        mapped = self.knn_properties() if new == self.passages_index else {}
        sort = [
            {"source_key": "asc"},
            {"doc_id": "asc"},
            {"passage_no": {"order": "asc", "unmapped_type": "integer"}},
        ]
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {"size": 500, "sort": sort, "query": {"match_all": {}}}
            if after is not None:
                body["search_after"] = after
            hits = self.client.search(
                index=",".join(old), body=body, request_timeout=max(self._timeout_s, 30.0)
            )["hits"]["hits"]
            lines: list[dict[str, Any]] = []
            versions = self._parent_versions(hits) if new == self.passages_index else {}
            for h in hits:
                row = h["_source"]
                row = {**row, **knn_values(_stored_vectors(row).values(), mapped)}
                if row.get("doc_key") in versions:
                    row["version"] = versions[row["doc_key"]]
                lines += [{"create": {"_index": new, "_id": h["_id"]}}, row]
            self._bulk([lines], tolerate=(409,))  # 409: written to the new index since
            if len(hits) < 500:
                return
            after = hits[-1]["sort"]

    def _parent_versions(self, hits: list[dict[str, Any]]) -> dict[str, str]:
        """Parent id -> stored version, for copied passage rows that lack one (written before v4): read from
        the parents themselves, so a copied row is as citable as a written one."""
        keys = sorted({h["_source"]["doc_key"] for h in hits if not h["_source"].get("version")})
        if not keys:
            return {}
        found = self.client.mget(
            index=self.documents_alias,
            body={"ids": keys},
            _source_includes=["revision", "acl", "structured_source"],
        )
        return {
            d["_id"]: record_version(
                d["_source"]["revision"],
                DocumentAcl.model_validate(d["_source"]["acl"]),
                d["_source"].get("structured_source"),
            )
            for d in found["docs"]
            if d.get("found")
        }

    def drop_indices(self) -> None:
        """Delete this prefix's indices and templates (tests, benchmarks)."""
        from opensearchpy.exceptions import NotFoundError

        for index, template in (
            (self.passages_index, self.passages_template),
            (self.documents_index, self.documents_index),
        ):
            with contextlib.suppress(NotFoundError):
                self.client.indices.delete(index=index)
            with contextlib.suppress(NotFoundError):
                self.client.indices.delete_index_template(name=template)
        self._ready = False

    # --- search -------------------------------------------------------------------------------------
    def search_body(
        self,
        queries: list[SourceQuery],
        text: str,
        viewer: Viewer,
        vectors: Sequence[Vector] = (),
        dense: bool | None = None,
        evidence: Vector | None = None,
    ) -> list[dict[str, Any]]:
        """The `_msearch` body: per source a header and a collapsed, filtered, thresholded BM25 search (with
        the passage vectors when there are query vectors) and, unless the dense stage is off, one more entry
        per vector: the k-NN search on its model's field, for `dense_k` documents; then, with an `evidence`
        vector, its k-NN search for EVIDENCE_DEPTH documents (the gate's evidence: it never ranks)."""
        body: list[dict[str, Any]] = []
        matched = text_query(text)
        visible = acl_filter(viewer)
        vector = vectors[0] if vectors else None
        dense = self._dense_on(vector) if dense is None else dense and vector is not None
        for q in queries:
            filters = [source_filter(q.key), visible]
            if q.filter is not None:  # §8: before ranking, in BM25 and k-NN alike
                filters.append(filter_query(q.filter))
            common = {
                "timeout": f"{max(1, int(q.timeout_s * 1000))}ms",
                "track_total_hits": False,
                "collapse": {"field": "doc_key"},
                "_source": _HIT_FIELDS if vector is None else _HIT_FIELDS + _VECTOR_FIELDS,
            }
            threshold = {"min_score": q.min_score} if q.min_score > float("-inf") else {}
            body.append({"index": self.passages_alias})
            body.append(
                {
                    "size": q.top_k,
                    **threshold,
                    "query": {"bool": {"must": [matched], "filter": filters}},
                    **common,
                }
            )
            if not (dense and q.dense_k):
                continue
            nearest = [(v, q.dense_k) for v in vectors]
            if evidence is not None:
                nearest.append((evidence, EVIDENCE_DEPTH))
            for v, size in nearest:
                knn = {"vector": knn_bytes(v), "k": min(size * KNN_PASSAGES_PER_DOC, 10_000)}
                body.append({"index": self.passages_alias})
                body.append(
                    {
                        "size": size,
                        "query": {
                            "knn": {knn_field(v.model): {**knn, "filter": {"bool": {"filter": filters}}}}
                        },
                        **common,
                    }
                )
        return body

    def _dense_on(self, vector: Vector | None) -> bool:
        return vector is not None and time.monotonic() >= self._dense_off_until

    def _dense_unavailable(self, reason: str) -> None:
        """No k-NN here (plugin, `index.knn` or the model's field): BM25 candidates only for a while."""
        self._dense_off_until = time.monotonic() + DENSE_RETRY_S
        if not self._dense_warned:
            self._dense_warned = True
            logger.warning(
                "OpenSearch k-NN unavailable (%s): hybrid ranking re-scores BM25 candidates only, "
                "no dense first stage",
                reason,
            )

    def msearch(self, body: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        """The raw `_msearch` call (the benchmark times it against `search`)."""
        # On the alias's path (`<alias>/_msearch`): IAM grants the read functions their indices only.
        answer: dict[str, Any] = self.client.msearch(
            body=body, index=self.passages_alias, request_timeout=timeout_s
        )
        return answer

    def search(self, queries: list[SourceQuery], query: QueryAnalysis, viewer: Viewer) -> list[SourceResult]:
        if not queries:
            return []
        started = time.perf_counter()
        vectors = query.vectors
        dense = self._dense_on(vectors[0] if vectors else None)
        body = self.search_body(queries, query.lexical, viewer, vectors, dense, query.evidence)
        try:  # the read path only reads: indices are made at deploy/admin time (`prepare`, ingestion)
            raw = self.msearch(body, max(q.timeout_s for q in queries) + 1.0)
        except transport_errors() as exc:  # transport failures of the one round trip fail every source
            failure = _failure(exc)
            return [SourceResult(q.key, error=failure) for q in queries]
        elapsed = (time.perf_counter() - started) * 1000
        responses = iter(raw.get("responses", []))
        results: list[SourceResult] = []
        for q in queries:
            # One k-NN response per query vector (and one of the evidence vector) when the dense stage runs.
            want = 1 + (len(vectors) + (query.evidence is not None) if dense and q.dense_k else 0)
            entries = list(itertools.islice(responses, want))
            if len(entries) < want:  # a short response never becomes "no results"
                results.append(
                    SourceResult(q.key, error=SourceFailure("unavailable", "missing msearch response"))
                )
                continue
            results.append(self._source_result(q, entries[0], entries[1:], query, elapsed))
        return results

    def _source_result(
        self,
        q: SourceQuery,
        response: dict[str, Any],
        knn_responses: list[dict[str, Any]],
        query: QueryAnalysis,
        ms: float,
    ) -> SourceResult:
        """One source's lexical candidates (with their passages' cosines) and dense candidates; with the
        query's evidence vector, what the multilingual model saw (`ScriptEvidence`); with its translated
        vector and no lexical candidate, each dense candidate's cosine with it (`dense_checks`)."""
        vectors = query.vectors
        result = SourceResult(q.key, ms=response.get("took", ms))
        result.error = _sub_failure(response) or next(
            (f for f in map(self._dense_failure, knn_responses) if f is not None), None
        )
        if result.error is not None:
            return result
        raw_hits = response["hits"]["hits"]
        result.hits = [_hit(q.key, h) for h in raw_hits]
        stored = [_stored_vectors(h["_source"]) for h in raw_hits]
        result.cosines, result.cosine_models = matching(vectors, stored)
        per_vector = [
            self._dense_hits(q.key, v, r)
            for v, r in zip(vectors, knn_responses[: len(vectors)], strict=False)
        ]
        dense = sorted(
            ((d, v.model) for v, found in zip(vectors, per_vector, strict=False) for d in found),
            key=lambda pair: -pair[0].cosine,
        )
        result.dense = [(d.hit, d.cosine) for d, _ in dense]
        result.dense_models = [model for _, model in dense]
        evidence = query.evidence
        if evidence is not None and len(knn_responses) > len(vectors) and "hits" in knn_responses[-1]:
            own = self._dense_hits(q.key, evidence, knn_responses[-1])
            result.evidence = _script_evidence(evidence, own, vectors, per_vector)
        translated = query.translated
        if translated is not None and not result.hits:  # the no-match check of dense-only candidates
            result.dense_checks = cosines(translated, [d.stored.get(translated.model) for d, _ in dense])
        return result

    def _dense_failure(self, response: dict[str, Any]) -> SourceFailure | None:
        """A k-NN sub-search's failure; one the node rejects (400: no plugin, no k-NN field of the model)
        is not a failure of the source but turns the dense stage off for a while."""
        if response.get("status") == 400:
            self._dense_unavailable(str(response.get("error", {}).get("type", "rejected")))
            return None
        return _sub_failure(response)

    @staticmethod
    def _dense_hits(source_key: str, vector: Vector, response: dict[str, Any]) -> list[_DenseHit]:
        """The k-NN sub-search's documents, best first, with the cosine of their passage (same model only)
        and the passage's stored vectors."""
        if "hits" not in response:  # rejected: see `_dense_failure`
            return []
        raw_hits = response["hits"]["hits"]
        found = [
            _DenseHit(replace(_hit(source_key, h), score=c), c, _stored_vectors(h["_source"]))
            for h, c in zip(raw_hits, _cosines([vector], raw_hits), strict=True)
            if c is not None
        ]
        return sorted(found, key=lambda d: -d.cosine)

    def passage_candidates(
        self, hits: Sequence[Hit], query: QueryAnalysis, per_doc: int, timeout_s: float
    ) -> dict[tuple[str, str], list[tuple[Hit, float | None]]]:
        if not hits:
            return {}
        wanted = {doc_key(h.source_key, h.doc_id): h for h in hits}
        filters = [{"terms": {"doc_key": list(wanted)}}, {"term": {"status": "ready"}}]
        # One query over the hits' documents (not one per document: each sub-search costs its own phases),
        # deep enough for `per_doc` of each unless a few documents hold far more of the best passages —
        # a document crowded out keeps the passage its search found (domain.citing).
        search = {
            "size": min(10_000, per_doc * len(wanted) * CANDIDATES_DEPTH),
            "timeout": f"{max(1, int(timeout_s * 1000))}ms",
            "track_total_hits": False,
            "query": {"bool": {"must": [text_query(query.lexical)], "filter": filters}},
            "_source": ["doc_key", *_HIT_FIELDS, *(_VECTOR_FIELDS if query.vectors else [])],
        }
        try:
            responses = self.msearch([{"index": self.passages_alias}, search], timeout_s + 1.0).get(
                "responses"
            )
        except transport_errors() as exc:
            raise _failure(exc) from exc
        if not responses:
            raise SourceFailure("unavailable", "missing msearch response")
        failure = _sub_failure(responses[0])
        if failure is not None:
            raise failure
        rows: dict[str, list[dict[str, Any]]] = {}
        for r in responses[0]["hits"]["hits"]:
            hit = wanted.get(r["_source"].get("doc_key", ""))
            # the hit's revision only: a rewrite since is not cited
            if hit is not None and r["_source"].get("revision") == hit.revision:
                kept = rows.setdefault(r["_source"]["doc_key"], [])
                if len(kept) < per_doc:
                    kept.append(r)
        found: dict[tuple[str, str], list[tuple[Hit, float | None]]] = {}
        for key, passages in rows.items():
            hit = wanted[key]
            cosines = _cosines(query.vectors, passages) if query.vectors else [None] * len(passages)
            found[(hit.source_key, hit.doc_id)] = [
                (
                    replace(
                        hit,
                        score=float(r["_score"]),
                        passage=r["_source"]["text"],
                        structured_source=r["_source"].get("structured_source"),
                        passage_no=r["_source"].get("passage_no"),
                    ),
                    c,
                )
                for r, c in zip(passages, cosines, strict=True)
            ]
        return found

    def neighbour_passages(
        self, hits: Sequence[Hit], radius: int
    ) -> dict[tuple[str, str], list[StoredPassage]]:
        """One `_mget` of the passage rows numbered within `radius` of each hit's (their ids follow from the
        document and the number), of the hit's revision and ready."""
        wanted = {doc_key(h.source_key, h.doc_id): h for h in hits if h.passage_no is not None}
        ids = [
            _passage_id(parent, n)
            for parent, h in wanted.items()
            if h.passage_no is not None
            for n in range(max(0, h.passage_no - radius), h.passage_no + radius + 1)
        ]
        fields = ["doc_key", "passage_no", "text", "headings", "revision", "status", "structured_source"]
        out: dict[tuple[str, str], list[StoredPassage]] = {}
        for src in self._sources(self.passages_alias, ids, fields):
            hit = wanted.get(src.get("doc_key", "")) if src else None
            if (
                src is None
                or hit is None
                or src.get("revision") != hit.revision
                or src.get("status") != "ready"
            ):
                continue
            pages = (src.get("structured_source") or {}).get("pages") or ()
            out.setdefault((hit.source_key, hit.doc_id), []).append(
                StoredPassage(int(src["passage_no"]), src["text"], src.get("headings") or "", tuple(pages))
            )
        return {key: sorted(rows, key=lambda p: p.number) for key, rows in out.items()}

    # --- documents ----------------------------------------------------------------------------------
    def get_document(self, source_key: str, doc_id: str) -> Document | None:
        """One GET of the stored document (a read by ref: `_doc`, the read function's only grant)."""
        from opensearchpy.exceptions import NotFoundError

        try:
            found = self.client.get(
                index=self.documents_alias, id=doc_key(source_key, doc_id), _source_includes=_DOC_FIELDS
            )
        except NotFoundError:
            return None
        except transport_errors() as exc:
            raise _failure(exc) from None
        src = found["_source"]
        if src["source_key"] != source_key or src["doc_id"] != doc_id:
            return None
        return _document(src)

    def get_documents(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Document]:
        """One `_mget` on the documents alias for every key (bodies included)."""
        return {key: _document(src) for key, src in self._mget(keys, _DOC_FIELDS).items()}

    def document_states(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], DocumentState]:
        """One `_mget` without bodies: the live check of every hit of a retrieval."""
        return {
            key: DocumentState(
                src["source_key"],
                src["doc_id"],
                src["status"],
                DocumentAcl.model_validate(src["acl"]),
                src["revision"],
                src.get("structured_source"),
                src.get("metadata") or None,
            )
            for key, src in self._mget(keys, _STATE_FIELDS).items()
        }

    def _mget(
        self, keys: Sequence[tuple[str, str]], fields: list[str]
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """The stored `_source` (those fields) of each key that exists, in one `_mget`."""
        ids = [doc_key(source_key, doc_id) for source_key, doc_id in keys]
        sources: dict[tuple[str, str], dict[str, Any]] = {}
        for (source_key, doc_id), src in zip(
            keys, self._sources(self.documents_alias, ids, fields), strict=True
        ):
            if src is not None and src["source_key"] == source_key and src["doc_id"] == doc_id:
                sources[(source_key, doc_id)] = src
        return sources

    def _sources(self, index: str, ids: list[str], fields: list[str]) -> list[dict[str, Any] | None]:
        """One `_mget` of `ids` on `index`: each one's `_source` (those fields), None where it does not exist
        (every one when the index does not exist yet)."""
        from opensearchpy.exceptions import NotFoundError

        if not ids:
            return []
        try:
            found = self.client.mget(index=index, body={"ids": ids}, _source_includes=fields)
        except NotFoundError:  # no such index yet: nothing exists
            return [None] * len(ids)
        except transport_errors() as exc:
            raise _failure(exc) from None
        docs = found.get("docs", [])
        return [
            (docs[i].get("_source") if docs[i].get("found") else None) if i < len(docs) else None
            for i in range(len(ids))
        ]

    def document_ids(self, source_key: str, prefix: str = "") -> list[str]:
        query: dict[str, Any] = {"bool": {"filter": [{"term": {"source_key": source_key}}]}}
        if prefix:
            query["bool"]["filter"].append({"prefix": {"doc_id": prefix}})
        ids: list[str] = []
        after: list[Any] | None = None
        try:
            self.ensure_indices()
            while True:
                body: dict[str, Any] = {
                    "query": query,
                    "_source": ["doc_id"],
                    "size": 1000,
                    "sort": [{"doc_id": "asc"}],
                }
                if after is not None:
                    body["search_after"] = after
                hits = self.client.search(index=self.documents_alias, body=body)["hits"]["hits"]
                ids += [hit["_source"]["doc_id"] for hit in hits]
                if len(hits) < 1000:
                    return ids
                after = hits[-1]["sort"]
        except transport_errors() as exc:
            raise _failure(exc) from None

    def _passage_counts(self, keys: list[str]) -> dict[str, int]:
        """Parent id -> passage count of the stored version, for the documents that exist."""
        counts: dict[str, int] = {}
        for i in range(0, len(keys), 500):
            resp = self.client.mget(
                index=self.documents_alias,
                body={"ids": keys[i : i + 500]},
                _source_includes=["passage_count"],
            )
            for d in resp["docs"]:
                if d.get("found"):
                    counts[d["_id"]] = int(d["_source"].get("passage_count", 0))
        return counts

    def put_documents(self, documents: list[Document]) -> None:
        if not documents:
            return
        with _write_faults():
            self.ensure_indices()
            latest = {doc_key(d.source_key, d.doc_id): d for d in documents}  # last one of a key wins
            passages = {p: document_passages(d.body, d.title, d.structured_source) for p, d in latest.items()}
            seconds = self._embedding_seconds
            deadline = None if seconds is None else time.monotonic() + seconds
            try:
                vectors = self._passage_vectors(latest, passages, deadline=deadline)
            except EmbeddingTimeout:
                raise SourceFailure("rejected", "embedding deadline passed", "embedding_timeout") from None
            old = self._passage_counts(list(latest))
            actions: list[list[dict[str, Any]]] = []
            for parent, doc in latest.items():
                actions.append(
                    self._document_actions(parent, doc, old.get(parent, 0), passages[parent], vectors[parent])
                )
            self._bulk(actions)

    def _passage_vectors(
        self,
        docs: dict[str, Document],
        passages: dict[str, list[Passage]],
        knn_fields: Collection[str] | None = None,
        deadline: float | None = None,
    ) -> dict[str, list[dict[str, Any]]]:
        """Parent id -> per passage the vector fields to index (empty dicts without an embedder); past
        `deadline` (time.monotonic()) EmbeddingTimeout."""
        if self._embedder is None:
            return {parent: [{} for _ in ps] for parent, ps in passages.items()}
        vectors = document_vectors(
            self._embedder,
            [(docs[p].title, [x.indexed for x in ps]) for p, ps in passages.items()],
            deadline,
        )
        return {
            parent: [self._vector_fields(v, knn_fields) for v in vs]
            for parent, vs in zip(passages, vectors, strict=True)
        }

    def _vector_fields(
        self, vectors: Sequence[Vector], knn_fields: Collection[str] | None = None
    ) -> dict[str, Any]:
        """A passage's vectors as stored (`vectors`: model id -> base64 int8) and as the k-NN field of
        each model the index maps."""
        if not vectors:
            return {}
        stored = {v.model: base64.b64encode(v.data).decode("ascii") for v in vectors}
        fields = self._knn_fields if knn_fields is None else knn_fields
        return {"vectors": stored, **knn_values(vectors, fields)}

    def _document_actions(
        self,
        parent: str,
        doc: Document,
        old_count: int,
        passages: list[Passage],
        vectors: list[dict[str, Any]],
    ) -> list[dict[str, Any]]:
        """New passages, then deletes of the stored version's extra passages, then the parent (last, so a
        readable parent implies its passages are in)."""
        acl = doc.acl
        lines = self._passage_lines(parent, doc, passages, vectors, self.passages_alias)
        for n in range(len(passages), old_count):
            lines.append({"delete": {"_index": self.passages_alias, "_id": _passage_id(parent, n)}})
        lines += [
            {"index": {"_index": self.documents_alias, "_id": parent}},
            {
                "source_key": doc.source_key,
                "doc_id": doc.doc_id,
                "title": doc.title,
                "body": doc.body,
                "revision": doc.revision,
                "status": doc.status,
                "acl": acl.model_dump(),
                "structured_source": doc.structured_source,
                "passage_count": len(passages),
                "updated_at": int(time.time()),
                **metadata_fields(doc.metadata),
            },
        ]
        return lines

    def _passage_lines(
        self, parent: str, doc: Document, passages: list[Passage], vectors: list[dict[str, Any]], index: str
    ) -> list[dict[str, Any]]:
        """The bulk lines indexing `doc`'s passages into `index` (the alias, or a new index being built)."""
        acl = doc.acl
        shared = {
            "source_key": doc.source_key,
            "doc_id": doc.doc_id,
            "doc_key": parent,
            "title": doc.title,
            "revision": doc.revision,
            "version": doc.record_version,
            "status": doc.status,
            "acl_tenant": acl.tenants,
            "acl_open": not acl.subjects and not acl.groups,
            "acl_subjects": list(acl.subjects),
            "acl_groups": list(acl.groups),
            "structured_source": doc.structured_source,
            **metadata_fields(doc.metadata),
        }
        lines: list[dict[str, Any]] = []
        pages = pages_of(passages, page_starts_of(doc.structured_source))
        for n, (passage, vector, on_pages) in enumerate(zip(passages, vectors, pages, strict=True)):
            # A passage carries its own pages (PDF): hits and citations name them.
            cited = hit_source(doc.structured_source, on_pages)
            row = {**shared, "structured_source": cited, "passage_no": n, "text": passage.text, **vector}
            if passage.headings:
                row["headings"] = passage.heading_path
            lines += [{"index": {"_index": index, "_id": _passage_id(parent, n)}}, row]
        return lines

    def _bulk(self, groups: list[list[dict[str, Any]]], tolerate: tuple[int, ...] = ()) -> None:
        """Send action groups in requests of at most BULK_MAX_BYTES (a larger group goes alone), so that
        everything is searchable when this returns: one request refreshes the shards it wrote
        (`refresh=true`: primary and replicas); several are sent without a refresh and the indices they
        wrote are refreshed once after the last. A forced refresh, not `wait_for`: that waits for the next
        scheduled refresh (up to `refresh_interval`, 1 s) on every write and held bulk loads at ~1/3 of the
        node's rate (bench/opensearch_scale.py). Item errors of a status in `tolerate` (and 404: already
        gone) are not failures."""
        serializer = self.client.transport.serializer
        bodies: list[str] = []
        written: set[str] = set()
        batch: list[str] = []
        size = 0
        for group in groups:
            lines = [serializer.dumps(line) for line in group]
            group_size = sum(len(line.encode("utf-8")) + 1 for line in lines)
            if batch and size + group_size > BULK_MAX_BYTES:
                bodies.append("\n".join(batch) + "\n")
                batch, size = [], 0
            batch.extend(lines)
            size += group_size
            written.update(_written_indices(group))
        if batch:
            bodies.append("\n".join(batch) + "\n")
        for body in bodies:
            self._bulk_request(body, tolerate, refresh=len(bodies) == 1)
        if len(bodies) > 1:
            for index in sorted(written):
                self.client.indices.refresh(index=index, request_timeout=max(self._timeout_s, 60.0))

    def _bulk_request(self, body: str, tolerate: tuple[int, ...] = (), refresh: bool = True) -> None:
        resp = self.client.bulk(
            body=body,
            index=self.passages_alias,
            refresh="true" if refresh else "false",
            request_timeout=max(self._timeout_s, 60.0),
        )
        if resp.get("errors"):
            failed = [
                item[op]
                for item in resp["items"]
                for op in item
                if "error" in item[op] and item[op].get("status") not in (404, *tolerate)
            ]  # 404: already gone
            if failed:
                raise _write_failure([f.get("status", 0) for f in failed], [f["error"] for f in failed])

    def _write_stored(
        self, source_key: str, doc_id: str, actions: Callable[[str, int], list[dict[str, Any]]]
    ) -> bool:
        """Bulk `actions(parent id, passage count)` for the stored document; False when there is none."""
        from opensearchpy.exceptions import NotFoundError

        parent = doc_key(source_key, doc_id)
        with _write_faults():
            self.ensure_indices()
            try:
                found = self.client.get(
                    index=self.documents_alias, id=parent, _source_includes=["passage_count"]
                )
            except NotFoundError:
                return False
            self._bulk([actions(parent, int(found["_source"].get("passage_count", 0)))])
            return True

    def delete_document(self, source_key: str, doc_id: str) -> bool:
        def delete(parent: str, count: int) -> list[dict[str, Any]]:
            # Parent first: a ref fails to read at once; then the passages stop matching.
            return [{"delete": {"_index": self.documents_alias, "_id": parent}}] + [
                {"delete": {"_index": self.passages_alias, "_id": _passage_id(parent, n)}}
                for n in range(count)
            ]

        return self._write_stored(source_key, doc_id, delete)

    def set_document_status(self, source_key: str, doc_id: str, status: str) -> bool:
        change = {"doc": {"status": status}}

        def update(parent: str, count: int) -> list[dict[str, Any]]:
            lines: list[dict[str, Any]] = [
                {"update": {"_index": self.documents_alias, "_id": parent}},
                change,
            ]
            for n in range(count):
                lines += [{"update": {"_index": self.passages_alias, "_id": _passage_id(parent, n)}}, change]
            return lines

        return self._write_stored(source_key, doc_id, update)

    def untenanted_documents(self, source_key: str, limit: int = 10_000) -> list[str]:
        query = {
            "size": min(limit, 10_000),
            "query": {
                "bool": {
                    "filter": [{"term": {"source_key": source_key}}],
                    "must_not": [{"exists": {"field": "acl_tenant"}}],
                }
            },
            "collapse": {"field": "doc_key"},
            "_source": ["doc_id"],
            "sort": [{"doc_key": "asc"}],
        }
        with _write_faults():
            found = self.client.search(index=self.passages_alias, body=query, request_timeout=self._timeout_s)
        return sorted(h["_source"]["doc_id"] for h in found["hits"]["hits"])

    def metadata_keys(self, *, source_key: str | None = None, tenant: str | None = None) -> set[str]:
        """From the passages index: its mapping's typed metadata fields (every source's), then which of
        them the rows of the source or tenant hold (`acl_tenant`: its own and shared documents)."""
        scope: list[dict[str, Any]] = []
        if source_key is not None:
            scope.append({"term": {"source_key": source_key}})
        if tenant is not None:
            scope.append({"term": {"acl_tenant": tenant}})
        with _write_faults():
            self.ensure_indices()
            mappings = self.client.indices.get_mapping(index=self.passages_alias)
            fields: dict[str, str] = {}
            for mapping in mappings.values():
                fields |= mapped_metadata_fields(mapping.get("mappings", {}).get("properties", {}))
            if not fields:
                return set()
            body = metadata_keys_query(fields, {"bool": {"filter": scope}})
            found = self.client.search(index=self.passages_alias, body=body, request_timeout=self._timeout_s)
        buckets = found["aggregations"]["keys"]["buckets"]
        return {fields[f] for f, bucket in buckets.items() if bucket.get("doc_count", 0) > 0}

    def list_documents(self, source_key: str, limit: int = 1000) -> list[DocumentInfo]:
        body = {
            "query": {"term": {"source_key": source_key}},
            "size": min(limit, MAX_RESULT_WINDOW),
            "sort": [{"doc_id": "asc"}],
            "_source": ["doc_id", "title", "revision", "status", "updated_at", "acl.tenant", "metadata"],
            "script_fields": {"chars": {"script": {"source": "params._source.body.length()"}}},
        }
        try:
            found = self.client.search(index=self.documents_alias, body=body)
        except transport_errors() as exc:
            raise _failure(exc) from None
        return [
            DocumentInfo(
                doc_id=h["_source"]["doc_id"],
                title=h["_source"]["title"],
                revision=h["_source"]["revision"],
                status=h["_source"]["status"],
                chars=int(h.get("fields", {}).get("chars", [0])[0]),
                updated_at=float(h["_source"].get("updated_at", 0)),
                tenant=(h["_source"].get("acl") or {}).get("tenant"),
                metadata=h["_source"].get("metadata") or None,
            )
            for h in found["hits"]["hits"]
        ]

    def index_states(self) -> list[IndexState]:
        """The passages index behind the alias (two while a move is under way): its primary shards' segments
        (`_segments`, searchable ones) and whether a merge runs (`_stats/merge`). Serverless has neither."""
        if aws_service(self._url) == "aoss":
            return []
        return [state for state, _ in self._index_shapes()]

    def _index_shapes(self) -> list[tuple[IndexState, int]]:
        """Each passages index's state and the segments per shard a compaction merges it into."""
        from opensearchpy.exceptions import NotFoundError

        alias, timeout = self.passages_alias, self._timeout_s
        try:  # a refresh first: a search-idle shard shows a finished merge only after its next refresh
            self.client.indices.refresh(index=alias, request_timeout=timeout)
            segments = self.client.indices.segments(index=alias, request_timeout=timeout)["indices"]
            stats = self.client.indices.stats(index=alias, metric="merge", request_timeout=timeout)
        except NotFoundError:  # not prepared yet
            return []
        except transport_errors() as exc:
            raise _failure(exc) from None
        shapes = []
        for index, body in sorted(segments.items()):
            shards = [  # per primary shard, its searchable segments' sizes
                [s["size_in_bytes"] for s in copy["segments"].values() if s.get("search", True)]
                for copies in body["shards"].values()
                for copy in copies
                if copy["routing"]["primary"]
            ]
            targets = [target_segments(sum(sizes)) for sizes in shards]
            current = stats["indices"].get(index, {}).get("primaries", {}).get("merges", {}).get("current", 0)
            state = IndexState(
                index=index,
                shards=len(shards),
                segments=sum(len(sizes) for sizes in shards),
                target_segments=sum(targets),
                size_bytes=sum(map(sum, shards)),
                fragmented=any(fragmented(sizes, t) for sizes, t in zip(shards, targets, strict=True)),
                merging=current > 0,
            )
            shapes.append((state, max(targets, default=1)))
        return shapes

    def compact(self, force: bool = False) -> bool:
        """A force merge of each fragmented passages index to its target (`wait_for_completion=false`: the
        node merges in the background, one shard at a time per node, and keeps answering; a request while
        one runs waits behind it and then finds nothing left to merge)."""
        if aws_service(self._url) == "aoss":
            return False
        started = False
        for state, per_shard in self._index_shapes():
            if not state.due(force):
                continue
            try:
                self.client.indices.forcemerge(
                    index=state.index,
                    max_num_segments=per_shard,
                    wait_for_completion="false",
                    request_timeout=self._timeout_s,
                )
            except transport_errors() as exc:
                raise _failure(exc) from None
            logger.info(
                "compacting %s: %d segments to %d", state.index, state.segments, state.target_segments
            )
            started = True
        return started

    def healthy(self, timeout_s: float = 1.0) -> bool:
        """Reachable and not red, within `timeout_s`; indices are created on first use, not here."""
        try:
            if aws_service(self._url) == "aoss":  # Serverless has no cluster APIs: any answer will do
                self.client.indices.exists_alias(name=self.passages_alias, request_timeout=timeout_s)
                return True
            health = self.client.cluster.health(request_timeout=timeout_s)
            return health.get("status") in ("green", "yellow")
        except transport_errors():
            return False


@contextlib.contextmanager
def _write_faults() -> Iterator[None]:
    """A write the cluster could not take is a SourceFailure of its kind (an ingestion job waits and
    retries a transient one): a request answered with a status is classed as a bulk item is, one that
    got no answer is down or timed out. Programming errors propagate."""
    try:
        yield
    except transport_errors() as exc:
        status = getattr(exc, "status_code", None)  # "N/A" when the node never answered
        if not isinstance(status, int):
            raise _failure(exc) from exc
        info = getattr(exc, "info", None)
        raise _write_failure([status], [info.get("error")] if isinstance(info, dict) else []) from exc


_FIELD_LIMIT = re.compile(r"Limit of total fields \[(\d+)\]")


def _write_failure(statuses: list[int], errors: Sequence[Any] = ()) -> SourceFailure:
    """The failure of a bulk write from its failed items' statuses: only throttled (429) is `throttled`,
    only throttled or the node's own errors (5xx) `unavailable` (both transient: retried later), and any
    other refusal (a 4xx: the documents, not the node) `rejected`, which retrying would not change. A
    refusal for the index's field limit (new metadata keys past `index.mapping.total_fields.limit`) says so,
    with the limit: its cause `too_many_fields` (nothing else of the node's message is kept: it may quote
    the document)."""
    refused = sorted({s for s in statuses if s != 429 and s < 500})
    if refused:
        for error in errors:
            limit = _FIELD_LIMIT.search(str(error.get("reason", ""))) if isinstance(error, dict) else None
            if limit:
                detail = f"opensearch rejected the write: the index's field limit ({limit[1]}) is reached"
                return SourceFailure("rejected", detail, cause="too_many_fields")
        return SourceFailure("rejected", f"opensearch rejected the write (status {refused[0]})")
    if all(s == 429 for s in statuses):
        return SourceFailure("throttled", "opensearch throttled the write")
    return SourceFailure("unavailable", f"opensearch could not take the write (status {max(statuses)})")


@functools.cache
def transport_errors() -> tuple[type[Exception], ...]:
    """What a failed round trip to the cluster raises (imported on first use: opensearch-py is heavy)."""
    from opensearchpy.exceptions import OpenSearchException
    from urllib3.exceptions import HTTPError

    return (OpenSearchException, HTTPError, OSError)


def _written_indices(group: list[dict[str, Any]]) -> set[str]:
    """The `_index` of each action of a bulk action group (a delete has no source line after it)."""
    indices: set[str] = set()
    i = 0
    while i < len(group):
        ((op, meta),) = group[i].items()
        indices.add(meta["_index"])
        i += 1 if op == "delete" else 2
    return indices


def passages_index_name(prefix: str, shards: int = 1) -> str:
    """The passages index of this version with `shards` primary shards: `<prefix>-passages-vN`, or
    `<prefix>-passages-vN-s<shards>` for more than one."""
    return f"{prefix}-passages-{PASSAGES_VERSION}" + (f"-s{shards}" if shards != 1 else "")


def retired_alias(alias: str) -> str:
    """The alias marking the indices `alias` was moved off (never searched)."""
    return f"{alias}-retired"


def _older_splitter(index: str, prefix: str) -> bool:
    """Was passages index `index` (`<prefix>-passages-vN[-sK]`) cut by a splitter older than this one's?"""
    match = re.fullmatch(re.escape(prefix) + r"-passages-v(\d+)(?:-s\d+)?", index)
    return match is not None and int(match.group(1)) < RESPLIT_BEFORE


def _stored_vectors(src: dict[str, Any]) -> dict[str, Vector]:
    """A passage row's stored vectors by model (`vectors`; before v3: `vector_model`, `vector`)."""
    found = {m: Vector(m, base64.b64decode(data)) for m, data in (src.get("vectors") or {}).items()}
    if src.get("vector") and src.get("vector_model"):
        found.setdefault(src["vector_model"], Vector(src["vector_model"], base64.b64decode(src["vector"])))
    return found


@dataclass(frozen=True)
class _DenseHit:
    """A k-NN sub-search's document: its hit, its passage's cosine with the query vector and the
    passage's stored vectors by model."""

    hit: Hit
    cosine: float
    stored: dict[str, Vector]


def _script_evidence(
    evidence: Vector, own: list[_DenseHit], vectors: Sequence[Vector], per_vector: list[list[_DenseHit]]
) -> ScriptEvidence:
    """What the multilingual model saw of a source: the evidence vector's nearest documents (best passage
    each, own script) and the best hit of the dense stage of the same model under the other script's id
    (`across_other`), each with its stored vector (like the embedded backend's `_evidence`)."""
    other_model = across_other(evidence.model)
    best = next(
        (found[:1] for v, found in zip(vectors, per_vector, strict=False) if v.model == other_model), []
    )
    return ScriptEvidence(
        own=tuple((d.cosine, d.stored[evidence.model]) for d in own[:EVIDENCE_DEPTH]),
        other=next(((d.cosine, d.stored[other_model]) for d in best), None),
    )


def _cosines(queries: Sequence[Vector], raw_hits: list[dict[str, Any]]) -> list[float | None]:
    """The cosine of each hit's passage with the first query vector of a model it has a vector of."""
    return matching_cosines(queries, [_stored_vectors(h["_source"]) for h in raw_hits])


def _document(src: dict[str, Any]) -> Document:
    """A stored document from its `_source` (the fields of `_DOC_FIELDS`)."""
    return Document(
        source_key=src["source_key"],
        doc_id=src["doc_id"],
        title=src["title"],
        body=src["body"],
        status=src["status"],
        acl=DocumentAcl.model_validate(src["acl"]),
        structured_source=src.get("structured_source"),
        metadata=src.get("metadata"),
    )


def _hit(source_key: str, raw: dict[str, Any]) -> Hit:
    src = raw["_source"]
    return Hit(
        source_key=source_key,
        doc_id=src["doc_id"],
        title=src["title"],
        revision=src["revision"],
        score=float(raw["_score"]),
        passage=src["text"],
        structured_source=src.get("structured_source"),
        version=with_metadata(src["version"], src.get("metadata")) if src.get("version") else "",
        passage_no=src.get("passage_no"),
    )

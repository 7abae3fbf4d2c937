"""Abstract interfaces the services depend on; adapters implement them (ports and adapters)."""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from .domain.budget import ChainLink, Citation, CitationDraft, CitationMark, LedgerEntry
from .domain.errors import SourceFailure
from .domain.filters import Filter
from .domain.fusion import Hit
from .domain.ingestion import DocState, DocumentOutcome, IngestionJob, JobDocument, JobState
from .domain.models import (
    AgentDefinition,
    Document,
    DocumentState,
    Run,
    Session,
    Source,
    SourceDefinition,
    SourceState,
    TokenSummary,
    Viewer,
)
from .domain.passages import StoredPassage, stored_passages
from .domain.s3_source import StoredObject


class Clock(ABC):
    @abstractmethod
    def now(self) -> float:
        """Seconds since the epoch."""


class SystemClock(Clock):
    def now(self) -> float:
        return time.time()


class Registry(ABC):
    """Published sources, agents and workspaces."""

    @abstractmethod
    def get_sources(self, keys: list[str]) -> dict[str, Source | None]: ...

    @abstractmethod
    def put_source(self, definition: SourceDefinition) -> bool:
        """Publish; True if created, False if identical already exists; Conflict if it differs."""

    @abstractmethod
    def update_source_state(self, key: str, state: SourceState) -> None: ...

    @abstractmethod
    def get_agent(self, key: str) -> AgentDefinition | None: ...

    @abstractmethod
    def put_agent(self, definition: AgentDefinition) -> bool: ...

    @abstractmethod
    def get_workspace_agent(self, route: str) -> str | None: ...

    @abstractmethod
    def set_workspace_agent(self, route: str, agent_key: str) -> None: ...

    # --- listings (operators and the console; not on any request path) --------------------------------
    @abstractmethod
    def list_sources(self) -> list[Source]:
        """Every published source version with its switches, by key."""

    @abstractmethod
    def list_agents(self) -> list[AgentDefinition]:
        """Every published agent version, by key."""

    @abstractmethod
    def list_workspaces(self) -> dict[str, str]:
        """route -> the exact agent key it points at."""


class SessionStore(ABC):
    @abstractmethod
    def put_session(self, token_hash: str, session: Session) -> None:
        """Store the session under its token hash, listable under `token_id_of(token_hash)`."""

    @abstractmethod
    def get_session(self, token_hash: str) -> Session | None: ...

    @abstractmethod
    def list_sessions(self, now: float) -> list[TokenSummary]:
        """Every unexpired token issued (revoked ones included), by token id; never a token or its hash."""

    @abstractmethod
    def revoke_session(self, token_id: str, now: float) -> TokenSummary | None:
        """Mark the token revoked (idempotent); None when no unexpired token has that id."""


class RunStore(ABC):
    @abstractmethod
    def create_run(self, run: Run) -> None: ...

    @abstractmethod
    def get_run(self, run_id: str) -> Run | None: ...

    @abstractmethod
    def transition_run(self, run_id: str, from_states: tuple[str, ...], to_state: str) -> Run | None:
        """Conditional state change; None when the run is missing or not in one of `from_states`."""


@dataclass(frozen=True)
class Vector:
    """One text's unit vector (int8, see adapters.embedding) and the model that made it: vectors of two
    models are never compared."""

    model: str
    data: bytes


@dataclass(frozen=True)
class ScriptEvidence:
    """What a multilingual model saw of one source for one question (the mixed design's gate,
    domain.hybrid.HybridRanking.across): `own`, the nearest passages of the question's own script (at most
    `EVIDENCE_DEPTH` documents' best, best first) with their cosine and stored vector; `other`, the nearest
    passage of the other script (None: none). The vectors are the multilingual model's, stored under the
    ids of their passages' scripts."""

    own: tuple[tuple[float, Vector], ...] = ()
    other: tuple[float, Vector] | None = None


EVIDENCE_DEPTH = 3


def across_ids(model: str) -> tuple[str, str]:
    """The ids a multilingual model's vectors are stored under: (CJK passages, Latin passages). Its dense
    stage over one id reads only that script's passages, on every backend (one index / k-NN field per id)."""
    return f"{model}.zh", f"{model}.en"


def across_other(model_id: str) -> str:
    """The other script's id of one of `across_ids` (the evidence's id -> the ranking vector's)."""
    base, _, script = model_id.rpartition(".")
    cjk, latin = across_ids(base)
    return latin if script == "zh" else cjk


@dataclass(frozen=True)
class SourceQuery:
    """What one source is asked for (K-PIPE: the retrieval step sets the depths; the adapter only fetches).

    `top_k` lexical candidates (documents, best passage each) scoring at least `min_score`; with query
    vectors, also `dense_k` nearest documents per query vector's model (0: no dense stage). `filter` (§8):
    only documents whose metadata match it are candidates, in both stages, before ranking — the top_k are
    the best of the matching documents, never a post-filtered remainder (None: no filter)."""

    key: str
    top_k: int
    min_score: float
    timeout_s: float = 15.0
    dense_k: int = 0
    filter: Filter | None = None


@dataclass(frozen=True)
class QueryAnalysis:
    """A query analysed once for every source and every door (K-PIPE): its text, the words of its
    translation (`QueryTranslator`, matched by BM25 as if they were in the text) and one vector per model
    (the text's own model first, then the translation's in the other language's model)."""

    text: str
    expansion: str = ""
    vectors: tuple[Vector, ...] = ()
    # With a multilingual model (the mixed design, domain.hybrid): `vectors` are the text's own-script model
    # and the multilingual model's vector under the id of the other script's passages; `evidence` is the same
    # multilingual vector under the id of the question's own script (never ranks: the gate's evidence,
    # `ScriptEvidence`), and `translated` the translation in its language's model (never ranks: the no-match
    # check of the other script's dense-only hits). None without a multilingual model.
    evidence: Vector | None = None
    translated: Vector | None = None

    @property
    def lexical(self) -> str:
        """What BM25 matches: the text and its translation."""
        return f"{self.text} {self.expansion}" if self.expansion else self.text


@dataclass(frozen=True)
class DocumentInfo:
    """What an operator sees of a stored document (never its body)."""

    doc_id: str
    title: str
    revision: str
    status: str
    chars: int
    updated_at: float
    tenant: str | None = None  # the document's own tenant (None: stored before documents named one)
    metadata: dict[str, Any] | None = None  # its §8 attributes (None: none)


@dataclass(frozen=True)
class IndexState:
    """What an operator sees of how one full-text index is stored (`GET /admin/v1/search-indices`): its
    segments over its primary shards, and what a compaction would merge them into (`domain.segments`)."""

    index: str
    shards: int
    segments: int
    target_segments: int  # per shard one per started 5 GiB: what a compaction leaves
    size_bytes: int  # primary copies
    fragmented: bool  # the compaction rule says merge (an ingestion job's end starts it)
    merging: bool  # a merge runs now (a background one too) or a compaction is pending

    def due(self, force: bool = False) -> bool:
        """A compaction merges it: fragmented, or (`force`, an operator's) above its target segments."""
        return self.fragmented or (force and self.segments > self.target_segments)


@dataclass
class SourceResult:
    """One source's candidates, as the backend found them (no ranking policy: `services.retrieval` fuses).

    `hits`: lexical candidates, best BM25 first, one per document; `cosines`: per lexical hit, its passage's
    cosine with the first query vector of a model the passage has a vector of (None: none); `dense`: the
    dense stage's documents, best cosine first, with that cosine. A failing source has `error` instead."""

    key: str
    hits: list[Hit] = field(default_factory=list)
    error: SourceFailure | None = None
    ms: float = 0.0
    cosines: list[float | None] = field(default_factory=list)
    dense: list[tuple[Hit, float]] = field(default_factory=list)
    # With `QueryAnalysis.evidence`: what the multilingual model saw of this source (the gate's evidence);
    # with `QueryAnalysis.translated` and no lexical hit: per dense hit, its passage's cosine with the
    # translated vector (None: no stored vector of that model), the no-match check.
    evidence: ScriptEvidence | None = None
    dense_checks: list[float | None] = field(default_factory=list)
    # The model each cosine comes from (`cosines`: per lexical hit, None without one; `dense`: per entry), so
    # fusion scales it with the cosines of that model's passages (`Embedder.cjk_model`) whatever script the
    # cited text shows: a passage is embedded with its title and heading path, which may be of another script.
    cosine_models: list[str | None] = field(default_factory=list)
    dense_models: list[str] = field(default_factory=list)


class QueryTranslator(ABC):
    """Words of the other language for a query (Chinese <-> English): cross-lingual lexical matching."""

    name: str

    @abstractmethod
    def expand(self, text: str) -> str:
        """The translated words, space-separated; empty when there are none."""


class Embedder(ABC):
    """Text to unit vectors for the semantic half of hybrid ranking: a query by the model for its script, a
    passage by the models `models_for` names (the model for its script; with cross-script embedding every
    model that covers it, so a Chinese query meets English passages too)."""

    models: tuple[str, ...]  # the ids of the models it may answer with

    @property
    def model_id(self) -> str:
        """The models as one name (banners, capabilities, eval tables)."""
        return "+".join(self.models)

    @abstractmethod
    def dimensions(self, model: str) -> int: ...

    def models_for(self, text: str) -> tuple[str, ...]:
        """The models that embed `text` as a passage."""
        return self.models

    def cjk_model(self, model: str) -> bool | None:
        """Whether `model`'s stored vectors are of CJK passages (True), of Latin ones (False), or of both
        (None: one model for both scripts, so its cosine takes its passage's script) — by which script's
        texts `models_for` gives it (the multilingual model: one id per script, `across_ids`)."""
        cjk, latin = model in self.models_for("中"), model in self.models_for("a")
        return cjk if cjk != latin else None

    def embed_across(self, text: str) -> tuple[Vector, Vector] | None:
        """The query by a multilingual model (the mixed design), once, as two vectors of the same bytes:
        under the id of the other script's passages (it ranks them) and under the id of the query's own
        script's passages (the gate's evidence). None: no multilingual model."""
        return None

    @abstractmethod
    def embed_query(self, text: str) -> Vector | None:
        """The query's vector, or None when no model covers the query's script."""

    @abstractmethod
    def embed_passages(self, texts: Sequence[str], models: Sequence[str] | None = None) -> list[list[Vector]]:
        """Per text its vectors: one of each of `models` (default: every model) that `models_for` names."""


class SearchBackend(ABC):
    """Documents and passages of every source; searched per source, hits grouped by parent document."""

    # True when a search reads its hits and their documents in one consistent read, so every hit it returns
    # is citable as returned (ready, visible, the hit's revision): a live re-check would read it again.
    # False for a near-real-time index (OpenSearch), whose hits are checked against the stored document.
    live_hits: bool = False

    @abstractmethod
    def search(self, queries: list[SourceQuery], query: QueryAnalysis, viewer: Viewer) -> list[SourceResult]:
        """One result per source query, same order, in one round trip where the backend allows: each
        source's lexical candidates (BM25 over `query.lexical`, filtered by source, tenant/ACL and status
        before ranking), their passages' cosines with `query.vectors`, and its dense candidates. A failing
        source reports its error instead of hits."""

    def deferred_vectors(self) -> AbstractContextManager[None]:
        """Within it, this thread's writes store passages without their vectors (BM25 finds them at once)
        and mark vectors pending until `fill_vectors` embeds them. A backend that cannot defer embeds as
        usual."""
        return nullcontext()

    def vectors_pending(self) -> bool:
        """True while stored passages wait for their vectors: every door then ranks by BM25 (one state for
        all of them, read from the store)."""
        return False

    def fill_vectors(self, stop: threading.Event | None = None) -> bool:
        """Embed the passages stored without a vector of a model the embedder assigns them, in small
        batches, checking `stop` between batches; True when none is left (vectors no longer pending)."""
        return True

    def passage_candidates(
        self, hits: Sequence[Hit], query: QueryAnalysis, per_doc: int, timeout_s: float
    ) -> dict[tuple[str, str], list[tuple[Hit, float | None]]]:
        """For each hit's document (of the hit's revision, ready), its best `per_doc` passages by BM25 over
        `query.lexical`, best first — each a copy of the hit with that passage, its page label and its BM25
        score — with the passage's cosine with the first of `query.vectors` of a model it has (None: none),
        read in one round trip within `timeout_s`; domain.citing picks the one a hit shows. A document with
        no matching passage is absent. Raises SourceFailure when the backend cannot answer in time. None by
        default (a hit shows the passage its search found)."""
        return {}

    def neighbour_passages(
        self, hits: Sequence[Hit], radius: int
    ) -> dict[tuple[str, str], list[StoredPassage]]:
        """For each hit's document (of the hit's revision, ready), its passages numbered within `radius` of
        the hit's passage (`Hit.passage_no`; a hit without a number: the passage whose text is the hit's),
        in order, read in one round trip: what a reference quoting its passage in context reads
        (domain.citing.in_context). A document of another revision or no longer there is absent. Raises
        SourceFailure when the backend cannot answer. By default from the stored documents, split again
        (the one splitter every backend indexes with); the backends read only those passages."""
        documents = self.get_documents(list(dict.fromkeys((h.source_key, h.doc_id) for h in hits)))
        out: dict[tuple[str, str], list[StoredPassage]] = {}
        for hit in hits:
            doc = documents.get((hit.source_key, hit.doc_id))
            if doc is None or doc.revision != hit.revision or doc.status != "ready":
                continue
            passages = stored_passages(doc.body, doc.title, doc.structured_source)
            number = hit.passage_no
            if number is None:
                number = next((p.number for p in passages if p.text == hit.passage), None)
            if number is not None:
                out[(hit.source_key, hit.doc_id)] = passages[max(0, number - radius) : number + radius + 1]
        return out

    @abstractmethod
    def get_document(self, source_key: str, doc_id: str) -> Document | None:
        """Raises SourceFailure when the backend cannot answer."""

    @abstractmethod
    def get_documents(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Document]:
        """The stored documents of (source_key, doc_id) keys in one read (one `_mget`, one SQL statement):
        the live check of every hit of a retrieval. Absent keys are missing from the result. Raises
        SourceFailure when the backend cannot answer."""

    @abstractmethod
    def document_states(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], DocumentState]:
        """Source, status, ACL and revision (no body) of the stored documents of (source_key, doc_id) keys,
        in one read: the live check of every hit of a retrieval. Absent keys are missing from the result.
        Raises SourceFailure when the backend cannot answer."""

    @abstractmethod
    def put_documents(self, documents: list[Document]) -> None:
        """Create or replace; searchable when this returns. Raises SourceFailure when the backend cannot
        take the write: transient (down, throttled: an ingestion job waits and retries the batch, no
        attempt counted) or `rejected` (retrying would not change it)."""

    @abstractmethod
    def delete_document(self, source_key: str, doc_id: str) -> bool:
        """Whether it was there. Raises SourceFailure as `put_documents` does."""

    @abstractmethod
    def set_document_status(self, source_key: str, doc_id: str, status: str) -> bool:
        """Whether it was there. Raises SourceFailure as `put_documents` does."""

    def warm(self) -> None:  # noqa: B027 - most backends have nothing to load
        """Start loading, in the background, what a first search would otherwise load (the embedded
        backend's dense indexes) and tidying what searches read (its full-text index compacted when
        fragmented); nothing by default."""

    def close(self, timeout_s: float = 4.0) -> None:  # noqa: B027 - most backends keep nothing pending
        """At shutdown: finish, within `timeout_s`, what a stopping process would otherwise lose (the
        embedded backend's unsaved dense graphs; its background compaction stops after its slice); never
        raises. Nothing by default."""

    @abstractmethod
    def healthy(self, timeout_s: float = 1.0) -> bool: ...

    def prepare(self) -> None:  # noqa: B027 - most backends have nothing to prepare
        """Create the index schema (deploy/admin time; idempotent). Searching and reading never do."""

    def index_states(self) -> list[IndexState]:
        """How the full-text indices are stored, one per index; [] for a backend that keeps none an operator
        can act on. Raises SourceFailure when the backend cannot answer."""
        return []

    def compact(self, force: bool = False) -> bool:
        """Start merging the full-text index's segments in the background when `domain.segments` says it is
        fragmented (`force`: whenever it has more than its target, as an operator asks), and return at once:
        whether a merge was started. Searches and writes go on meanwhile. Raises SourceFailure when the
        backend cannot answer."""
        return False

    def untenanted_documents(self, source_key: str, limit: int = 10_000) -> list[str]:
        """Doc ids of the source's documents stored without a tenant (before SPEC §1 required one)."""
        raise NotImplementedError

    @abstractmethod
    def list_documents(self, source_key: str, limit: int = 1000) -> list[DocumentInfo]:
        """The documents of one source (any status), by doc id, at most `limit` (operators, the console).
        Raises SourceFailure when the backend cannot answer."""

    def document_ids(self, source_key: str, prefix: str = "") -> list[str]:
        """Every document id of a source (those starting with `prefix`), for a sync to find the ones that
        left its directory. Raises SourceFailure when the backend cannot answer."""
        raise NotImplementedError

    def metadata_keys(self, *, source_key: str | None = None, tenant: str | None = None) -> set[str]:
        """The distinct metadata keys of the stored documents of `source_key`, or of `tenant` (its own; an
        index may count those shared with it too), for the metadata key quotas (domain/metadata_quota.py).
        Raises SourceFailure when the backend cannot answer."""
        raise NotImplementedError


@dataclass(frozen=True)
class TurnRecord:
    """The idempotency record of one turn (A-TURN): claimed `pending`, then `done` with its response."""

    key: str
    request_hash: str
    state: str  # pending | done
    claim: str  # the claimer's random token; only it may complete or release the record
    claimed_at: float
    expires_at: int
    run_id: str | None = None
    response: dict[str, Any] | None = None
    # digest of the principal that claimed the turn; None on a record written before turns bound it
    principal: str | None = None


class TurnStore(ABC):
    @abstractmethod
    def claim_turn(
        self, key: str, request_hash: str, claim: str, now: float, expires_at: int, *, principal: str | None
    ) -> TurnRecord | None:
        """Conditional put of a `pending` record of `principal`. None when this call claimed the turn, else
        the live record that exists (an expired record counts as absent)."""

    @abstractmethod
    def get_turn(self, key: str, now: float) -> TurnRecord | None: ...

    @abstractmethod
    def set_turn_run(self, key: str, claim: str, run_id: str) -> bool:
        """Remember the run of a pending claim; False when the claim was lost."""

    @abstractmethod
    def complete_turn(self, key: str, claim: str, response: dict[str, Any]) -> bool:
        """pending -> done with the response, only for the holder of `claim`."""

    @abstractmethod
    def release_turn(self, key: str, claim: str) -> None:
        """Drop a pending claim that failed, so a retry can start over."""

    @abstractmethod
    def take_over_turn(self, key: str, old_claim: str, new_claim: str, now: float) -> bool:
        """Replace a stale pending claim (its holder died); False when someone else moved first."""


@dataclass(frozen=True)
class ChainSnapshot:
    """What the ledger holds for one invocation chain of a root tree, read at one moment."""

    root_id: str
    chain_ids: tuple[str, ...]  # the invocations asked for, root first
    entries: dict[str, LedgerEntry]  # those of them that exist
    seq: int = 0  # citations numbered so far in the root tree
    # fingerprint -> its citation, as far as the adapter decides reuse from the snapshot (DynamoDB: every
    # citation of the tree, marked on the root item); one that re-reads inside its write may leave it empty
    cited: dict[str, CitationMark] = field(default_factory=dict)
    agents: dict[str, AgentDefinition | None] = field(default_factory=dict)  # read in the same round trip

    def chain(self) -> list[LedgerEntry]:
        """The entries root first; after a charge every one of them exists."""
        return [self.entries[i] for i in self.chain_ids]


class BudgetLedger(ABC):
    """Per-invocation budgets and citations of one root invocation tree (R-BUDGET), kept atomically.

    A tool call reads the chain once (`open_chain`), charges its source requests (`charge_retrievals`,
    which also creates the entries seen for the first time) and records its citations
    (`record_citations`): one write each, whatever the depth of the chain."""

    @abstractmethod
    def open_chain(
        self, root_id: str, invocation_ids: list[str], agent_keys: Sequence[str] = ()
    ) -> ChainSnapshot:
        """The existing entries of `invocation_ids` and the root tree's citations; `agent_keys`' published
        definitions are read in the same round trip (a cold caller needs both)."""

    @abstractmethod
    def charge_retrievals(
        self, snapshot: ChainSnapshot, links: list[ChainLink], source_keys: list[str], now: float
    ) -> ChainSnapshot:
        """One request to each source, charged to every link of the chain (root first) in one conditional
        write that also creates the entries not seen before, with their agent's limits. ProtocolError
        when a known invocation is announced with another agent or parent; BudgetExceeded when any entry
        would go over a limit. Either way nothing is charged or created anywhere."""

    @abstractmethod
    def record_citations(
        self, snapshot: ChainSnapshot, drafts: list[CitationDraft], now: float
    ) -> tuple[list[Citation | None], ChainSnapshot]:
        """Per draft: the existing citation of the same content (no new chars), a new one cut to the
        smallest remaining char budget of the chain, or None when no chars remain. Atomic per call; the
        chain is the snapshot's (charged before, so every entry exists)."""

    @abstractmethod
    def entry(self, root_id: str, invocation_id: str) -> LedgerEntry | None: ...

    @abstractmethod
    def citations(self, root_id: str) -> list[Citation]:
        """Every citation of a root tree (operations and tests)."""

    @abstractmethod
    def tree(self, root_id: str) -> list[LedgerEntry]:
        """Every ledger entry of a root tree, root first then by invocation id (operations, the console)."""


class JobStore(ABC):
    """Ingestion jobs (I-INGEST) and their documents. A job is worked on by one worker at a time, under a
    lease (`claim_job`) that the worker renews while it is alive; when it dies the lease runs out and
    another worker (or a restarted `kb serve`) claims the job and carries on with its queued documents."""

    # The largest document payload (compressed JSON) one stored document may carry; None = no limit.
    max_payload_bytes: int | None = None

    @abstractmethod
    def create_job(self, job: IngestionJob, documents: list[JobDocument]) -> None:
        """The job and every document of it, visible together (a job is never seen half-created)."""

    @abstractmethod
    def get_job(self, job_id: str) -> IngestionJob | None: ...

    @abstractmethod
    def list_jobs(self, source_key: str, limit: int = 20) -> list[IngestionJob]:
        """The source's jobs, newest first."""

    @abstractmethod
    def job_documents(
        self, job_id: str, *, state: DocState | None = None, after_seq: int = -1, limit: int = 100
    ) -> list[JobDocument]:
        """Documents of a job in `seq` order after `after_seq` (only those in `state` when given)."""

    @abstractmethod
    def claim_job(
        self, worker: str, now: float, lease_s: float, job_id: str | None = None
    ) -> IngestionJob | None:
        """Lease an unfinished job whose lease is free (`job_id`, or the oldest) to `worker`; None when
        there is none."""

    @abstractmethod
    def renew_lease(self, job_id: str, worker: str, now: float, lease_s: float) -> bool:
        """False when `worker` no longer holds the job."""

    @abstractmethod
    def record_outcomes(
        self, job_id: str, worker: str, outcomes: list[DocumentOutcome], now: float, lease_s: float
    ) -> bool:
        """Queued documents -> their outcomes (payloads dropped, but a failed one's kept: its error names
        the file or object) and the job's counters, together, only
        while `worker` holds the job (the lease is renewed); False otherwise, and nothing changes."""

    @abstractmethod
    def finish_job(
        self, job_id: str, worker: str, now: float, deleted: int = 0, state: JobState = "completed"
    ) -> bool:
        """running -> completed (with the documents a sync deleted) or cancelled, only for the holder."""

    @abstractmethod
    def begin_documents(self, job_id: str, worker: str, seqs: list[int], delta: int = 1) -> bool:
        """Count one more attempt on these queued documents before working them (a worker that dies on
        a document leaves its count behind: a poison document ends failed, never retried forever);
        `delta=-1` takes an attempt back (it ended cleanly, the search backend was down). False, and
        nothing changes, when `worker` no longer holds the job."""

    @abstractmethod
    def cancel_job(self, job_id: str, now: float) -> IngestionJob | None:
        """Ask an unfinished job to stop: with no live lease holder it is `cancelled` at once, else its
        holder stops after the batch it is on. Counts are kept; a finished job is left as it is. None
        when there is no such job."""

    @abstractmethod
    def release_job(self, job_id: str, worker: str) -> None:
        """Give the lease up early (a worker out of time), so another can claim the job at once."""


class JobQueue(ABC):
    """Wakes a worker for a job (SQS on AWS); `kb serve`'s worker thread polls the job store instead."""

    @abstractmethod
    def enqueue(self, job_id: str, delay_s: int = 0) -> None: ...


class ObjectStore(ABC):
    """An S3-API object store an ingestion job reads (I-INGEST: a prefix to sync). Failures are
    `ObjectStoreError` with a typed code; nothing else escapes."""

    @abstractmethod
    def list_objects(self, bucket: str, prefix: str, limit: int) -> list[StoredObject]:
        """Every object under `prefix` in key order, at most `limit` + 1 (so a caller sees "too many")."""

    @abstractmethod
    def head_object(self, bucket: str, key: str) -> StoredObject | None:
        """The object's ETag and size, or None when there is no such object."""

    @abstractmethod
    def get_object(self, bucket: str, key: str, max_bytes: int) -> tuple[bytes, str]:
        """The object's bytes and ETag; `too_large` once more than `max_bytes` arrive (never read on)."""


@dataclass(frozen=True)
class StateStores:
    """Every state port, as one adapter family provides them (SQLite file, or one DynamoDB table)."""

    registry: Registry
    sessions: SessionStore
    runs: RunStore
    turns: TurnStore
    ledger: BudgetLedger
    jobs: JobStore

"""Ingestion jobs in the single DynamoDB table (I-INGEST).

Items: the job `pk=JOB#<id>, sk=META` (spec, state, counters, lease: `worker`, `lease_until`); one item per
document `pk=JOB#<id>, sk=DOC#<seq>` (doc_id, state, error, passages, the payload as zlib-compressed JSON
until it is handled); pointers `pk=JOBS#<source key>` (list per source) and `pk=JOBS#OPEN` (unfinished
jobs, for a worker looking for work), both `sk=<created>#<id>`. A job's META is written last, so a job is
never seen half-created; outcomes and counters change in one transaction, only while the lease is held."""

from __future__ import annotations

import json
from typing import Any

from ...domain.errors import Conflict
from ...domain.ingestion import (
    JOB_TTL_SECONDS,
    DocState,
    DocumentOutcome,
    IngestionJob,
    JobDocument,
    JobSpec,
    JobState,
    decode_payload,
    encode_payload,
    initial_counts,
    outcome_deltas,
    spec_json,
)
from ...ports import JobStore
from .table import TTL_ATTRIBUTE, TableAdapter, _n, _s

_OPEN = "JOBS#OPEN"
_COUNTERS = ("queued", "done", "unchanged", "failed", "deleted", "passages")
_TRANSACT_MAX = 100


def _pk(job_id: str) -> str:
    return f"JOB#{job_id}"


def _doc_sk(seq: int) -> str:
    return f"DOC#{seq:08d}"


def _pointer_sk(job: IngestionJob) -> str:
    return f"{job.created_at:017.6f}#{job.job_id}"


class DynamoJobStore(TableAdapter, JobStore):
    max_payload_bytes = 350_000  # an item is at most 400 KB

    def _key(self, pk: str, sk: str) -> dict[str, Any]:
        return {"pk": _s(pk), "sk": _s(sk)}

    @staticmethod
    def _job(item: dict[str, Any]) -> IngestionJob:
        def num(name: str) -> float | None:
            value = item.get(name, {}).get("N")
            return float(value) if value is not None else None

        counts = {name: int(item[name]["N"]) for name in _COUNTERS if name != "passages"}
        return IngestionJob(
            job_id=item["pk"]["S"][4:],
            source_key=item["source_key"]["S"],
            created_at=float(item["created_at"]["N"]),
            total=int(item["total"]["N"]),
            spec=JobSpec(**json.loads(item["spec"]["S"])),
            state=item["state"]["S"],
            counts=counts,
            passages=int(item["passages"]["N"]),
            started_at=num("started_at"),
            updated_at=num("updated_at"),
            finished_at=num("finished_at"),
            worker=item.get("worker", {}).get("S"),
            lease_until=num("lease_until") or 0.0,
            cancel_requested=item.get("cancel_requested", {}).get("BOOL", False),
        )

    def _write_batch(self, items: list[dict[str, Any]]) -> None:
        for i in range(0, len(items), 25):
            request: dict[str, Any] = {
                self._table: [{"PutRequest": {"Item": item}} for item in items[i : i + 25]]
            }
            while request:
                with self._call():
                    resp = self._client.batch_write_item(RequestItems=request)
                request = resp.get("UnprocessedItems") or {}

    def _transact(self, actions: list[dict[str, Any]]) -> list[str | None] | None:
        """One transaction: None when committed, else the cancellation reason per action."""
        with self._call():
            try:
                self._client.transact_write_items(TransactItems=actions)
                return None
            except self._client_error as exc:
                if exc.response["Error"]["Code"] == "TransactionCanceledException":
                    reasons = exc.response.get("CancellationReasons") or []
                    return [r.get("Code") if r.get("Code") not in (None, "None") else None for r in reasons]
                raise

    def create_job(self, job: IngestionJob, documents: list[JobDocument]) -> None:
        ttl = _n(int(job.created_at) + JOB_TTL_SECONDS)
        pk = _pk(job.job_id)
        doc_items = []
        for d in documents:
            item = {
                **self._key(pk, _doc_sk(d.seq)),
                "doc_id": _s(d.doc_id),
                "state": _s(d.state),
                "passages": _n(d.passages),
                TTL_ATTRIBUTE: ttl,
            }
            if d.error:
                item["error"] = _s(d.error)
            # a document failed at submit (`doc_id_collision`) keeps its payload: its error names its file
            payload = encode_payload(d.payload) if d.state in ("queued", "failed") else None
            if payload is not None:
                item["payload"] = {"B": payload}
            doc_items.append(item)
        self._write_batch(doc_items)
        counts = initial_counts(documents)
        meta = {
            **self._key(pk, "META"),
            "source_key": _s(job.source_key),
            "spec": _s(spec_json(job.spec)),
            "state": _s("queued"),
            "total": _n(len(documents)),
            **{name: _n(counts.get(name, 0)) for name in _COUNTERS},
            "created_at": _n(job.created_at),
            "updated_at": _n(job.created_at),
            "lease_until": _n(0),
            TTL_ATTRIBUTE: ttl,
        }
        pointer = {"job_id": _s(job.job_id), TTL_ATTRIBUTE: ttl}
        refused = self._transact(
            [
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": meta,
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": {**self._key(f"JOBS#{job.source_key}", _pointer_sk(job)), **pointer},
                    }
                },
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": {**self._key(_OPEN, _pointer_sk(job)), **pointer},
                    }
                },
            ]
        )
        if refused is not None:
            raise Conflict("job already exists")

    def get_job(self, job_id: str) -> IngestionJob | None:
        item = self._get(_pk(job_id), "META")
        return self._job(item) if item else None

    def _pointers(self, pk: str, limit: int, newest_first: bool) -> list[str]:
        with self._call():
            resp = self._client.query(
                TableName=self._table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": _s(pk)},
                ScanIndexForward=not newest_first,
                Limit=limit,
                ConsistentRead=True,
            )
        return [item["job_id"]["S"] for item in resp.get("Items", [])]

    def _jobs(self, job_ids: list[str]) -> list[IngestionJob]:
        found = {
            item["pk"]["S"][4:]: self._job(item)
            for item in self._batch_get([self._key(_pk(j), "META") for j in job_ids])
        }
        return [found[j] for j in job_ids if j in found]

    def list_jobs(self, source_key: str, limit: int = 20) -> list[IngestionJob]:
        return self._jobs(self._pointers(f"JOBS#{source_key}", limit, newest_first=True))

    def job_documents(
        self, job_id: str, *, state: DocState | None = None, after_seq: int = -1, limit: int = 100
    ) -> list[JobDocument]:
        out: list[JobDocument] = []
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :from AND :to",
            "ExpressionAttributeValues": {
                ":pk": _s(_pk(job_id)),
                ":from": _s(_doc_sk(after_seq + 1)),
                ":to": _s("DOC#~"),
            },
            "ConsistentRead": True,
        }
        if state is not None:
            request["FilterExpression"] = "#st = :st"
            request["ExpressionAttributeNames"] = {"#st": "state"}
            request["ExpressionAttributeValues"][":st"] = _s(state)
        while len(out) < limit:
            with self._call():
                resp = self._client.query(**request)
            for item in resp.get("Items", []):
                raw = item.get("payload", {}).get("B")
                out.append(
                    JobDocument(
                        seq=int(item["sk"]["S"][4:]),
                        doc_id=item["doc_id"]["S"],
                        payload=decode_payload(raw),
                        state=item["state"]["S"],
                        error=item.get("error", {}).get("S"),
                        passages=int(item["passages"]["N"]),
                        attempts=int(item.get("attempts", {}).get("N", 0)),
                    )
                )
            if "LastEvaluatedKey" not in resp:
                break
            request["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        return out[:limit]

    def claim_job(
        self, worker: str, now: float, lease_s: float, job_id: str | None = None
    ) -> IngestionJob | None:
        candidates = [job_id] if job_id else self._pointers(_OPEN, 25, newest_first=False)
        for candidate in candidates:
            resp = self._conditional(
                "update_item",
                Key=self._key(_pk(candidate), "META"),
                UpdateExpression="SET #st = :running, worker = :w, lease_until = :until, "
                "started_at = if_not_exists(started_at, :now), updated_at = :now",
                ConditionExpression="attribute_exists(pk) AND NOT #st IN (:completed, :cancelled) "
                "AND lease_until < :now",
                ExpressionAttributeNames={"#st": "state"},
                ExpressionAttributeValues={
                    ":running": _s("running"),
                    ":completed": _s("completed"),
                    ":cancelled": _s("cancelled"),
                    ":w": _s(worker),
                    ":until": _n(now + lease_s),
                    ":now": _n(now),
                },
                ReturnValues="ALL_NEW",
            )
            if resp is not None:
                return self._job(resp["Attributes"])
        return None

    @staticmethod
    def _held() -> dict[str, Any]:
        """The condition of every write only the lease holder may make (values `:w`, `:running`)."""
        return {
            "ConditionExpression": "worker = :w AND #st = :running",
            "ExpressionAttributeNames": {"#st": "state"},
        }

    def renew_lease(self, job_id: str, worker: str, now: float, lease_s: float) -> bool:
        return (
            self._conditional(
                "update_item",
                Key=self._key(_pk(job_id), "META"),
                UpdateExpression="SET lease_until = :until",
                ExpressionAttributeValues={
                    ":until": _n(now + lease_s),
                    ":w": _s(worker),
                    ":running": _s("running"),
                },
                **self._held(),
            )
            is not None
        )

    def record_outcomes(
        self, job_id: str, worker: str, outcomes: list[DocumentOutcome], now: float, lease_s: float
    ) -> bool:
        pk = _pk(job_id)
        for i in range(0, len(outcomes), _TRANSACT_MAX - 1):
            chunk = outcomes[i : i + _TRANSACT_MAX - 1]
            deltas, passages = outcome_deltas(chunk)
            meta = {
                "Update": {
                    "TableName": self._table,
                    "Key": self._key(pk, "META"),
                    "UpdateExpression": "ADD queued :q, done :d, unchanged :u, failed :f, passages :p "
                    "SET updated_at = :now, lease_until = :until",
                    "ExpressionAttributeValues": {
                        ":q": _n(deltas["queued"]),
                        ":d": _n(deltas["done"]),
                        ":u": _n(deltas["unchanged"]),
                        ":f": _n(deltas["failed"]),
                        ":p": _n(passages),
                        ":now": _n(now),
                        ":until": _n(now + lease_s),
                        ":w": _s(worker),
                        ":running": _s("running"),
                    },
                    **self._held(),
                }
            }
            docs = []
            for o in chunk:
                values = {":st": _s(o.state), ":p": _n(o.passages), ":queued": _s("queued")}
                update = "SET #st = :st, passages = :p REMOVE payload"
                if o.error:  # a failed document keeps its payload: its error names the file or object
                    values[":e"] = _s(o.error)
                    update = "SET #st = :st, passages = :p, #err = :e"
                docs.append(
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(pk, _doc_sk(o.seq)),
                            "UpdateExpression": update,
                            "ConditionExpression": "#st = :queued",
                            "ExpressionAttributeNames": {
                                "#st": "state",
                                **({"#err": "error"} if o.error else {}),
                            },
                            "ExpressionAttributeValues": values,
                        }
                    }
                )
            refused = self._transact([meta, *docs])
            if refused is not None:
                if refused and refused[0] is None:  # the lease holds: a document was handled already
                    raise Conflict("job documents already handled")
                return False
        return True

    def finish_job(
        self, job_id: str, worker: str, now: float, deleted: int = 0, state: JobState = "completed"
    ) -> bool:
        job = self.get_job(job_id)
        if job is None:
            return False
        refused = self._transact(
            [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": self._key(_pk(job_id), "META"),
                        "UpdateExpression": "SET #st = :final, deleted = :del, finished_at = :now, "
                        "updated_at = :now, lease_until = :zero",
                        "ExpressionAttributeValues": {
                            ":final": _s(state),
                            ":del": _n(deleted),
                            ":now": _n(now),
                            ":zero": _n(0),
                            ":w": _s(worker),
                            ":running": _s("running"),
                        },
                        **self._held(),
                    }
                },
                {"Delete": {"TableName": self._table, "Key": self._key(_OPEN, _pointer_sk(job))}},
            ]
        )
        return refused is None

    def begin_documents(self, job_id: str, worker: str, seqs: list[int], delta: int = 1) -> bool:
        pk = _pk(job_id)
        for i in range(0, len(seqs), _TRANSACT_MAX - 1):
            held = {  # a no-op write under the holder's condition (the worker's policy has no ConditionCheck)
                "Update": {
                    "TableName": self._table,
                    "Key": self._key(pk, "META"),
                    "UpdateExpression": "SET worker = :w",
                    "ExpressionAttributeValues": {":w": _s(worker), ":running": _s("running")},
                    **self._held(),
                }
            }
            docs = [
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": self._key(pk, _doc_sk(seq)),
                        "UpdateExpression": "ADD attempts :delta",
                        "ExpressionAttributeValues": {":delta": _n(delta)},
                    }
                }
                for seq in seqs[i : i + _TRANSACT_MAX - 1]
            ]
            if self._transact([held, *docs]) is not None:
                return False
        return True

    def cancel_job(self, job_id: str, now: float) -> IngestionJob | None:
        job = self.get_job(job_id)
        if job is None or job.finished:
            return job
        requested = self._conditional(
            "update_item",
            Key=self._key(_pk(job_id), "META"),
            UpdateExpression="SET cancel_requested = :yes, updated_at = :now",
            ConditionExpression="NOT #st IN (:completed, :cancelled)",
            ExpressionAttributeNames={"#st": "state"},
            ExpressionAttributeValues={
                ":yes": {"BOOL": True},
                ":now": _n(now),
                ":completed": _s("completed"),
                ":cancelled": _s("cancelled"),
            },
        )
        if requested is not None:
            # No live holder (queued, or its worker died): cancelled now; else the holder stops.
            self._transact(
                [
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(_pk(job_id), "META"),
                            "UpdateExpression": "SET #st = :cancelled, finished_at = :now, "
                            "lease_until = :zero",
                            "ConditionExpression": "NOT #st IN (:completed, :cancelled) "
                            "AND lease_until < :now",
                            "ExpressionAttributeNames": {"#st": "state"},
                            "ExpressionAttributeValues": {
                                ":cancelled": _s("cancelled"),
                                ":completed": _s("completed"),
                                ":now": _n(now),
                                ":zero": _n(0),
                            },
                        }
                    },
                    {"Delete": {"TableName": self._table, "Key": self._key(_OPEN, _pointer_sk(job))}},
                ]
            )
        return self.get_job(job_id)

    def release_job(self, job_id: str, worker: str) -> None:
        self._conditional(
            "update_item",
            Key=self._key(_pk(job_id), "META"),
            UpdateExpression="SET lease_until = :zero",
            ConditionExpression="worker = :w",
            ExpressionAttributeValues={":zero": _n(0), ":w": _s(worker)},
        )

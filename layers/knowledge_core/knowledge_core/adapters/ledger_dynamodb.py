"""The budget ledger (R-BUDGET) on the service's single DynamoDB table.

Items of one root invocation tree share a partition:
  pk = LEDGER#<root invocation id>, sk = INV#<invocation id>
      agent, parent, depth, mr/mq/mc (limits, fixed on first sight), r (retrievals), c (citation chars),
      "q#<id@version>" (requests per exact source), deadline, seq (citations numbered, root only), ttl
  pk = LEDGER#<root invocation id>, sk = CITE#<fingerprint>
      cid (citation id, unique within the root), knowledge, doc_id, content, retrieval_id, invocation_id, ttl

Every spend is one TransactWriteItems over the chain (self and each ancestor up to the root) whose
conditions hold only if every entry stays within its limits, so a refusal charges nothing anywhere and
concurrent callers never overspend. Citation chars are granted optimistically (read the chain, cut to the
smallest remaining budget, write conditionally, retry on a lost race)."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from ..domain.budget import ChainLink, LedgerEntry, Limits, chars_remaining, grant_chars, retrieval_refusal
from ..domain.errors import BudgetExceeded, ProtocolError, StateUnavailable
from ..ports import BudgetLedger, Citation, CitationDraft
from .dynamodb import TableAdapter, _n, _s

LEDGER_TTL_SECONDS = 7 * 86400
MAX_ATTEMPTS = 64
_RETRY_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})


class SerializedClient:
    """A boto3 client whose calls run one at a time. For moto in-process only: its TransactWriteItems
    rolls back by restoring a table snapshot, which would erase concurrent writes of other threads."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("get_waiter") or name == "can_paginate":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


class DynamoLedger(TableAdapter, BudgetLedger):
    def __init__(self, client: Any, table_name: str) -> None:
        super().__init__(client, table_name)
        self.stats = {"transactions": 0, "retries": 0}

    # --- plumbing --------------------------------------------------------------------------------
    @staticmethod
    def _pk(root_id: str) -> dict:
        return _s(f"LEDGER#{root_id}")

    def _key(self, root_id: str, sk: str) -> dict:
        return {"pk": self._pk(root_id), "sk": _s(sk)}

    def _batch_get(self, keys: list[dict]) -> list[dict]:
        items: list[dict] = []
        for i in range(0, len(keys), 100):
            request: dict = {self._table: {"Keys": keys[i : i + 100], "ConsistentRead": True}}
            while request:
                with self._call():
                    resp = self._client.batch_get_item(RequestItems=request)
                items.extend(resp["Responses"].get(self._table, []))
                request = resp.get("UnprocessedKeys") or {}
        return items

    def _transact(self, items: list[dict]) -> list[str | None] | None:
        """Run one transaction. None = committed; else the cancellation reason code per item."""
        try:
            with self._call():
                self._client.transact_write_items(TransactItems=items)
            self.stats["transactions"] += 1
            return None
        except self._client_error as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "TransactionCanceledException":
                reasons = exc.response.get("CancellationReasons") or []
                return [r.get("Code") if r.get("Code") not in (None, "None") else None for r in reasons] or [
                    "TransactionConflict"
                ]
            if code == "TransactionConflictException":
                return ["TransactionConflict"]
            raise

    def _backoff(self, attempt: int) -> None:
        self.stats["retries"] += 1
        time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))

    @staticmethod
    def _entry(item: dict) -> LedgerEntry:
        per_source = {name[2:]: int(v["N"]) for name, v in item.items() if name.startswith("q#")}
        return LedgerEntry(
            invocation_id=item["sk"]["S"][4:],
            agent=item["agent"]["S"],
            parent=item["parent"]["S"] if "parent" in item else None,
            limits=Limits(int(item["mr"]["N"]), int(item["mq"]["N"]), int(item["mc"]["N"])),
            retrievals=int(item["r"]["N"]),
            chars=int(item["c"]["N"]),
            per_source=per_source,
            deadline=float(item["deadline"]["N"]) if "deadline" in item else None,
        )

    # --- BudgetLedger ------------------------------------------------------------------------------
    def open_chain(self, root_id: str, links: list[ChainLink], now: float) -> list[LedgerEntry]:
        found = {
            item["sk"]["S"][4:]: item
            for item in self._batch_get([self._key(root_id, f"INV#{link.invocation_id}") for link in links])
        }
        entries: list[LedgerEntry] = []
        for depth, link in enumerate(links):
            parent = links[depth - 1].invocation_id if depth else None
            item = found.get(link.invocation_id) or self._create(root_id, link, parent, depth, now)
            entry = self._entry(item)
            if entry.agent != link.agent or entry.parent != parent:
                raise ProtocolError(
                    f"invocation {link.invocation_id} is already known with another agent or parent"
                )
            entries.append(entry)
        return entries

    def _create(self, root_id: str, link: ChainLink, parent: str | None, depth: int, now: float) -> dict:
        item = {
            **self._key(root_id, f"INV#{link.invocation_id}"),
            "agent": _s(link.agent),
            "depth": _n(depth),
            "mr": _n(link.limits.max_retrievals),
            "mq": _n(link.limits.max_queries_per_source),
            "mc": _n(link.limits.max_context_chars),
            "r": _n(0),
            "c": _n(0),
            "seq": _n(0),
            "created_at": _n(int(now)),
            "ttl": _n(int(now) + LEDGER_TTL_SECONDS),
        }
        if parent is not None:
            item["parent"] = _s(parent)
        if link.deadline is not None:
            item["deadline"] = _n(round(link.deadline, 3))
        with self._call():
            try:
                self._client.put_item(
                    TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
                )
                return item
            except self._client_error as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
        with self._call():  # someone created it first: theirs is the entry
            return self._client.get_item(
                TableName=self._table,
                Key=self._key(root_id, f"INV#{link.invocation_id}"),
                ConsistentRead=True,
            )["Item"]

    def charge_retrievals(self, root_id: str, chain: list[LedgerEntry], source_keys: list[str]) -> None:
        if not source_keys:
            return
        items = []
        for entry in chain:
            names = {"#r": "r"}
            values = {
                ":n": _n(len(source_keys)),
                ":cap": _n(entry.limits.max_retrievals - len(source_keys)),
                ":one": _n(1),
                ":zero": _n(0),
                ":qcap": _n(entry.limits.max_queries_per_source - 1),
            }
            sets = ["#r = #r + :n"]
            conditions = ["#r <= :cap"]
            for i, key in enumerate(source_keys):
                names[f"#q{i}"] = f"q#{key}"
                sets.append(f"#q{i} = if_not_exists(#q{i}, :zero) + :one")
                conditions.append(f"(attribute_not_exists(#q{i}) OR #q{i} <= :qcap)")
            items.append(
                {
                    "Update": {
                        "TableName": self._table,
                        "Key": self._key(root_id, f"INV#{entry.invocation_id}"),
                        "UpdateExpression": "SET " + ", ".join(sets),
                        "ConditionExpression": "attribute_exists(pk) AND " + " AND ".join(conditions),
                        "ExpressionAttributeNames": names,
                        "ExpressionAttributeValues": values,
                    }
                }
            )
        for attempt in range(MAX_ATTEMPTS):
            reasons = self._transact(items)
            if reasons is None:
                return
            if "ConditionalCheckFailed" in reasons:
                fresh = self._chain(root_id, [e.invocation_id for e in chain])
                raise BudgetExceeded(
                    retrieval_refusal(fresh, source_keys) or "knowledge retrieval budget exhausted"
                )
            _check_retryable(reasons)
            self._backoff(attempt)
        raise StateUnavailable("ledger is too contended; try again")

    def _chain(self, root_id: str, chain_ids: list[str]) -> list[LedgerEntry]:
        by_id = {
            item["sk"]["S"][4:]: item
            for item in self._batch_get([self._key(root_id, f"INV#{i}") for i in chain_ids])
        }
        return [self._entry(by_id[i]) for i in chain_ids]

    def record_citations(
        self, root_id: str, chain_ids: list[str], drafts: list[CitationDraft], now: float
    ) -> list[Citation | None]:
        if not drafts:
            return []
        fingerprints = list(dict.fromkeys(d.fingerprint for d in drafts))
        for attempt in range(MAX_ATTEMPTS):
            items = self._batch_get(
                [self._key(root_id, f"INV#{i}") for i in chain_ids]
                + [self._key(root_id, f"CITE#{fp}") for fp in fingerprints]
            )
            entries = {it["sk"]["S"][4:]: it for it in items if it["sk"]["S"].startswith("INV#")}
            existing = {it["sk"]["S"][5:]: it for it in items if it["sk"]["S"].startswith("CITE#")}
            chain = [self._entry(entries[i]) for i in chain_ids]
            root_item = entries[chain_ids[0]]
            seq = int(root_item["seq"]["N"])
            result: list[Citation | None] = []
            new_drafts: dict[str, CitationDraft] = {}
            for draft in drafts:
                if draft.fingerprint in existing:
                    result.append(_citation(existing[draft.fingerprint], created=False))
                elif draft.fingerprint not in new_drafts:
                    new_drafts[draft.fingerprint] = draft
                    result.append(None)  # filled below
                else:
                    result.append(None)
            grants = dict(
                zip(
                    new_drafts,
                    grant_chars([len(d.content) for d in new_drafts.values()], chars_remaining(chain)),
                    strict=True,
                )
            )
            created: dict[str, Citation] = {}
            puts = []
            for fp, draft in new_drafts.items():
                if grants[fp] <= 0:
                    continue
                seq += 1
                citation = Citation(
                    citation_id=f"cite-{seq}",
                    fingerprint=fp,
                    knowledge=draft.knowledge,
                    content=draft.content[: grants[fp]],
                    retrieval_id=draft.retrieval_id,
                    created=True,
                )
                created[fp] = citation
                puts.append(
                    {
                        "Put": {
                            "TableName": self._table,
                            "ConditionExpression": "attribute_not_exists(pk)",
                            "Item": {
                                **self._key(root_id, f"CITE#{fp}"),
                                "cid": _s(citation.citation_id),
                                "knowledge": _s(draft.knowledge),
                                "doc_id": _s(draft.doc_id),
                                "content": _s(citation.content),
                                "retrieval_id": _s(draft.retrieval_id),
                                "invocation_id": _s(draft.invocation_id),
                                "created_at": _n(int(now)),
                                "ttl": _n(int(now) + LEDGER_TTL_SECONDS),
                            },
                        }
                    }
                )
            if not created:
                return self._fill(drafts, result, created, existing)
            total = sum(len(c.content) for c in created.values())
            updates = []
            for depth, entry in enumerate(chain):
                values = {":n": _n(total), ":cap": _n(entry.limits.max_context_chars - total)}
                update = "SET #c = #c + :n"
                condition = "#c <= :cap"
                if depth == 0:  # citation ids are numbered on the root: a concurrent numbering retries
                    values |= {":seq": _n(seq), ":seen": root_item["seq"]}
                    update += ", #seq = :seq"
                    condition += " AND #seq = :seen"
                updates.append(
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(root_id, f"INV#{entry.invocation_id}"),
                            "UpdateExpression": update,
                            "ConditionExpression": condition,
                            "ExpressionAttributeNames": {
                                "#c": "c",
                                **({"#seq": "seq"} if depth == 0 else {}),
                            },
                            "ExpressionAttributeValues": values,
                        }
                    }
                )
            reasons = self._transact(updates + puts)
            if reasons is None:
                return self._fill(drafts, result, created, existing)
            _check_retryable(reasons)
            self._backoff(attempt)
        raise StateUnavailable("ledger is too contended; try again")

    @staticmethod
    def _fill(
        drafts: list[CitationDraft],
        result: list[Citation | None],
        created: dict[str, Citation],
        existing: dict[str, dict],
    ) -> list[Citation | None]:
        out: list[Citation | None] = []
        seen: set[str] = set()
        for draft, current in zip(drafts, result, strict=True):
            if current is not None:
                out.append(current)
            elif draft.fingerprint in created:
                citation = created[draft.fingerprint]
                # The same content twice in one call: the second mention reuses the first's id.
                out.append(
                    citation
                    if draft.fingerprint not in seen
                    else Citation(
                        citation.citation_id,
                        citation.fingerprint,
                        citation.knowledge,
                        citation.content,
                        citation.retrieval_id,
                        created=False,
                    )
                )
            else:
                out.append(None)
            seen.add(draft.fingerprint)
        return out

    def entry(self, root_id: str, invocation_id: str) -> LedgerEntry | None:
        with self._call():
            item = self._client.get_item(
                TableName=self._table, Key=self._key(root_id, f"INV#{invocation_id}"), ConsistentRead=True
            ).get("Item")
        return self._entry(item) if item else None

    def citations(self, root_id: str) -> list[Citation]:
        """Every citation of a root tree (operations and tests)."""
        out: list[Citation] = []
        kwargs: dict = {
            "TableName": self._table,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :cite)",
            "ExpressionAttributeValues": {":pk": self._pk(root_id), ":cite": _s("CITE#")},
        }
        while True:
            with self._call():
                resp = self._client.query(**kwargs)
            out.extend(_citation(item, created=False) for item in resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                return out
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]


def _check_retryable(reasons: list[str | None]) -> None:
    """Lost races and throttling retry; anything else is a bug in the request, not contention."""
    unexpected = {r for r in reasons if r is not None} - _RETRY_REASONS - {"ConditionalCheckFailed"}
    if unexpected:
        raise RuntimeError(f"ledger transaction cancelled: {sorted(unexpected)}")


def _citation(item: dict, *, created: bool) -> Citation:
    return Citation(
        citation_id=item["cid"]["S"],
        fingerprint=item["sk"]["S"][5:],
        knowledge=item["knowledge"]["S"],
        content=item["content"]["S"],
        retrieval_id=item["retrieval_id"]["S"],
        created=created,
    )

"""The budget ledger (R-BUDGET) on the service's single DynamoDB table.

Items of one root invocation tree share a partition:
  pk = LEDGER#<root invocation id>, sk = INV#<invocation id>
      agent, parent, depth, mr/mq/mc (limits, fixed on first sight), r (retrievals), c (citation chars),
      "q#<id@version>" (requests per exact source), deadline, ttl; on the root only: seq (citations
      numbered so far) and "f#<fingerprint>" = "<citation id>:<chars>" (every citation of the tree)
  pk = LEDGER#<root invocation id>, sk = CITE#<fingerprint>
      cid (citation id, unique within the root), knowledge, doc_id, content, retrieval_id, invocation_id, ttl

A tool call costs three round trips when the registry is cached (four cold): one BatchGetItem for the
chain (plus any agent definitions not cached yet), one TransactWriteItems charging its requests to every
entry of the chain — creating the entries seen for the first time in the same transaction — and one
TransactWriteItems for its citations. The root's `f#` marks make citation reuse a decision on what was
read; the root's `seq` condition turns any concurrent citation into a retry with a fresh read. Every
spend is conditional on every entry staying within its limits, so a refusal charges nothing anywhere and
concurrent callers never overspend."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from ...domain.budget import (
    ChainLink,
    Citation,
    CitationDraft,
    CitationMark,
    LedgerEntry,
    Limits,
    chain_mismatch,
    charged,
    effective_chain,
    plan_citations,
    retrieval_refusal,
    with_chars,
)
from ...domain.errors import BudgetExceeded, ProtocolError, StateUnavailable
from ...domain.models import AgentDefinition
from ...ports import BudgetLedger, ChainSnapshot
from .table import TableAdapter, _n, _s, agent_from

LEDGER_TTL_SECONDS = 7 * 86400
MAX_ATTEMPTS = 64
_RETRY_REASONS = frozenset({"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"})


class DynamoLedger(TableAdapter, BudgetLedger):
    def __init__(self, client: Any, table_name: str) -> None:
        super().__init__(client, table_name)
        self.stats = {"transactions": 0, "retries": 0}

    # --- plumbing --------------------------------------------------------------------------------
    @staticmethod
    def _pk(root_id: str) -> dict[str, Any]:
        return _s(f"LEDGER#{root_id}")

    def _key(self, root_id: str, sk: str) -> dict[str, Any]:
        return {"pk": self._pk(root_id), "sk": _s(sk)}

    def _transact(self, items: list[dict[str, Any]]) -> list[str | None] | None:
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
    def _entry(item: dict[str, Any]) -> LedgerEntry:
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
    def open_chain(
        self, root_id: str, invocation_ids: list[str], agent_keys: Sequence[str] = ()
    ) -> ChainSnapshot:
        wanted_agents = list(dict.fromkeys(agent_keys))
        items = self._batch_get(
            [self._key(root_id, f"INV#{i}") for i in dict.fromkeys(invocation_ids)]
            + [{"pk": _s(f"AGENT#{k}"), "sk": _s("DEF")} for k in wanted_agents]
        )
        entries: dict[str, LedgerEntry] = {}
        agents: dict[str, AgentDefinition | None] = dict.fromkeys(wanted_agents)
        seq, cited = 0, {}
        for item in items:
            if item["pk"]["S"].startswith("AGENT#"):
                agents[item["pk"]["S"][6:]] = agent_from(item)
                continue
            entry = self._entry(item)
            entries[entry.invocation_id] = entry
            if entry.invocation_id == root_id:
                seq = int(item.get("seq", {"N": "0"})["N"])
                cited = {name[2:]: _mark(value["S"]) for name, value in item.items() if name.startswith("f#")}
        return ChainSnapshot(root_id, tuple(invocation_ids), entries, seq, cited, agents)

    def charge_retrievals(
        self, snapshot: ChainSnapshot, links: list[ChainLink], source_keys: list[str], now: float
    ) -> ChainSnapshot:
        root_id = snapshot.root_id
        ids = [link.invocation_id for link in links]
        for attempt in range(MAX_ATTEMPTS):
            _refuse(links, snapshot, source_keys)
            chain = effective_chain(links, snapshot.entries)
            items = [
                self._charge_item(root_id, entry, depth, source_keys, now)
                for depth, entry in enumerate(chain)
            ]
            reasons = self._transact(items)
            if reasons is None:
                after = {e.invocation_id: charged(e, source_keys) for e in chain}
                return ChainSnapshot(root_id, tuple(ids), after, snapshot.seq, snapshot.cited)
            _check_retryable(reasons)
            if "ConditionalCheckFailed" not in reasons:
                self._backoff(attempt)
            # Someone spent or created first: decide on what is there now (refuse, or try again).
            snapshot = self.open_chain(root_id, ids)
        raise StateUnavailable("ledger is too contended; try again")

    def _charge_item(
        self, root_id: str, entry: LedgerEntry, depth: int, source_keys: list[str], now: float
    ) -> dict[str, Any]:
        """One entry's share of a charge: created with its agent, parent and limits if absent, and
        conditional on both (agent and place are fixed on first sight) and on every limit."""
        limits = entry.limits
        names = {"#r": "r", "#ag": "agent", "#pa": "parent"}
        values: dict[str, dict[str, Any]] = {
            ":n": _n(len(source_keys)),
            ":cap": _n(limits.max_retrievals - len(source_keys)),
            ":one": _n(1),
            ":zero": _n(0),
            ":qcap": _n(limits.max_queries_per_source - 1),
            ":agent": _s(entry.agent),
            ":depth": _n(depth),
            ":mr": _n(limits.max_retrievals),
            ":mq": _n(limits.max_queries_per_source),
            ":mc": _n(limits.max_context_chars),
            ":now": _n(int(now)),
            ":ttl": _n(int(now) + LEDGER_TTL_SECONDS),
        }
        sets = [
            "#r = if_not_exists(#r, :zero) + :n",
            "#ag = if_not_exists(#ag, :agent)",
            "#depth = if_not_exists(#depth, :depth)",
            "#mr = if_not_exists(#mr, :mr)",
            "#mq = if_not_exists(#mq, :mq)",
            "#mc = if_not_exists(#mc, :mc)",
            "#c = if_not_exists(#c, :zero)",
            "#seq = if_not_exists(#seq, :zero)",
            "#created = if_not_exists(#created, :now)",
            "#ttl = if_not_exists(#ttl, :ttl)",
        ]
        names |= {
            "#depth": "depth",
            "#mr": "mr",
            "#mq": "mq",
            "#mc": "mc",
            "#c": "c",
            "#seq": "seq",
            "#created": "created_at",
            "#ttl": "ttl",
        }
        if entry.parent is None:
            place = "attribute_not_exists(#pa)"
        else:
            values[":parent"] = _s(entry.parent)
            sets.append("#pa = if_not_exists(#pa, :parent)")
            place = "#pa = :parent"
        if entry.deadline is not None:
            values[":dl"] = _n(round(entry.deadline, 3))
            names["#dl"] = "deadline"
            sets.append("#dl = if_not_exists(#dl, :dl)")
        conditions = [
            f"(attribute_not_exists(pk) OR (#ag = :agent AND {place}))",
            "(attribute_not_exists(#r) OR #r <= :cap)",
        ]
        for i, key in enumerate(source_keys):
            names[f"#q{i}"] = f"q#{key}"
            sets.append(f"#q{i} = if_not_exists(#q{i}, :zero) + :one")
            conditions.append(f"(attribute_not_exists(#q{i}) OR #q{i} <= :qcap)")
        return {
            "Update": {
                "TableName": self._table,
                "Key": self._key(root_id, f"INV#{entry.invocation_id}"),
                "UpdateExpression": "SET " + ", ".join(sets),
                "ConditionExpression": " AND ".join(conditions),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": values,
            }
        }

    def record_citations(
        self, snapshot: ChainSnapshot, drafts: list[CitationDraft], now: float
    ) -> tuple[list[Citation | None], ChainSnapshot]:
        root_id = snapshot.root_id
        for attempt in range(MAX_ATTEMPTS):
            chain = snapshot.chain()
            plan = plan_citations(chain, snapshot.seq, snapshot.cited, drafts)
            if not plan.created:
                return plan.citations, snapshot
            updates = []
            for depth, entry in enumerate(chain):
                names = {"#c": "c"}
                values = {":n": _n(plan.chars), ":cap": _n(entry.limits.max_context_chars - plan.chars)}
                update = "SET #c = #c + :n"
                condition = "#c <= :cap"
                if depth == 0:  # numbered and marked on the root: a concurrent citation makes this retry
                    names["#seq"] = "seq"
                    values |= {":seq": _n(plan.seq), ":seen": _n(snapshot.seq)}
                    update += ", #seq = :seq"
                    condition += " AND #seq = :seen"
                    for i, (citation, _) in enumerate(plan.created):
                        names[f"#f{i}"] = f"f#{citation.fingerprint}"
                        values[f":f{i}"] = _s(f"{citation.citation_id}:{len(citation.content)}")
                        update += f", #f{i} = :f{i}"
                updates.append(
                    {
                        "Update": {
                            "TableName": self._table,
                            "Key": self._key(root_id, f"INV#{entry.invocation_id}"),
                            "UpdateExpression": update,
                            "ConditionExpression": condition,
                            "ExpressionAttributeNames": names,
                            "ExpressionAttributeValues": values,
                        }
                    }
                )
            puts = [
                {
                    "Put": {
                        "TableName": self._table,
                        "ConditionExpression": "attribute_not_exists(pk)",
                        "Item": {
                            **self._key(root_id, f"CITE#{citation.fingerprint}"),
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
                for citation, draft in plan.created
            ]
            reasons = self._transact(updates + puts)
            if reasons is None:
                entries = {e.invocation_id: with_chars(e, plan.chars) for e in chain}
                cited = snapshot.cited | {
                    c.fingerprint: CitationMark(c.citation_id, len(c.content)) for c, _ in plan.created
                }
                return plan.citations, ChainSnapshot(root_id, snapshot.chain_ids, entries, plan.seq, cited)
            _check_retryable(reasons)
            if "ConditionalCheckFailed" not in reasons:
                self._backoff(attempt)
            snapshot = self.open_chain(root_id, list(snapshot.chain_ids))
        raise StateUnavailable("ledger is too contended; try again")

    def entry(self, root_id: str, invocation_id: str) -> LedgerEntry | None:
        item = self._get(f"LEDGER#{root_id}", f"INV#{invocation_id}")
        return self._entry(item) if item else None

    def citations(self, root_id: str) -> list[Citation]:
        return [_citation(item) for item in self._query(f"LEDGER#{root_id}", "CITE#")]

    def tree(self, root_id: str) -> list[LedgerEntry]:
        items = self._query(f"LEDGER#{root_id}", "INV#")
        items.sort(key=lambda item: (int(item["depth"]["N"]), item["sk"]["S"]))
        return [self._entry(item) for item in items]


def _refuse(links: list[ChainLink], snapshot: ChainSnapshot, source_keys: list[str]) -> None:
    """A chain that contradicts the ledger, or a charge that does not fit it: nothing is written. Spends
    only grow, so a refusal read from any snapshot stands."""
    mismatch = chain_mismatch(links, snapshot.entries)
    if mismatch:
        raise ProtocolError(mismatch)
    refusal = retrieval_refusal(effective_chain(links, snapshot.entries), source_keys)
    if refusal:
        raise BudgetExceeded(refusal)


def _mark(value: str) -> CitationMark:
    citation_id, _, chars = value.rpartition(":")
    return CitationMark(citation_id, int(chars))


def _check_retryable(reasons: list[str | None]) -> None:
    """Lost races and throttling retry; anything else is a bug in the request, not contention."""
    unexpected = {r for r in reasons if r is not None} - _RETRY_REASONS - {"ConditionalCheckFailed"}
    if unexpected:
        raise RuntimeError(f"ledger transaction cancelled: {sorted(unexpected)}")


def _citation(item: dict[str, Any]) -> Citation:
    return Citation(
        citation_id=item["cid"]["S"],
        fingerprint=item["sk"]["S"][5:],
        knowledge=item["knowledge"]["S"],
        content=item["content"]["S"],
        retrieval_id=item["retrieval_id"]["S"],
        created=False,
    )

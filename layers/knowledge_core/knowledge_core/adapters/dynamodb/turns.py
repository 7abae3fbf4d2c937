"""Turn idempotency records in the single DynamoDB table (A-TURN).

Item: pk=`TURN#<route>#<digest of client, session, turn_id>`, sk=`TURN`; `request_hash`, `principal` (the
claimer's digest; absent on items written before turns bound it), `state` (pending | done), `claim`,
`claimed_at`, optional `run_id`, the stored response as zlib-compressed
JSON (`turn_response`, binary: an inline context can approach the 400 KB item limit), and `ttl`."""

from __future__ import annotations

import json
import zlib
from typing import Any

from ...domain.errors import StateUnavailable
from ...ports import TurnRecord, TurnStore
from .table import TTL_ATTRIBUTE, TableAdapter, _n, _s

_SK = "TURN"


class DynamoTurnStore(TableAdapter, TurnStore):
    @staticmethod
    def _key(key: str) -> dict[str, Any]:
        return {"pk": _s(key), "sk": _s(_SK)}

    @staticmethod
    def _record(item: dict[str, Any]) -> TurnRecord:
        raw = item.get("turn_response", {}).get("B")
        return TurnRecord(
            key=item["pk"]["S"],
            request_hash=item["request_hash"]["S"],
            state=item["state"]["S"],
            claim=item["claim"]["S"],
            claimed_at=float(item["claimed_at"]["N"]),
            expires_at=int(item[TTL_ATTRIBUTE]["N"]),
            run_id=item.get("run_id", {}).get("S"),
            response=json.loads(zlib.decompress(raw)) if raw is not None else None,
            principal=item.get("principal", {}).get("S"),
        )

    def claim_turn(
        self, key: str, request_hash: str, claim: str, now: float, expires_at: int, *, principal: str | None
    ) -> TurnRecord | None:
        item = {
            **self._key(key),
            "request_hash": _s(request_hash),
            "state": _s("pending"),
            "claim": _s(claim),
            "claimed_at": _n(now),
            TTL_ATTRIBUTE: _n(expires_at),
            **({"principal": _s(principal)} if principal is not None else {}),
        }
        for _ in range(3):
            # DynamoDB deletes expired items lazily: an expired record must not block a new claim.
            if (
                self._conditional(
                    "put_item",
                    Item=item,
                    ConditionExpression="attribute_not_exists(pk) OR #ttl <= :now",
                    ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
                    ExpressionAttributeValues={":now": _n(int(now))},
                )
                is not None
            ):
                return None
            existing = self.get_turn(key, now)
            if existing is not None:
                return existing
            # Expired or released between the two calls: claim again.
        raise StateUnavailable()

    def get_turn(self, key: str, now: float) -> TurnRecord | None:
        item = self._get(key, _SK)
        if item is None or int(item[TTL_ATTRIBUTE]["N"]) <= now:
            return None
        return self._record(item)

    def _while_held(
        self, op: str, key: str, claim: str, values: dict[str, Any] | None = None, **update: str
    ) -> bool:
        """`op` on the turn only while it is still pending and held by `claim`."""
        return (
            self._conditional(
                op,
                Key=self._key(key),
                ConditionExpression="#st = :pending AND claim = :held",
                ExpressionAttributeNames={"#st": "state"},
                ExpressionAttributeValues={**(values or {}), ":pending": _s("pending"), ":held": _s(claim)},
                **update,
            )
            is not None
        )

    def set_turn_run(self, key: str, claim: str, run_id: str) -> bool:
        return self._while_held(
            "update_item", key, claim, {":r": _s(run_id)}, UpdateExpression="SET run_id = :r"
        )

    def complete_turn(self, key: str, claim: str, response: dict[str, Any]) -> bool:
        blob = zlib.compress(json.dumps(response, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        return self._while_held(
            "update_item",
            key,
            claim,
            {":done": _s("done"), ":resp": {"B": blob}},
            UpdateExpression="SET #st = :done, turn_response = :resp",
        )

    def release_turn(self, key: str, claim: str) -> None:
        self._while_held("delete_item", key, claim)

    def take_over_turn(self, key: str, old_claim: str, new_claim: str, now: float) -> bool:
        return self._while_held(
            "update_item",
            key,
            old_claim,
            {":new": _s(new_claim), ":now": _n(now)},
            UpdateExpression="SET claim = :new, claimed_at = :now",
        )

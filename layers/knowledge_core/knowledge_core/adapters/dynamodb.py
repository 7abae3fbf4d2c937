"""DynamoDB single-table state: registry (sources, agents, workspaces), sessions and runs.

Keys: pk/sk strings; `ttl` (epoch seconds) expires sessions and other short-lived records.
TABLE_DEFINITION is the one description of the table; template.yaml carries the same (checked by a test)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from ..domain.errors import Conflict, StateUnavailable
from ..domain.models import (
    AgentDefinition,
    Run,
    Session,
    Source,
    SourceDefinition,
    SourceState,
    TokenSummary,
    token_id_of,
)
from ..ports import Registry, RunStore, SessionStore, StateStores

TABLE_DEFINITION: dict[str, Any] = {
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
    "KeySchema": [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ],
    "BillingMode": "PAY_PER_REQUEST",
}
TTL_ATTRIBUTE = "ttl"
TOKEN_LIST_PK = "TOKENS"
# The registry's index for operators' listings: sk = SRC#<key> | AGENT#<key> | WS#<route> (with `agent`),
# written beside each definition or pointer; a listing is one Query, never a Scan of the table.
REGISTRY_PK = "REGISTRY"
_UNAVAILABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "LimitExceededException",
        "ResourceNotFoundException",
    }
)
T = TypeVar("T")


def _s(value: str) -> dict:
    return {"S": value}


def _n(value: float) -> dict:
    return {"N": str(value)}


def create_table(client: Any, table_name: str) -> None:
    """The service's table as TABLE_DEFINITION describes it, with TTL on; a no-op when it exists."""
    from botocore.exceptions import ClientError

    try:
        client.create_table(TableName=table_name, **TABLE_DEFINITION)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
    client.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 0.2})
    try:
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
    except ClientError as exc:
        if "already enabled" not in str(exc).lower():
            raise


@dataclass(frozen=True)
class DynamoTable:
    """The service's table: its lifecycle (local servers and tests) and the stores on it."""

    client: Any  # a low-level boto3 DynamoDB client
    name: str

    def create(self) -> None:
        create_table(self.client, self.name)

    def delete(self) -> None:
        self.client.delete_table(TableName=self.name)

    def stores(self) -> StateStores:
        return dynamodb_stores(self.client, self.name)


def dynamodb_stores(client: Any, table_name: str) -> StateStores:
    """Every state port on one table, through one low-level boto3 client."""
    from .jobs_dynamodb import DynamoJobStore
    from .ledger_dynamodb import DynamoLedger
    from .turns_dynamodb import DynamoTurnStore

    state = DynamoState(client, table_name)
    return StateStores(
        registry=state,
        sessions=state,
        runs=state,
        turns=DynamoTurnStore(client, table_name),
        ledger=DynamoLedger(client, table_name),
        jobs=DynamoJobStore(client, table_name),
    )


def agent_from(item: dict) -> AgentDefinition:
    return AgentDefinition.model_validate_json(item["doc"]["S"])


class TableAdapter:
    """What every store of the single table shares: the low-level client, the fault mapping, the one
    conditional write and the one batch read."""

    def __init__(self, client: Any, table_name: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError  # lazy: botocore is heavy

        self._client = client
        self._table = table_name
        self._client_error = ClientError
        self._botocore_error = BotoCoreError

    @contextmanager
    def _call(self) -> Iterator[None]:
        """Storage faults become StateUnavailable (503) with no internals; logic errors propagate."""
        try:
            yield
        except self._client_error as exc:
            if exc.response.get("Error", {}).get("Code") in _UNAVAILABLE_CODES:
                raise StateUnavailable() from exc
            raise
        except self._botocore_error as exc:
            raise StateUnavailable() from exc

    def _conditional(self, op: str, **kwargs: Any) -> dict | None:
        """A conditional write (`put_item`, `update_item`, `delete_item`): its response, or None when its
        condition does not hold."""
        with self._call():
            try:
                response: dict = getattr(self._client, op)(TableName=self._table, **kwargs)
                return response
            except self._client_error as exc:
                if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                    return None
                raise

    def _get(self, pk: str, sk: str) -> dict | None:
        with self._call():
            item: dict | None = self._client.get_item(
                TableName=self._table, Key={"pk": _s(pk), "sk": _s(sk)}, ConsistentRead=True
            ).get("Item")
        return item

    def _query(self, pk: str, sk_prefix: str | None = None) -> list[dict]:
        """Every item of one partition (whose sort key starts with `sk_prefix`), consistent, all pages."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "ConsistentRead": True,
            "KeyConditionExpression": "pk = :pk" + (" AND begins_with(sk, :prefix)" if sk_prefix else ""),
            "ExpressionAttributeValues": {":pk": _s(pk), **({":prefix": _s(sk_prefix)} if sk_prefix else {})},
        }
        items: list[dict] = []
        while True:
            with self._call():
                page = self._client.query(**request)
            items.extend(page.get("Items", []))
            if not page.get("LastEvaluatedKey"):
                return items
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _batch_get(self, keys: list[dict]) -> list[dict]:
        """Consistent reads of `keys` (pk/sk dicts), 100 a request, unprocessed keys asked again."""
        items: list[dict] = []
        for i in range(0, len(keys), 100):
            request: dict = {self._table: {"Keys": keys[i : i + 100], "ConsistentRead": True}}
            while request:
                with self._call():
                    resp = self._client.batch_get_item(RequestItems=request)
                items.extend(resp["Responses"].get(self._table, []))
                request = resp.get("UnprocessedKeys") or {}
        return items


class DynamoState(TableAdapter, Registry, SessionStore, RunStore):
    """Registry, sessions and runs in the service's DynamoDB table, through the low-level boto3 client."""

    def _put_new(self, item: dict) -> bool:
        """Put unless the key exists; False when it does."""
        return (
            self._conditional("put_item", Item=item, ConditionExpression="attribute_not_exists(pk)")
            is not None
        )

    def _publish(self, pk: str, definition: str, parse: Callable[[str], T]) -> bool:
        """Immutable versions: identical re-publish is a no-op, different content a conflict. Either way the
        version is (again) in the registry's index afterwards."""
        created = self._put_new(
            {"pk": _s(pk), "sk": _s("DEF"), "doc": _s(definition), "created_at": {"N": str(int(time.time()))}}
        )
        if not created:
            existing = self._get(pk, "DEF")
            if existing is None or parse(existing["doc"]["S"]) != parse(definition):
                raise Conflict(f"{pk.split('#', 1)[1]} is already published with different content")
        self._index(pk)
        return created

    def _index(self, sk: str, **attributes: str) -> None:
        with self._call():
            self._client.put_item(
                TableName=self._table,
                Item={"pk": _s(REGISTRY_PK), "sk": _s(sk), **{k: _s(v) for k, v in attributes.items()}},
            )

    # --- registry -------------------------------------------------------------------------------
    def get_sources(self, keys: list[str]) -> dict[str, Source | None]:
        found: dict[str, dict[str, dict]] = {k: {} for k in keys}
        wanted = [
            {"pk": _s(f"SRC#{k}"), "sk": _s(sk)} for k in dict.fromkeys(keys) for sk in ("DEF", "STATE")
        ]
        for item in self._batch_get(wanted):
            found[item["pk"]["S"][4:]][item["sk"]["S"]] = item
        out: dict[str, Source | None] = {}
        for key, parts in found.items():
            if "DEF" not in parts:
                out[key] = None
                continue
            state = (
                SourceState.model_validate_json(parts["STATE"]["doc"]["S"])
                if "STATE" in parts
                else SourceState()
            )
            out[key] = Source(
                definition=SourceDefinition.model_validate_json(parts["DEF"]["doc"]["S"]), state=state
            )
        return out

    def put_source(self, definition: SourceDefinition) -> bool:
        return self._publish(
            f"SRC#{definition.key}",
            definition.model_dump_json(by_alias=True),
            SourceDefinition.model_validate_json,
        )

    def update_source_state(self, key: str, state: SourceState) -> None:
        with self._call():
            self._client.put_item(
                TableName=self._table,
                Item={"pk": _s(f"SRC#{key}"), "sk": _s("STATE"), "doc": _s(state.model_dump_json())},
            )

    def get_agent(self, key: str) -> AgentDefinition | None:
        item = self._get(f"AGENT#{key}", "DEF")
        return agent_from(item) if item else None

    def put_agent(self, definition: AgentDefinition) -> bool:
        return self._publish(
            f"AGENT#{definition.key}",
            definition.model_dump_json(by_alias=True, exclude_none=True),
            AgentDefinition.model_validate_json,
        )

    def get_workspace_agent(self, route: str) -> str | None:
        item = self._get(f"WS#{route}", "DEF")
        return item["agent"]["S"] if item else None

    def set_workspace_agent(self, route: str, agent_key: str) -> None:
        with self._call():
            self._client.put_item(
                TableName=self._table,
                Item={
                    "pk": _s(f"WS#{route}"),
                    "sk": _s("DEF"),
                    "agent": _s(agent_key),
                    "updated_at": {"N": str(int(time.time()))},
                },
            )
        self._index(f"WS#{route}", agent=agent_key)

    def _indexed(self, kind: str) -> list[dict]:
        return self._query(REGISTRY_PK, f"{kind}#")

    def list_sources(self) -> list[Source]:
        keys = [item["sk"]["S"][4:] for item in self._indexed("SRC")]
        found = self.get_sources(keys)
        return [source for key in keys if (source := found.get(key)) is not None]

    def list_agents(self) -> list[AgentDefinition]:
        keys = [{"pk": item["sk"], "sk": _s("DEF")} for item in self._indexed("AGENT")]
        return sorted((agent_from(item) for item in self._batch_get(keys)), key=lambda a: a.key)

    def list_workspaces(self) -> dict[str, str]:
        return {item["sk"]["S"][3:]: item["agent"]["S"] for item in self._indexed("WS")}

    # --- sessions --------------------------------------------------------------------------------
    # TOKEN#<hash>/SESSION is what the authorizer reads; TOKENS/<token id> is the administrator's list
    # (the session and the hash it points to). Both are written in one transaction.
    def _session_items(self, token_hash: str, session: Session) -> list[dict]:
        doc, ttl = _s(session.model_dump_json()), {"N": str(session.expires_at)}
        return [
            {"pk": _s(f"TOKEN#{token_hash}"), "sk": _s("SESSION"), "doc": doc, TTL_ATTRIBUTE: ttl},
            {
                "pk": _s(TOKEN_LIST_PK),
                "sk": _s(token_id_of(token_hash)),
                "token_hash": _s(token_hash),
                "doc": doc,
                TTL_ATTRIBUTE: ttl,
            },
        ]

    def put_session(self, token_hash: str, session: Session) -> None:
        with self._call():
            self._client.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": self._table, "Item": item}}
                    for item in self._session_items(token_hash, session)
                ]
            )

    def get_session(self, token_hash: str) -> Session | None:
        item = self._get(f"TOKEN#{token_hash}", "SESSION")
        return Session.model_validate_json(item["doc"]["S"]) if item else None

    def list_sessions(self, now: float) -> list[TokenSummary]:
        out: list[TokenSummary] = []
        for item in self._query(TOKEN_LIST_PK):
            session = Session.model_validate_json(item["doc"]["S"])
            if session.expires_at > now:  # TTL deletion is lazy
                out.append(TokenSummary.of(item["sk"]["S"], session))
        return out

    def revoke_session(self, token_id: str, now: float) -> TokenSummary | None:
        listed = self._get(TOKEN_LIST_PK, token_id)
        if listed is None:
            return None
        token_hash = listed["token_hash"]["S"]
        session = self.get_session(token_hash)
        if session is None or session.expires_at <= now:
            return None
        revoked = session.model_copy(update={"revoked": True})
        with self._call():
            try:
                self._client.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": self._table,
                                "Item": item,
                                "ConditionExpression": "attribute_exists(pk)",
                            }
                        }
                        for item in self._session_items(token_hash, revoked)
                    ]
                )
            except self._client_error as exc:
                if exc.response["Error"]["Code"] == "TransactionCanceledException":
                    return None  # expired and deleted meanwhile
                raise
        return TokenSummary.of(token_id, revoked)

    # --- runs ------------------------------------------------------------------------------------
    @staticmethod
    def _run_item(run: Run) -> dict:
        item = {
            "pk": _s(f"RUN#{run.run_id}"),
            "sk": _s("RUN"),
            "session_id": _s(run.session_id),
            "client_id": _s(run.client_id),
            "route": _s(run.route),
            "state": _s(run.state),
            TTL_ATTRIBUTE: {"N": str(int(time.time()) + 7 * 86400)},
        }
        if run.turn_id:
            item["turn_id"] = _s(run.turn_id)
        if run.tenant:
            item["tenant"] = _s(run.tenant)
        return item

    @staticmethod
    def _run_from(item: dict) -> Run:
        return Run(
            run_id=item["pk"]["S"][4:],
            session_id=item["session_id"]["S"],
            client_id=item["client_id"]["S"],
            route=item["route"]["S"],
            state=item["state"]["S"],
            turn_id=item.get("turn_id", {}).get("S"),
            tenant=item.get("tenant", {}).get("S"),
        )

    def create_run(self, run: Run) -> None:
        if not self._put_new(self._run_item(run)):
            raise Conflict("run already exists")

    def get_run(self, run_id: str) -> Run | None:
        item = self._get(f"RUN#{run_id}", "RUN")
        return self._run_from(item) if item else None

    def transition_run(self, run_id: str, from_states: tuple[str, ...], to_state: str) -> Run | None:
        names = {f":f{i}": _s(s) for i, s in enumerate(from_states)}
        resp = self._conditional(
            "update_item",
            Key={"pk": _s(f"RUN#{run_id}"), "sk": _s("RUN")},
            UpdateExpression="SET #st = :to",
            ConditionExpression=f"attribute_exists(pk) AND #st IN ({', '.join(names)})",
            ExpressionAttributeNames={"#st": "state"},
            ExpressionAttributeValues={":to": _s(to_state), **names},
            ReturnValues="ALL_NEW",
        )
        return self._run_from(resp["Attributes"]) if resp is not None else None

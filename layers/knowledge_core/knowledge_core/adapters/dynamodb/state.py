"""DynamoDB single-table state: the registry (sources, agents, workspaces), sessions and runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...domain.errors import Conflict
from ...domain.models import (
    AgentDefinition,
    Run,
    Session,
    Source,
    SourceDefinition,
    SourceState,
    TokenSummary,
    token_id_of,
)
from ...ports import Registry, RunStore, SessionStore
from .table import (
    REGISTRY_PK,
    TOKEN_LIST_PK,
    TTL_ATTRIBUTE,
    T,
    TableAdapter,
    _s,
    agent_from,
)


class DynamoState(TableAdapter, Registry, SessionStore, RunStore):
    """Registry, sessions and runs in the service's DynamoDB table, through the low-level boto3 client."""

    def _put_new(self, item: dict[str, Any]) -> bool:
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
        found: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in keys}
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

    def _indexed(self, kind: str) -> list[dict[str, Any]]:
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
    def _session_items(self, token_hash: str, session: Session) -> list[dict[str, Any]]:
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
    def _run_item(run: Run) -> dict[str, Any]:
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
    def _run_from(item: dict[str, Any]) -> Run:
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

"""Metadata filters (SPEC §8, F-FILTER): document metadata's limits, the filter language and its meaning.

A filter has the shape of Amazon Bedrock's `RetrievalFilter`: one operator per object, a comparison
`{"key": …, "value": …}` or a group `andAll` / `orAll` of 2–16 filters. `parse_filter` turns the JSON into
the typed tree (`Condition` / `Group` / `Nothing`) or raises `FilterInvalid` naming the exact path
(`filter.andAll[1].greaterThan.value`); `matches` is the reference semantics every backend's compiled query
must agree with (the contract tests use it as their oracle). Pure: no I/O, no pydantic model of the core."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    RootModel,
    StringConstraints,
    create_model,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

FILTER_SCHEMA = "bailing.agent-knowledge-filter.v1"
KEY_PATTERN = r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$"
MAX_KEYS = 32
MAX_STRING = 256
MAX_LIST = 32
MAX_CONDITIONS = 16
MAX_DEPTH = 3
GROUP_MIN, GROUP_MAX = 2, 16

EQUALITY = ("equals", "notEquals")
RANGES = ("greaterThan", "greaterThanOrEquals", "lessThan", "lessThanOrEquals")
MEMBERSHIP = ("in", "notIn")
STRINGS = ("startsWith", "listContains", "stringContains")
COMPARISONS = (*EQUALITY, *RANGES, *MEMBERSHIP, *STRINGS)
GROUPS = ("andAll", "orAll")
OPERATORS = (*COMPARISONS, *GROUPS)
NEGATIONS = {"notEquals": "equals", "notIn": "in"}
"""Each negated operator is exactly NOT its positive one: so a document lacking the key matches it."""

_KEY = re.compile(KEY_PATTERN)
_ECHO = 64  # an unknown name is the caller's own input: echo at most this much of it

Scalar = str | float | int | bool
MetadataValue = str | float | int | bool | list[str]


@dataclass(frozen=True)
class ContextValue:
    """A value to be taken from the runtime's trusted context (`{"context": "region"}`, §3.1)."""

    name: str


Value = Scalar | tuple[Scalar, ...] | ContextValue


# --- the typed tree -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """One comparison of the document's metadata value under `key` with `value` (a tuple for in/notIn)."""

    operator: str
    key: str
    value: Value

    def wire(self) -> dict[str, Any]:
        value: Any = self.value
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, ContextValue):
            value = {"context": value.name}
        return {self.operator: {"key": self.key, "value": value}}


@dataclass(frozen=True)
class Group:
    """`andAll` (every filter holds) or `orAll` (at least one does)."""

    operator: Literal["andAll", "orAll"]
    filters: tuple[Filter, ...]

    def wire(self) -> dict[str, Any]:
        return {self.operator: [f.wire() for f in self.filters]}


@dataclass(frozen=True)
class Nothing:
    """Matches no document: what a condition on an absent trusted-context value becomes (§3.1)."""

    def wire(self) -> dict[str, Any]:
        return {"orAll": []}  # never parsed back: only for logs of a bound filter


Filter = Condition | Group | Nothing


def conditions(node: Filter) -> list[Condition]:
    """The leaf conditions of a filter, left to right."""
    if isinstance(node, Condition):
        return [node]
    if isinstance(node, Group):
        return [c for f in node.filters for c in conditions(f)]
    return []


def all_of(filters: Sequence[Filter | None]) -> Filter | None:
    """Several filters that must all hold (an agent's source filter and a request's), as one; None: none."""
    present = tuple(f for f in filters if f is not None)
    if not present:
        return None
    return present[0] if len(present) == 1 else Group("andAll", present)


# --- validation -----------------------------------------------------------------------------------


class FilterInvalid(ValueError):
    """A malformed filter or metadata: `path` is relative to the field (`.andAll[1].greaterThan.value`)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")

    def at(self, field: str) -> str:
        """The full path under `field` (`filter` + `.andAll[1]…`)."""
        return field + self.path

    def pydantic(self) -> PydanticCustomError:
        """As a pydantic error of a field: `parse_request` appends `path` to the field's own location."""
        return PydanticCustomError("invalid_at_path", "{reason}", {"path": self.path, "reason": self.reason})


def _echo(name: str) -> str:
    return name if len(name) <= _ECHO else name[:_ECHO] + "…"


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond a double: not a finite number anyone can compare
        return False


def _is_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= MAX_STRING
    return isinstance(value, bool) or _is_number(value)


def _scalar(value: Any, path: str) -> Scalar:
    if isinstance(value, str) and len(value) > MAX_STRING:
        raise FilterInvalid(path, f"must be at most {MAX_STRING} characters")
    if not _is_scalar(value):
        raise FilterInvalid(path, "must be a string, a finite number or a boolean")
    return value  # type: ignore[no-any-return]


def _number(value: Any, path: str) -> float | int:
    if not _is_number(value):
        raise FilterInvalid(path, "must be a finite number (range operators compare numbers only)")
    return value  # type: ignore[no-any-return]


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise FilterInvalid(path, "must be a string")
    if len(value) > MAX_STRING:
        raise FilterInvalid(path, f"must be at most {MAX_STRING} characters")
    return value


def _scalars(value: Any, path: str) -> tuple[Scalar, ...]:
    if not isinstance(value, list):
        raise FilterInvalid(path, f"must be a list of at most {MAX_LIST} strings, numbers or booleans")
    if len(value) > MAX_LIST:
        raise FilterInvalid(path, f"must have at most {MAX_LIST} values")
    return tuple(_scalar(v, f"{path}[{i}]") for i, v in enumerate(value))


_VALUE_RULES: dict[str, Callable[[Any, str], Value]] = {
    **{op: _scalar for op in EQUALITY},
    **{op: _number for op in RANGES},
    **{op: _scalars for op in MEMBERSHIP},
    **{op: _string for op in STRINGS},
}


def _key(value: Any, path: str) -> str:
    if not isinstance(value, str) or not _KEY.fullmatch(value):
        raise FilterInvalid(path, f"must be a metadata key ({KEY_PATTERN})")
    return value


def _condition(operator: str, raw: Any, path: str, allow_context: bool) -> Condition:
    """`{"key": …, "value": …}` of one comparison; the value checked by its operator's rule."""
    if not isinstance(raw, dict):
        raise FilterInvalid(path, 'must be an object {"key": …, "value": …}')
    for name in raw:
        if name not in ("key", "value"):
            raise FilterInvalid(f"{path}.{_echo(str(name))}", "unknown field")
    for name in ("key", "value"):
        if name not in raw:
            raise FilterInvalid(f"{path}.{name}", "required")
    key = _key(raw["key"], f"{path}.key")
    value = raw["value"]
    if allow_context and isinstance(value, dict):
        return Condition(operator, key, _context_value(value, f"{path}.value"))
    return Condition(operator, key, _VALUE_RULES[operator](value, f"{path}.value"))


def _context_value(raw: dict[str, Any], path: str) -> ContextValue:
    if set(raw) != {"context"} or not isinstance(raw["context"], str) or not raw["context"].strip():
        raise FilterInvalid(path, 'a context value must be {"context": "<trusted context key>"}')
    if len(raw["context"]) > MAX_STRING:
        raise FilterInvalid(f"{path}.context", f"must be at most {MAX_STRING} characters")
    return ContextValue(raw["context"])


def _node(raw: Any, path: str, depth: int, allow_context: bool) -> Filter:
    """One filter object: exactly one operator, groups nested at most MAX_DEPTH deep."""
    if not isinstance(raw, dict):
        raise FilterInvalid(path, "must be an object with exactly one operator")
    if len(raw) != 1:
        raise FilterInvalid(path, "must have exactly one operator" + (f", not {len(raw)}" if raw else ""))
    ((operator, body),) = raw.items()
    here = f"{path}.{_echo(str(operator))}"
    if operator not in OPERATORS:
        raise FilterInvalid(here, "unknown operator")
    if operator in COMPARISONS:
        return _condition(operator, body, here, allow_context)
    if depth >= MAX_DEPTH:
        raise FilterInvalid(here, f"andAll/orAll nest at most {MAX_DEPTH} deep")
    if not isinstance(body, list) or not GROUP_MIN <= len(body) <= GROUP_MAX:
        raise FilterInvalid(here, f"must be a list of {GROUP_MIN}–{GROUP_MAX} filters")
    items = tuple(_node(item, f"{here}[{i}]", depth + 1, allow_context) for i, item in enumerate(body))
    return Group(operator, items)


def parse_filter(raw: Any, *, allow_context: bool = False) -> Filter:
    """The typed filter of a JSON value, or FilterInvalid naming the first problem's path (relative to the
    field, e.g. `.andAll[1].greaterThan.value`; `""` for the filter itself). `allow_context`: values may be
    `{"context": "<key>"}` (agent definitions' sourceFilters, §3.1), bound later by `bind_context`."""
    node = _node(raw, "", 0, allow_context)
    if len(conditions(node)) > MAX_CONDITIONS:
        raise FilterInvalid("", f"must have at most {MAX_CONDITIONS} conditions")
    return node


def bind_context(node: Filter, context: Mapping[str, Any]) -> Filter:
    """A filter with every `{"context": …}` value taken from the trusted context. A condition whose value is
    absent there, or of a type its operator does not take, matches nothing (§3.1)."""
    if isinstance(node, Group):
        return Group(node.operator, tuple(bind_context(f, context) for f in node.filters))
    if not isinstance(node, Condition) or not isinstance(node.value, ContextValue):
        return node
    if node.value.name not in context:
        return Nothing()
    try:
        value = _VALUE_RULES[node.operator](context[node.value.name], "")
    except FilterInvalid:
        return Nothing()
    return Condition(node.operator, node.key, value)


# --- metadata ---------------------------------------------------------------------------------------


def _metadata_value(value: Any, path: str) -> MetadataValue:
    if isinstance(value, list):
        if len(value) > MAX_LIST:
            raise FilterInvalid(path, f"a list holds at most {MAX_LIST} strings")
        return [_string(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, str):
        return _string(value, path)
    if isinstance(value, bool) or _is_number(value):
        return value  # type: ignore[no-any-return]
    raise FilterInvalid(path, "must be a string, a finite number, a boolean or a list of strings")


def validate_metadata(metadata: Any) -> dict[str, MetadataValue]:
    """A document's metadata within §8's limits (≤ 32 keys, key pattern, value types and sizes), or
    FilterInvalid naming the key (`.region`)."""
    if not isinstance(metadata, dict):
        raise FilterInvalid("", "must be an object")
    if len(metadata) > MAX_KEYS:
        raise FilterInvalid("", f"must have at most {MAX_KEYS} keys")
    out: dict[str, MetadataValue] = {}
    for key, value in metadata.items():
        path = f".{_echo(str(key))}"
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise FilterInvalid(path, f"keys must match {KEY_PATTERN}")
        out[key] = _metadata_value(value, path)
    return out


# --- the reference semantics ---------------------------------------------------------------------------


def same_scalar(stored: Any, value: Scalar) -> bool:
    """Equality across JSON types: strings with strings, booleans with booleans, numbers numerically (as
    doubles, like the backends); a list or another type is never equal to a scalar."""
    if isinstance(value, bool) or isinstance(stored, bool):
        return isinstance(value, bool) and isinstance(stored, bool) and stored is value
    if isinstance(value, str) or isinstance(stored, str):
        return isinstance(value, str) and isinstance(stored, str) and stored == value
    return _is_number(stored) and float(stored) == float(value)


def _compare(operator: str, stored: Any, value: float) -> bool:
    if not _is_number(stored):
        return False
    a, b = float(stored), float(value)
    return {
        "greaterThan": a > b,
        "greaterThanOrEquals": a >= b,
        "lessThan": a < b,
        "lessThanOrEquals": a <= b,
    }[operator]


def _holds(condition: Condition, metadata: Mapping[str, Any]) -> bool:
    """A positive comparison on a present key (negations and absent keys are handled by `matches`)."""
    stored, value, op = metadata[condition.key], condition.value, condition.operator
    if op == "equals":
        return same_scalar(stored, value)  # type: ignore[arg-type]
    if op == "in":
        return any(same_scalar(stored, v) for v in value)  # type: ignore[union-attr]
    if op in RANGES:
        return _compare(op, stored, value)  # type: ignore[arg-type]
    if op == "startsWith":
        return isinstance(stored, str) and stored.startswith(value)  # type: ignore[arg-type]
    if op == "listContains":
        return isinstance(stored, list) and value in stored
    if op == "stringContains":
        members = stored if isinstance(stored, list) else [stored]
        return any(isinstance(m, str) and value in m for m in members)  # type: ignore[operator]
    raise AssertionError(op)


def matches(metadata: Mapping[str, Any] | None, node: Filter) -> bool:
    """Whether a document with `metadata` matches the filter (SPEC §8): a condition on an absent key is
    false, except notEquals / notIn (the negation of equals / in), which are true."""
    if isinstance(node, Nothing):
        return False
    if isinstance(node, Group):
        combine = all if node.operator == "andAll" else any
        return combine(matches(metadata, f) for f in node.filters)
    if isinstance(node.value, ContextValue):
        return False  # unbound: never reaches a backend, and would match nothing if it did
    positive = NEGATIONS.get(node.operator)
    if positive is not None:
        return not matches(metadata, Condition(positive, node.key, node.value))
    return metadata is not None and node.key in metadata and _holds(node, metadata)


# --- the wire type ------------------------------------------------------------------------------------

_Key = Annotated[str, StringConstraints(pattern=KEY_PATTERN)]
_Str = Annotated[str, StringConstraints(max_length=MAX_STRING)]
_ScalarDoc = _Str | float | bool


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # only a JSON Schema needs these models


class _ContextDoc(_Doc):
    """A value from the runtime's trusted context (agent definitions' sourceFilters, §3.1)."""

    context: Annotated[str, StringConstraints(min_length=1, max_length=MAX_STRING, pattern=r"\S")]


_VALUE_DOCS: dict[str, Any] = {
    **{op: _ScalarDoc for op in EQUALITY},
    **{op: float for op in RANGES},
    **{op: Annotated[list[_ScalarDoc], Field(max_length=MAX_LIST)] for op in MEMBERSHIP},
    **{op: _Str for op in STRINGS},
}
_DESCRIPTION = (
    "A metadata filter (SPEC §8, the shape of Amazon Bedrock's RetrievalFilter): exactly one operator per "
    "object; andAll/orAll take 2–16 filters and nest at most 3 deep; at most 16 conditions in all. Range "
    "operators compare numbers only; in/notIn take at most 32 values; startsWith applies to string values, "
    "stringContains to strings and list members, listContains to lists. A condition on a key the document "
    "lacks is false, except notEquals/notIn, which are true. A filter only narrows a search."
)


def _title(operator: str) -> str:
    return operator[0].upper() + operator[1:]


def _root(name: str, members: Sequence[type[BaseModel]], doc: str) -> type[BaseModel]:
    union = Union[tuple(members)]  # type: ignore[valid-type]  # noqa: UP007
    return type(name, (RootModel[union],), {"__module__": __name__, "__doc__": doc})  # type: ignore[valid-type]


def _operator_model(name: str, operator: str, body: Any) -> type[BaseModel]:
    """`{"<operator>": body}` as a model (the field's name is the operator)."""
    fields: dict[str, Any] = {operator: (body, ...)}
    return create_model(name, __base__=_Doc, **fields)


def _filter_documents(prefix: str, context: bool) -> type[BaseModel]:
    """The JSON Schema of a filter as pydantic models: each comparison operator's object, then the groups
    unrolled level by level (`{prefix}FilterDepth1` holds conditions only in its andAll/orAll, …), so the
    schema itself says how deep groups nest; the top level is `{prefix}Filter`."""
    comparisons: list[type[BaseModel]] = []
    for op, value in _VALUE_DOCS.items():
        typed = value | _ContextDoc if context else value
        condition = create_model(
            f"{prefix}{_title(op)}Condition", __base__=_Doc, key=(_Key, ...), value=(typed, ...)
        )
        comparisons.append(_operator_model(f"{prefix}{_title(op)}Filter", op, condition))
    level = _root(f"{prefix}FilterCondition", comparisons, "One comparison: a filter without andAll/orAll.")
    for depth in range(1, MAX_DEPTH + 1):
        items = Annotated[list[level], Field(min_length=GROUP_MIN, max_length=GROUP_MAX)]  # type: ignore[valid-type]
        groups = [_operator_model(f"{prefix}{_title(op)}FilterDepth{depth}", op, items) for op in GROUPS]
        name = f"{prefix}Filter" if depth == MAX_DEPTH else f"{prefix}FilterDepth{depth}"
        level = _root(
            name,
            [*comparisons, *groups],
            _DESCRIPTION if depth == MAX_DEPTH else f"A filter whose groups nest at most {depth} deep.",
        )
    return level


def compact_filter_schema() -> dict[str, Any]:
    """A filter's JSON Schema in a few hundred bytes, for an MCP tool's input schema (which clients take
    without `$ref`s, where the unrolled `filter_document` would be ~80 KB): one operator per object, each
    comparison `{key, value}`, each group a list of 2–16 objects; the server checks the rest (§8)."""
    comparison = {
        "type": "object",
        "properties": {"key": {"type": "string", "pattern": KEY_PATTERN}, "value": {}},
        "required": ["key", "value"],
        "additionalProperties": False,
    }
    group = {"type": "array", "minItems": GROUP_MIN, "maxItems": GROUP_MAX, "items": {"type": "object"}}
    return {
        "type": "object",
        "minProperties": 1,
        "maxProperties": 1,
        "propertyNames": {"enum": list(OPERATORS)},
        "additionalProperties": {"anyOf": [comparison, group]},
        "description": _DESCRIPTION,
    }


@cache
def filter_document(context: bool) -> type[BaseModel]:
    """The models documenting a request's filter (`Filter`, `FilterDepth1`, …) or, with `context`, an
    agent's sourceFilters (`ContextFilter`, …): built on first use, since only a JSON Schema needs these
    ~80 models, never validation."""
    return _filter_documents("Context" if context else "", context=context)


def _validated(raw: Any, allow_context: bool) -> Filter:
    try:
        return parse_filter(raw, allow_context=allow_context)
    except FilterInvalid as exc:
        raise exc.pydantic() from None


class _FilterField:
    """A §8 filter field of a pydantic model: validated by `parse_filter` (so errors name the exact path,
    `invalid_at_path` with the relative path in its context), documented by `filter_document`, serialised
    back to its JSON."""

    def __init__(self, allow_context: bool = False) -> None:
        self.allow_context = allow_context

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        allow = self.allow_context
        return core_schema.no_info_plain_validator_function(
            lambda raw: _validated(raw, allow),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda f: f.wire()),
        )

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """The field's schema with the document model as its input: built only when a JSON Schema is."""
        document = filter_document(self.allow_context).__pydantic_core_schema__
        return handler({**schema, "json_schema_input_schema": document})


FilterField = Annotated[Filter, _FilterField()]
"""A request's `filter` (search, MCP)."""
ContextFilterField = Annotated[Filter, _FilterField(allow_context=True)]
"""An agent definition's `sourceFilters[].filter`: values may name the trusted context."""

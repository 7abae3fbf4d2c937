"""Metadata filters on OpenSearch (SPEC §8): typed metadata fields and the compiler of a filter to a bool
query, used in the BM25 query's `filter` and in the k-NN query's `filter` (efficient filtering) alike.

A document's metadata is indexed in its passage rows and its document row under one field per key and
value type, so equality, ranges, prefixes and substrings run on the right Lucene type:
`meta_s.<key>` keyword (string values), `meta_l.<key>` keyword (list members), `meta_n.<key>` double,
`meta_b.<key>` boolean — mapped by dynamic templates (the indices are otherwise strict). A key's dots
become `~` (keys never hold one): `a.b` and `a` stay two fields instead of an object and a value. The
metadata itself is kept in `metadata` (not indexed) to be read back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain.filters import NEGATIONS, RANGES, Condition, Filter, Group, Nothing, Scalar

_RANGE_OPS = {"greaterThan": "gt", "greaterThanOrEquals": "gte", "lessThan": "lt", "lessThanOrEquals": "lte"}
_TYPED_FIELDS = {"meta_s": "keyword", "meta_l": "keyword", "meta_n": "double", "meta_b": "boolean"}

METADATA_PROPERTIES: dict[str, Any] = {
    "metadata": {"type": "object", "enabled": False},
    **{name: {"type": "object", "dynamic": True} for name in _TYPED_FIELDS},
}
METADATA_TEMPLATES: list[dict[str, Any]] = [
    {f"kb_{name}": {"path_match": f"{name}.*", "mapping": {"type": kind}}}
    for name, kind in _TYPED_FIELDS.items()
]
MATCH_NONE: dict[str, Any] = {"match_none": {}}


def _field(kind: str, key: str) -> str:
    return f"{kind}.{key.replace('.', '~')}"


def metadata_fields(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a passage row or document row stores of its document's metadata: the metadata itself and its
    typed fields (objects keyed by escaped key)."""
    if not metadata:
        return {}
    typed: dict[str, dict[str, Any]] = {name: {} for name in _TYPED_FIELDS}
    for key, value in metadata.items():
        escaped = key.replace(".", "~")
        if isinstance(value, list):
            typed["meta_l"][escaped] = value
        elif isinstance(value, bool):
            typed["meta_b"][escaped] = value
        elif isinstance(value, str):
            typed["meta_s"][escaped] = value
        else:
            typed["meta_n"][escaped] = float(value)
    return {"metadata": dict(metadata), **{name: fields for name, fields in typed.items() if fields}}


def mapped_metadata_fields(properties: Mapping[str, Any]) -> dict[str, str]:
    """The typed metadata fields of an index mapping's `properties` (field path -> metadata key)."""
    return {
        f"{kind}.{escaped}": escaped.replace("~", ".")
        for kind in _TYPED_FIELDS
        for escaped in (properties.get(kind) or {}).get("properties", {})
    }


def metadata_keys_query(fields: Mapping[str, str], scope: dict[str, Any]) -> dict[str, Any]:
    """A search body counting, among the rows `scope` matches, those holding each typed field: the keys
    in use are the fields with a count (one `filters` aggregation, no hits)."""
    return {
        "size": 0,
        "query": scope,
        "aggs": {"keys": {"filters": {"filters": {f: {"exists": {"field": f}} for f in fields}}}},
    }


def _equals(key: str, value: Scalar) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"term": {_field("meta_b", key): value}}
    if isinstance(value, str):
        return {"term": {_field("meta_s", key): value}}
    return {"term": {_field("meta_n", key): float(value)}}


def _wildcard_literal(text: str) -> str:
    return "".join("\\" + ch if ch in "*?\\" else ch for ch in text)


def _positive(c: Condition) -> dict[str, Any]:
    """A positive condition (equals, in, ranges, startsWith, listContains, stringContains) as a query."""
    if c.operator == "equals":
        return _equals(c.key, c.value)  # type: ignore[arg-type]
    if c.operator == "in":
        alternatives = [_equals(c.key, v) for v in c.value]  # type: ignore[union-attr]
        return {"bool": {"should": alternatives, "minimum_should_match": 1}} if alternatives else MATCH_NONE
    if c.operator in RANGES:
        return {"range": {_field("meta_n", c.key): {_RANGE_OPS[c.operator]: float(c.value)}}}  # type: ignore[arg-type]
    if c.operator == "startsWith":
        return {"prefix": {_field("meta_s", c.key): {"value": c.value}}}
    if c.operator == "listContains":
        return {"term": {_field("meta_l", c.key): c.value}}
    if c.operator == "stringContains":
        pattern = f"*{_wildcard_literal(str(c.value))}*"
        fields = (_field("meta_s", c.key), _field("meta_l", c.key))
        return {
            "bool": {
                "should": [{"wildcard": {f: {"value": pattern}}} for f in fields],
                "minimum_should_match": 1,
            }
        }
    raise AssertionError(c.operator)


def filter_query(node: Filter) -> dict[str, Any]:
    """The filter as an OpenSearch query (filter context: no scoring). A condition on an absent key
    (an unmapped or missing field) matches nothing; notEquals / notIn are `must_not` of the positive one,
    so documents lacking the key match them (SPEC §8)."""
    if isinstance(node, Nothing):
        return MATCH_NONE
    if isinstance(node, Group):
        parts = [filter_query(f) for f in node.filters]
        if node.operator == "andAll":
            return {"bool": {"filter": parts}}
        return {"bool": {"should": parts, "minimum_should_match": 1}}
    positive = NEGATIONS.get(node.operator)
    if positive is not None:
        return {"bool": {"must_not": [_positive(Condition(positive, node.key, node.value))]}}
    return _positive(node)

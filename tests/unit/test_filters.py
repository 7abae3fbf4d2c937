"""F-FILTER (SPEC §8): the filter language — its operators' meaning (the oracle every backend is held to),
its limits, and malformed filters refused as 400 invalid_request naming their exact path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from knowledge_core.domain.errors import InvalidRequest
from knowledge_core.domain.filters import (
    OPERATORS,
    ContextValue,
    FilterField,
    FilterInvalid,
    Nothing,
    all_of,
    bind_context,
    matches,
    parse_filter,
)
from knowledge_core.domain.models import Document
from knowledge_core.domain.wire import StrictRequest, parse_request
from pydantic import ValidationError

DOC: dict[str, Any] = {
    "region": "eu-west",
    "year": 2024,
    "score": 0.5,
    "public": True,
    "tags": ["policy", "hr-internal"],
    "empty": [],
}


def leaf(op: str, key: str, value: Any) -> dict[str, Any]:
    return {op: {"key": key, "value": value}}


def check(op: str, key: str, value: Any, metadata: dict[str, Any] | None = DOC) -> bool:
    return matches(metadata, parse_filter(leaf(op, key, value)))


# --- one test per operator -------------------------------------------------------------------------


def test_f_filter_equals_compares_scalars_of_the_same_json_type() -> None:
    assert check("equals", "region", "eu-west")
    assert not check("equals", "region", "EU-WEST")  # case-sensitive
    assert check("equals", "year", 2024.0)  # one number type: 2024 == 2024.0
    assert check("equals", "public", True)
    assert not check("equals", "year", "2024")  # a string is not a number
    assert not check("equals", "public", 1)  # nor a boolean a number
    assert not check("equals", "tags", "policy")  # a list is not a scalar: listContains
    assert not check("equals", "missing", "x")  # an absent key is false


def test_f_filter_not_equals_is_true_for_an_absent_key() -> None:
    assert check("notEquals", "region", "us-east")
    assert not check("notEquals", "region", "eu-west")
    assert check("notEquals", "missing", "x")
    assert check("notEquals", "missing", "x", metadata=None)
    assert check("notEquals", "year", "2024")  # another type is never equal


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        ("greaterThan", 2023, True),
        ("greaterThan", 2024, False),
        ("greaterThanOrEquals", 2024, True),
        ("greaterThanOrEquals", 2024.5, False),
        ("lessThan", 2025, True),
        ("lessThan", 2024, False),
        ("lessThanOrEquals", 2024, True),
        ("lessThanOrEquals", 2023.99, False),
    ],
)
def test_f_filter_ranges_compare_numbers(op: str, value: float, expected: bool) -> None:
    assert check(op, "year", value) is expected


@pytest.mark.parametrize("op", ["greaterThan", "greaterThanOrEquals", "lessThan", "lessThanOrEquals"])
def test_f_filter_ranges_are_false_on_strings_booleans_lists_and_absent_keys(op: str) -> None:
    metadata = {"s": "5", "b": True, "l": ["5"]}
    for key in ("s", "b", "l", "missing"):
        assert not check(op, key, 0, metadata) and not check(op, key, 10, metadata)


def test_f_filter_in_and_not_in() -> None:
    assert check("in", "region", ["us-east", "eu-west"])
    assert check("in", "year", ["x", 2024])
    assert not check("in", "region", [])
    assert not check("in", "missing", ["x"])
    assert not check("in", "tags", ["policy"])  # a list is not a scalar
    assert check("notIn", "region", ["us-east"])
    assert not check("notIn", "region", ["eu-west", "x"])
    assert check("notIn", "missing", ["x"])


def test_f_filter_starts_with_applies_to_strings_only() -> None:
    assert check("startsWith", "region", "eu-")
    assert check("startsWith", "region", "")
    assert not check("startsWith", "region", "EU")
    assert not check("startsWith", "tags", "pol")  # not to list members
    assert not check("startsWith", "year", "20")
    assert not check("startsWith", "missing", "")


def test_f_filter_list_contains_applies_to_lists() -> None:
    assert check("listContains", "tags", "policy")
    assert not check("listContains", "tags", "pol")
    assert not check("listContains", "region", "eu-west")  # a string is not a list
    assert not check("listContains", "empty", "x")
    assert not check("listContains", "missing", "x")


def test_f_filter_string_contains_applies_to_strings_and_list_members() -> None:
    assert check("stringContains", "region", "west")
    assert check("stringContains", "tags", "internal")
    assert not check("stringContains", "tags", "policy,hr")  # never across members
    assert not check("stringContains", "region", "WEST")
    assert not check("stringContains", "year", "202")
    assert not check("stringContains", "missing", "")


def test_f_filter_and_all_and_or_all() -> None:
    eu, old = leaf("equals", "region", "eu-west"), leaf("lessThan", "year", 2000)
    assert not matches(DOC, parse_filter({"andAll": [eu, old]}))
    assert matches(DOC, parse_filter({"orAll": [eu, old]}))
    nested = {"andAll": [eu, {"orAll": [old, {"andAll": [leaf("equals", "public", True), eu]}]}]}
    assert matches(DOC, parse_filter(nested))


def test_f_filter_all_of_combines_an_agent_filter_with_a_request_filter() -> None:
    agent, request = (
        parse_filter(leaf("equals", "region", "eu-west")),
        parse_filter(leaf("equals", "year", 1)),
    )
    assert all_of([None, None]) is None
    assert all_of([agent, None]) is agent
    combined = all_of([agent, request])
    assert combined is not None and not matches(DOC, combined) and matches({**DOC, "year": 1}, combined)


def test_f_filter_context_values_bind_from_trusted_context() -> None:
    raw = {
        "andAll": [leaf("equals", "region", {"context": "region"}), leaf("in", "year", {"context": "years"})]
    }
    with pytest.raises(FilterInvalid):
        parse_filter(raw)  # only agent definitions may name the context
    parsed = parse_filter(raw, allow_context=True)
    assert parsed.wire() == raw
    assert matches(DOC, bind_context(parsed, {"region": "eu-west", "years": [2024]}))
    assert not matches(DOC, bind_context(parsed, {"region": "us", "years": [2024]}))
    # An absent context value (or one of the wrong type) matches nothing, even under notEquals.
    assert isinstance(
        bind_context(parse_filter(leaf("notEquals", "a", {"context": "x"}), allow_context=True), {}), Nothing
    )
    assert isinstance(
        bind_context(parse_filter(leaf("lessThan", "a", {"context": "x"}), allow_context=True), {"x": "1"}),
        Nothing,
    )
    assert isinstance(
        parse_filter(leaf("equals", "a", {"context": "x"}), allow_context=True).value, ContextValue
    )  # type: ignore[union-attr]


def test_f_filter_capabilities_advertise_operators_and_limits() -> None:
    from knowledge_core.domain.wire import CapabilitiesResponse

    wire = CapabilitiesResponse(route="r", enabled=True, knowledge_scope_revision="x").wire()
    assert wire["extensions"]["filter"] == {
        "schema": "bailing.agent-knowledge-filter.v1",
        "operators": list(OPERATORS),
        "max_conditions": 16,
        "max_depth": 3,
    }
    assert len(OPERATORS) == 13


# --- malformed filters: 400 invalid_request naming the exact path ----------------------------------


class _Search(StrictRequest):
    filter: FilterField | None = None


def refused(raw: Any) -> str:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(_Search, json.dumps({"filter": raw}))
    assert caught.value.status == 400 and caught.value.code == "invalid_request"
    assert caught.value.message.startswith(f"{caught.value.field}: ")
    return str(caught.value.field)


def conds(n: int) -> list[dict[str, Any]]:
    return [leaf("equals", "k", i) for i in range(n)]


def test_f_filter_error_path_wrong_value_type_names_the_value() -> None:
    raw = {"andAll": [leaf("equals", "a", 1), leaf("greaterThan", "year", "2024")]}
    assert refused(raw) == "filter.andAll[1].greaterThan.value"


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"near": {"key": "a", "value": 1}}, "filter.near"),
        ({"andAll": [leaf("equals", "a", 1), {"regex": {}}]}, "filter.andAll[1].regex"),
    ],
)
def test_f_filter_error_path_unknown_operator(raw: Any, path: str) -> None:
    assert refused(raw) == path


def test_f_filter_error_path_two_operators_in_one_object() -> None:
    assert refused({**leaf("equals", "a", 1), **leaf("notEquals", "b", 2)}) == "filter"
    assert refused({"orAll": [{}, leaf("equals", "a", 1)]}) == "filter.orAll[0]"


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (leaf("in", "a", "eu"), "filter.in.value"),
        (leaf("in", "a", [[1]]), "filter.in.value[0]"),
        (leaf("in", "a", list(range(33))), "filter.in.value"),
        (leaf("startsWith", "a", 1), "filter.startsWith.value"),
        (leaf("listContains", "a", ["x"]), "filter.listContains.value"),
        (leaf("stringContains", "a", "x" * 257), "filter.stringContains.value"),
        (leaf("equals", "a", ["x"]), "filter.equals.value"),
        (leaf("equals", "a", None), "filter.equals.value"),
        (leaf("lessThan", "a", True), "filter.lessThan.value"),
        (leaf("equals", "1a", 1), "filter.equals.key"),
        (leaf("equals", "a", {"context": "x"}), "filter.equals.value"),
        ({"equals": {"key": "a"}}, "filter.equals.value"),
        ({"equals": {"key": "a", "value": 1, "kb_ids": []}}, "filter.equals.kb_ids"),
        ({"equals": "a"}, "filter.equals"),
        ({"andAll": leaf("equals", "a", 1)}, "filter.andAll"),
        ({"andAll": [leaf("equals", "a", 1)]}, "filter.andAll"),
        ({"orAll": conds(17)}, "filter.orAll"),
        ("region = eu", "filter"),
    ],
)
def test_f_filter_error_path_wrong_value_type(raw: Any, path: str) -> None:
    assert refused(raw) == path


def test_f_filter_error_path_too_deep() -> None:
    three = {"andAll": [{"orAll": [{"andAll": conds(2)}, *conds(1)]}, *conds(1)]}
    assert parse_filter(three)  # three levels of groups: the limit
    four = {"andAll": [{"orAll": [{"andAll": [{"orAll": conds(2)}, *conds(1)]}, *conds(1)]}, *conds(1)]}
    assert refused(four) == "filter.andAll[0].orAll[0].andAll[0].orAll"


def test_f_filter_error_path_too_many_conditions() -> None:
    assert parse_filter({"andAll": conds(16)})
    assert refused({"andAll": [{"orAll": conds(16)}, *conds(1)]}) == "filter"


def test_f_filter_errors_echo_no_value() -> None:
    secret = "s3cr3t-value-of-the-client"
    with pytest.raises(InvalidRequest) as caught:
        parse_request(_Search, json.dumps({"filter": leaf("lessThan", "a", secret)}))
    assert secret not in caught.value.message


def test_f_filter_wire_round_trip() -> None:
    raw = {"orAll": [leaf("in", "a", ["x", 1, True]), leaf("startsWith", "b", "p")]}
    request = parse_request(_Search, json.dumps({"filter": raw}))
    assert request.model_dump(mode="json") == {"filter": raw}


# --- document metadata (§8 limits) -------------------------------------------------------------------


def doc(metadata: Any) -> Document:
    return Document(source_key="s@1", doc_id="d", title="t", body="b", metadata=metadata)


def test_f_filter_document_metadata_within_limits() -> None:
    good = {"k": "x" * 256, "n": -1.5, "b": False, "l": ["x"] * 32, **{f"k{i}": i for i in range(28)}}
    assert doc(good).metadata == good
    assert doc({}).metadata is None and doc(None).metadata is None  # {} is stored equal to none


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        ({f"k{i}": i for i in range(33)}, "metadata"),
        ({"1a": 1}, "metadata.1a"),
        ({"a": "x" * 257}, "metadata.a"),
        ({"a": ["x"] * 33}, "metadata.a"),
        ({"a": [1]}, "metadata.a[0]"),
        ({"a": None}, "metadata.a"),
        ({"a": {"b": 1}}, "metadata.a"),
        ({"a": float("inf")}, "metadata.a"),
    ],
)
def test_f_filter_document_metadata_refused_naming_the_key(metadata: Any, path: str) -> None:
    with pytest.raises(ValidationError) as caught:
        doc(metadata)
    [error] = caught.value.errors()
    assert error["type"] == "invalid_at_path"
    assert "metadata" + error["ctx"]["path"] == path


def test_f_filter_metadata_is_part_of_everything_stored_equal() -> None:
    from knowledge_core.domain.ingestion import stored_unchanged

    assert stored_unchanged(doc({"a": 1}), doc({"a": 1}))
    assert not stored_unchanged(doc({"a": 1}), doc({"a": 2}))
    assert not stored_unchanged(doc(None), doc({"a": 1}))


def test_f_filter_opensearch_compiles_to_typed_fields_and_escapes_wildcards() -> None:
    from knowledge_core.adapters.opensearch_filters import filter_query, metadata_fields

    assert metadata_fields({"team.name": "x", "n": 1, "b": True, "l": ["a"]}) == {
        "metadata": {"team.name": "x", "n": 1, "b": True, "l": ["a"]},
        "meta_s": {"team~name": "x"},
        "meta_n": {"n": 1.0},
        "meta_b": {"b": True},
        "meta_l": {"l": ["a"]},
    }
    query = filter_query(parse_filter(leaf("stringContains", "a.b", "x*?\\")))
    patterns = [w["wildcard"] for w in query["bool"]["should"]]
    assert patterns == [
        {"meta_s.a~b": {"value": "*x\\*\\?\\\\*"}},
        {"meta_l.a~b": {"value": "*x\\*\\?\\\\*"}},
    ]
    assert filter_query(parse_filter(leaf("notIn", "a", []))) == {"bool": {"must_not": [{"match_none": {}}]}}

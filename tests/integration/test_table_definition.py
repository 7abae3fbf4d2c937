"""§5: the DynamoDB table of template.yaml and the one the code creates (`TABLE_DEFINITION`, used against
moto and the DynamoDB-API server on loopback) are one definition: keys, attribute types, billing, TTL."""

from __future__ import annotations

from knowledge_core.adapters.dynamodb import TABLE_DEFINITION, TTL_ATTRIBUTE

from kb_cli.template import load_template


def _table() -> dict:
    resources = load_template()["Resources"]
    table = resources["KnowledgeTable"]
    assert table["Type"] == "AWS::DynamoDB::Table"
    return table["Properties"]


def test_template_table_matches_table_definition() -> None:
    props = _table()
    for name in ("AttributeDefinitions", "KeySchema", "BillingMode"):
        assert props[name] == TABLE_DEFINITION[name], name
    assert set(TABLE_DEFINITION) == {"AttributeDefinitions", "KeySchema", "BillingMode"}


def test_template_table_ttl_is_the_code_ttl_attribute() -> None:
    assert _table()["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}


def test_template_has_no_secondary_indexes_the_code_does_not_create() -> None:
    props = _table()
    for name in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        assert props.get(name) == TABLE_DEFINITION.get(name), name

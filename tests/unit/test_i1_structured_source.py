"""A document's `structured_source.uri` reaches agents (citations), logs and terminals, so its
raw control characters are percent-encoded on the way in — by the one Document model every write path
(admin PUT, bulk, ingestion jobs) and every read of a store builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from knowledge_core.adapters.sqlite.search import SqliteFtsBackend
from knowledge_core.domain.models import Document, DocumentAcl


def doc(uri: object, **extra: object) -> Document:
    return Document(
        source_key="s@1",
        doc_id="d",
        title="t",
        body="b",
        structured_source={"uri": uri, **extra},
        acl=DocumentAcl(tenant="t"),
    )


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("docs/a\nb.md", "docs/a%0Ab.md"),
        ("x\x00\x1b[31mred\x7f\x85.md", "x%00%1B[31mred%7F%C2%85.md"),
        ("\r\n\t", "%0D%0A%09"),
    ],
)
def test_structured_source_uri_control_characters_escaped(raw: str, stored: str) -> None:
    assert doc(raw, kind="md").structured_source == {"uri": stored, "kind": "md"}


@pytest.mark.parametrize("uri", ["docs/设备 安装.md", "https://example.org/a?b=c#d", "a%0Ab.md"])
def test_structured_source_printable_uri_kept_as_is(uri: str) -> None:
    assert doc(uri).structured_source == {"uri": uri}


def test_structured_source_without_a_string_uri_untouched() -> None:
    assert doc(None, pages=[1]).structured_source == {"uri": None, "pages": [1]}
    assert Document(source_key="s@1", doc_id="d", title="t", body="b").structured_source is None


def test_structured_source_uri_escaped_in_the_index(tmp_path: Path) -> None:
    backend = SqliteFtsBackend(tmp_path / "search.sqlite3")
    backend.put_documents([doc("a\nb.md")])
    stored = backend.get_document("s@1", "d")
    assert stored is not None and stored.structured_source == {"uri": "a%0Ab.md"}

"""A-READ: byte budgets on adversarial text, code-point-safe pages, byte-exact chains, the chain limit.

Documents are ingested through the admin service into the embedded backend (SQLite FTS5), found by
search, and read page by page through the knowledge service."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from knowledge_core.bootstrap import Container
from knowledge_core.domain.errors import ReferenceInvalid
from knowledge_core.domain.models import AgentDefinition, Document, DocumentAcl, Principal, SourceDefinition
from knowledge_core.domain.wire import ReadRequest, SearchRequest

from tests.conftest import FakeClock, embedded_container

ROUTE = "budget"
SOURCE = "budget-docs@1.0.0"
ACL = DocumentAcl(tenant="t")  # the principal's tenant (a document always names its tenant)
PRINCIPAL = Principal(client_id="c", session_id="s", subject="u", tenant="t", routes=[ROUTE])
CHAIN_MAX = 131072
MAX_BYTES = (4096, 5000, 16384, 32768)

CONTROL = "".join(chr(c) for c in range(0x20))
# Characters that stress JSON escaping and UTF-8 cuts: 4-byte, CJK, combining, quotes, controls, separators.
NASTY_ALPHABET = [
    "😀",
    "中",
    "\u0301",
    '"',
    "\\",
    "\x00",
    "\x1f",
    "\x7f",
    "\u2028",
    "\u2029",
    "a",
    " ",
    "\ud7ff",
    "\U0010ffff",
]
MIXED_ALPHABET = [*NASTY_ALPHABET, "é", "\n"]
ADVERSARIAL = {
    "emoji": "😀🧪🚀🫠👩‍👩‍👧‍👦" * 2000,
    "cjk": "设备安装规范：网关离线时请先检查电源与网络。" * 900,
    "combining": ("e\u0301a\u0300\u0301\u0302\u0303Z\u0324\u0354\u0367\u0311o\u0328\u0317\u033b " * 1200),
    "quotes": ('"\'"`"' + "“”„" + 'say "hi" ') * 1500,
    "backslashes": ("\\" * 7 + "\\n\\u0000 C:\\path\\") * 1000,
    "control": CONTROL * 600,
    "separators": ("line\u2028para\u2029\u0085\ufeff" * 1500),
    "mixed": "".join(random.Random(7).choice(MIXED_ALPHABET) for _ in range(20000)),
}


def dumps(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def build_container(tmp: Path) -> Container:
    # Registry cached for the (frozen) fake clock's lifetime: these tests are about pages, not switches.
    container = embedded_container(tmp, FakeClock(), registry_cache_seconds=60)
    admin = container.admin
    admin.publish_source(SourceDefinition.model_validate({"id": "budget-docs", "version": "1.0.0"}))
    admin.publish_agent(
        AgentDefinition.model_validate(
            {
                "id": "budget-agent",
                "version": "1.0.0",
                "modelProfile": {"candidates": [{"model": "m"}]},
                "allowedKnowledge": [{"id": "budget-docs", "version": "1.0.0"}],
            }
        )
    )
    admin.set_workspace(ROUTE, "budget-agent@1.0.0")
    return container


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Container:
    container = build_container(tmp_path_factory.mktemp("read-pages"))
    docs = [
        Document(acl=ACL, source_key=SOURCE, doc_id=f"adv-{kind}", title=f"zz{kind} " + body[:300], body=body)
        for kind, body in ADVERSARIAL.items()
    ]
    docs += [
        Document(
            acl=ACL, source_key=SOURCE, doc_id="long-ascii", title="zzlongascii", body="lorem ipsum " * 12000
        ),
        Document(acl=ACL, source_key=SOURCE, doc_id="long-emoji", title="zzlongemoji", body="🚀" * 40000),
        Document(acl=ACL, source_key=SOURCE, doc_id="long-cjk", title="zzlongcjk", body="网关离线" * 12000),
        Document(
            acl=ACL, source_key=SOURCE, doc_id="long-control", title="zzlongcontrol", body=CONTROL * 5000
        ),
        Document(
            acl=ACL, source_key=SOURCE, doc_id="exact-limit", title="zzexactlimit", body="x" * CHAIN_MAX
        ),
        Document(
            acl=ACL,
            source_key=SOURCE,
            doc_id="limit-plus-one",
            title="zzlimitplusone",
            body="y" * (CHAIN_MAX + 1),
        ),
        Document(acl=ACL, source_key=SOURCE, doc_id="empty", title="zzempty", body=""),
    ]
    container.admin.put_documents(docs)
    return container


def ref_for(container: Container, term: str) -> str:
    result = container.knowledge.search(PRINCIPAL, ROUTE, SearchRequest(query=term, limit=1)).wire()
    assert result["status"] == "ok" and len(result["hints"]) == 1, result
    return result["hints"][0]["ref"]


def read_chain(container: Container, ref: str, max_bytes: int | None) -> list[dict]:
    pages: list[dict] = []
    cursor = None
    while True:
        fields = {"ref": ref, "cursor": cursor} | ({"max_bytes": max_bytes} if max_bytes else {})
        page = container.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(**fields)).wire()
        pages.append(page)
        cursor = page["next_cursor"]
        if cursor is None:
            return pages
        assert page["content"], "a page that is not the last must make progress"
        assert len(pages) <= 2000


def check_chain(pages: list[dict], body: str, max_bytes: int) -> bytes:
    """Every A-READ invariant of one chain; returns the concatenated content bytes."""
    raw = body.encode("utf-8")
    delivered = b""
    for i, page in enumerate(pages):
        size = len(dumps(page))
        assert size <= max_bytes, (i, size)
        piece = page["content"].encode("utf-8")
        assert raw[len(delivered) : len(delivered) + len(piece)] == piece, (
            "page content is not the next slice"
        )
        delivered += piece
        assert page["total_content_bytes"] == len(raw)
        assert page["read_chain_max_bytes"] == CHAIN_MAX
        assert len(page["title"]) <= 256
        assert page["schema"] == "bailing.agent-knowledge-read.v1" and page["trust"] == "reference_only"
        if i < len(pages) - 1:
            assert page["truncated"] is True and page["budget_exhausted"] is False
            assert isinstance(page["next_cursor"], str)
            # Pages are filled: only the last character that did not fit (<= 6 escaped bytes) and the
            # envelope's worst-case allowance (cursor digits, `false` spelling) are left unused.
            assert size >= max_bytes - 32, (i, size)
    # Every page boundary is a code point boundary, so the concatenation decodes and equals the body.
    delivered.decode("utf-8")
    return delivered


@pytest.mark.parametrize("max_bytes", MAX_BYTES)
@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_a_read_adversarial_pages_fit_and_concatenate(world, kind, max_bytes):
    pages = read_chain(world, ref_for(world, f"zz{kind}"), max_bytes)
    body = ADVERSARIAL[kind]
    assert check_chain(pages, body, max_bytes) == body.encode("utf-8")
    last = pages[-1]
    assert (last["next_cursor"], last["truncated"], last["budget_exhausted"]) == (None, False, False)
    assert last["title"] == (f"zz{kind} " + body[:300])[:256]
    if max_bytes < len(body.encode("utf-8")):
        assert len(pages) > 1


def test_a_read_default_page_size_is_16384(world):
    pages = read_chain(world, ref_for(world, "zzemoji"), None)
    assert len(pages) > 1 and all(len(dumps(p)) <= 16384 for p in pages)
    assert len(dumps(pages[0])) > 16384 - 32


@pytest.mark.parametrize(
    ("doc", "max_bytes", "expected"),
    [
        ("zzlongascii", 32768, CHAIN_MAX),
        ("zzlongemoji", 32768, CHAIN_MAX),
        ("zzlongemoji", 4096, CHAIN_MAX),
        # 131072 falls inside a 3-byte character: the chain ends on the code point before it.
        ("zzlongcjk", 32768, CHAIN_MAX - CHAIN_MAX % 3),
        ("zzlongcontrol", 32768, CHAIN_MAX),
        ("zzlimitplusone", 16384, CHAIN_MAX),
    ],
)
def test_a_read_chain_stops_at_131072_bytes(world, doc, max_bytes, expected):
    pages = read_chain(world, ref_for(world, doc), max_bytes)
    stored = world.backend.get_document(
        SOURCE, doc.removeprefix("zz").replace("long", "long-").replace("limitplusone", "limit-plus-one")
    )
    assert stored is not None and len(stored.body.encode()) > CHAIN_MAX
    delivered = check_chain(pages, stored.body, max_bytes)
    assert len(delivered) == expected
    last = pages[-1]
    assert (last["truncated"], last["budget_exhausted"], last["next_cursor"]) == (True, True, None)
    assert all(p["budget_exhausted"] is False for p in pages[:-1])


def test_a_read_body_of_exactly_131072_bytes_is_complete(world):
    pages = read_chain(world, ref_for(world, "zzexactlimit"), 32768)
    assert b"".join(p["content"].encode() for p in pages) == b"x" * CHAIN_MAX
    assert (pages[-1]["truncated"], pages[-1]["budget_exhausted"], pages[-1]["next_cursor"]) == (
        False,
        False,
        None,
    )


def test_a_read_empty_document(world):
    pages = read_chain(world, ref_for(world, "zzempty"), 4096)
    assert len(pages) == 1
    assert pages[0]["content"] == "" and pages[0]["total_content_bytes"] == 0
    assert (pages[0]["truncated"], pages[0]["next_cursor"]) == (False, None)


def test_a_read_cursor_of_another_ref_is_invalid(world):
    first = world.knowledge.read(
        PRINCIPAL, ROUTE, ReadRequest(ref=ref_for(world, "zzcjk"), max_bytes=4096)
    ).wire()
    with pytest.raises(ReferenceInvalid):
        world.knowledge.read(
            PRINCIPAL,
            ROUTE,
            ReadRequest(ref=ref_for(world, "zzemoji"), max_bytes=4096, cursor=first["next_cursor"]),
        ).wire()


def test_a_read_a_cursor_may_be_replayed_and_page_size_changed(world):
    ref = ref_for(world, "zzmixed")
    first = world.knowledge.read(PRINCIPAL, ROUTE, ReadRequest(ref=ref, max_bytes=4096)).wire()
    again = world.knowledge.read(
        PRINCIPAL, ROUTE, ReadRequest(ref=ref, max_bytes=4096, cursor=first["next_cursor"])
    ).wire()
    bigger = world.knowledge.read(
        PRINCIPAL, ROUTE, ReadRequest(ref=ref, max_bytes=32768, cursor=first["next_cursor"])
    ).wire()
    body = ADVERSARIAL["mixed"].encode()
    start = len(first["content"].encode())
    assert body[start:].startswith(again["content"].encode())
    assert body[start:].startswith(bigger["content"].encode())
    assert len(bigger["content"].encode()) > len(again["content"].encode())


# --- generated bodies ------------------------------------------------------------------------------

_ANY_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=1500)
_NASTY_TEXT = st.text(
    alphabet=st.sampled_from(NASTY_ALPHABET),
    max_size=1500,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunk=st.one_of(_ANY_TEXT, _NASTY_TEXT), repeat=st.integers(1, 24), max_bytes=st.sampled_from(MAX_BYTES)
)
def test_a_read_generated_bodies(world, chunk, repeat, max_bytes):
    body = chunk * repeat
    world.admin.put_documents(
        [Document(acl=ACL, source_key=SOURCE, doc_id="generated", title="zzgenerated", body=body)]
    )
    pages = read_chain(world, ref_for(world, "zzgenerated"), max_bytes)
    raw = body.encode("utf-8")
    delivered = check_chain(pages, body, max_bytes)
    assert delivered == raw[: len(delivered)]
    if len(raw) <= CHAIN_MAX:
        assert delivered == raw
        assert (pages[-1]["truncated"], pages[-1]["next_cursor"]) == (False, None)
    else:
        assert CHAIN_MAX - 3 <= len(delivered) <= CHAIN_MAX
        assert (pages[-1]["truncated"], pages[-1]["budget_exhausted"]) == (True, True)

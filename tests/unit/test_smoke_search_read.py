"""A-SEARCH / A-READ smoke: the demo workspace answers a search and a read through the services."""

from knowledge_core.domain.models import Principal
from knowledge_core.domain.wire import ReadRequest, SearchRequest

PRINCIPAL = Principal(client_id="c", session_id="s", subject="u", tenant="demo", routes=["demo"])


def test_search_then_read_first_page(demo_container):
    svc = demo_container.knowledge
    result = svc.search(PRINCIPAL, "demo", SearchRequest(query="网关离线"))
    assert result["status"] == "ok" and result["hints"]
    page = svc.read(PRINCIPAL, "demo", ReadRequest(ref=result["hints"][0]["ref"]))
    assert page["content"] and page["revision"] == result["hints"][0]["revision"]

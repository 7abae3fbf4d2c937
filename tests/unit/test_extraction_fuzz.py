"""Bounded fuzzing of the extractors (SPEC §7): seeded (derandomized) hypothesis runs over
HTML built from hostile fragments, mutated PDFs, DOCX packages with generated XML, and raw bytes for every
format. Invariants, whatever the input: text or a typed `ExtractionError` (a known code, nothing else
escapes); the wall time under the bound; the serving process's memory unchanged (the work is done in the
resource-limited child). A few hundred examples, well under a minute or two on a small machine."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from knowledge_core.domain.ingestion import ERROR_CODES
from knowledge_core.extraction import Extracted, ExtractionError, ExtractionLimits
from knowledge_core.extraction_sandbox import GRACE_SECONDS, ProcessExtractor

from tests.unit.test_extraction import make_docx, make_pdf

LIMITS = ExtractionLimits(wall_seconds=3, memory_bytes=768 * 1024 * 1024)
BOUNDED = settings(
    derandomize=True,  # the same examples on every run: CI failures reproduce
    database=None,
    max_examples=40,
    deadline=None,  # the bound checked is the extraction's own (below), not hypothesis's per-example one
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
HTML_FRAGMENTS = [
    "<div>", "</div>", "<table>", "<tr>", "<td>", "</td>", "</tr>", "</table>", "<p>", "</p>", "<ul>",
    "<li>", "</ul>", "<pre>", "</pre>", "<h1>", "</h1>", "<h3>", "<br>", "<br/>", "<img src=x>", "<main>",
    "<script>", "</script>", "<style>", "<!--", "-->", "<![CDATA[", "]]>", "<!doctype html>", "&amp;",
    "&#0;", "&#x110000;", "&nbsp;", "<title>", "</title>", "<nav>", "<a href='", "'>", "阀门", "text ",
    "\x00", "\ud7ff", "<svg><div>", "<template>", "<", ">", "</", "<div class='a' id=\"b\">",
]  # fmt: skip


@pytest.fixture(scope="module")
def extractor() -> Iterator[ProcessExtractor]:
    shared = ProcessExtractor(LIMITS)
    yield shared
    shared.close()


def _peak_mib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0


def _holds_the_invariants(extractor: ProcessExtractor, name: str, data: bytes) -> None:
    before, started = _peak_mib(), time.monotonic()
    try:
        result = extractor(name, data)
    except ExtractionError as exc:
        assert exc.code in ERROR_CODES
    else:
        assert isinstance(result, Extracted) and isinstance(result.body, str) and result.body.strip()
        assert len(result.body.encode("utf-8")) <= LIMITS.max_output_bytes
    assert time.monotonic() - started < LIMITS.wall_seconds + GRACE_SECONDS + 2
    assert _peak_mib() - before < 32


@BOUNDED
@given(st.lists(st.sampled_from(HTML_FRAGMENTS), max_size=400), st.integers(0, 600))
def test_fuzz_html_from_hostile_fragments(extractor: ProcessExtractor, parts: list[str], depth: int) -> None:
    page = "<div>" * depth + "".join(parts)
    _holds_the_invariants(extractor, "f.html", page.encode("utf-8", "surrogatepass"))


@pytest.fixture(scope="module")
def pdf_seed() -> bytes:
    return make_pdf(["pumps and valves " * 20, "second page"], title="Seed")


@BOUNDED
@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.binary(min_size=1, max_size=8)), max_size=8), st.booleans()
)
def test_fuzz_mutated_pdfs(
    extractor: ProcessExtractor, pdf_seed: bytes, edits: list[tuple[int, bytes]], cut: bool
) -> None:
    data = bytearray(pdf_seed)
    for offset, patch in edits:
        at = offset % len(data)
        data[at : at + len(patch)] = patch
    if cut and edits:
        data = data[: edits[0][0] % len(data)]
    _holds_the_invariants(extractor, "f.pdf", bytes(data))


def _docx_with(document_xml: bytes, compress: int) -> bytes:
    seed = zipfile.ZipFile(io.BytesIO(make_docx()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compress) as package:
        for entry in seed.infolist():
            payload = document_xml if entry.filename == "word/document.xml" else seed.read(entry)
            package.writestr(entry.filename, payload)
    return out.getvalue()


XML_FRAGMENTS = [
    "<w:p>", "</w:p>", "<w:r>", "</w:r>", "<w:t>", "</w:t>", "<w:tbl>", "<w:tr>", "<w:tc>", "</w:tc>",
    "</w:tr>", "</w:tbl>", "text", "<!DOCTYPE x [<!ENTITY a 'aaaa'>]>", "&a;", "&amp;", "<w:body>",
    "</w:body>", "\x00", "<?xml version='1.0'?>", "<w:pStyle w:val='Heading1'/>", "<w:pPr>", "</w:pPr>",
]  # fmt: skip
_DOC_OPEN = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
)


@BOUNDED
@given(
    st.lists(st.sampled_from(XML_FRAGMENTS), max_size=300),
    st.integers(0, 400),
    st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
)
def test_fuzz_docx_packages(extractor: ProcessExtractor, parts: list[str], depth: int, compress: int) -> None:
    xml = _DOC_OPEN + b"<w:p>" * depth + "".join(parts).encode() + b"</w:body></w:document>"
    _holds_the_invariants(extractor, "f.docx", _docx_with(xml, compress))


@BOUNDED
@given(st.sampled_from(["f.md", "f.txt", "f.html", "f.pdf", "f.docx"]), st.binary(max_size=4096))
def test_fuzz_raw_bytes_in_every_format(extractor: ProcessExtractor, name: str, data: bytes) -> None:
    _holds_the_invariants(extractor, name, data)

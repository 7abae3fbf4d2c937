"""I-INGEST formats: Markdown, text, HTML (content only), PDF (page starts kept) and DOCX (headings kept)
extracted to Markdown; encrypted, corrupt, empty and unknown files are typed errors. Every file is made
here by the test itself."""

from __future__ import annotations

import io

import pytest
from knowledge_core.extraction import ExtractionError, extract

from tests.bombs import pdf_file


def make_pdf(pages: list[str], title: str | None = None) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def make_docx(build: object = None) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Valve manual", level=0)
    document.add_heading("Installation", level=1)
    document.add_paragraph("Mount the valve upright.")
    document.add_paragraph("first step", style="List Bullet")
    document.add_paragraph("second step", style="List Bullet")
    document.add_heading("Torque", level=2)
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "size", "torque"
    table.cell(1, 0).text, table.cell(1, 1).text = "M8", "12 Nm"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_i_ingest_markdown_and_text_keep_their_heading_as_title() -> None:
    md = extract("a.md", b"# Pump guide\n\n## Seals\n\nReplace every 90 days.\n")
    assert (md.format, md.title) == ("markdown", "Pump guide")
    assert md.body.startswith("## Seals")
    txt = extract("b.TXT", "阀门检修每季度一次。\n".encode())
    assert txt.title is None and txt.body.startswith("阀门检修")


@pytest.mark.parametrize(
    ("text", "title", "body"),
    [
        ("差旅报销制度\n\n一、住宿标准\n每晚不超过 500 元。\n", "差旅报销制度", "一、住宿标准"),
        ("On-call handbook\r\n\r\nA SEV1 pages the primary.\r\n", "On-call handbook", "A SEV1 pages"),
        ("Dear team,\n\nthe pump is fixed.\n", None, "Dear team,"),  # ends like a sentence
        ("Replace the seals.\n\nEvery 90 days.\n", None, "Replace the seals."),
        ("Pump seals\nReplace every 90 days.\n", None, "Pump seals"),  # no blank line after it
        ("Pump seals\n\n\n", None, "Pump seals"),  # nothing after it: the title would be all of it
        ("x" * 81 + "\n\nbody\n", None, "x" * 81),  # too long for a title line
    ],
)
def test_i_ingest_text_titles_a_short_first_line_standing_alone(
    text: str, title: str | None, body: str
) -> None:
    """A text file titled the way such files are (a short first line, a blank line after it) keeps that line
    as its title instead of its file name, and out of its body; anything else has no title of its own."""
    txt = extract("notes.txt", text.encode())
    assert txt.title == title and txt.body.startswith(body)


def test_i_ingest_html_keeps_content_only() -> None:
    page = """<!doctype html><html><head><title>Gateway offline</title><style>.x{color:red}</style>
    <script>var secret = "tracking";</script></head><body>
    <header><a href="/">Home</a> | Products</header><nav><ul><li>Menu item</li></ul></nav>
    <main><h1>Gateway offline</h1><p>Check the <b>power</b> LED first.</p>
    <h2>Network</h2><ul><li>ping the gateway</li><li>check DHCP</li></ul>
    <pre>kb status --all</pre>
    <table><tr><th>LED</th><th>Meaning</th></tr><tr><td>red</td><td>no uplink</td></tr></table>
    </main><aside>Related posts</aside><footer>© 2026 Lumen</footer></body></html>"""
    html = extract("page.html", page.encode())
    assert html.title == "Gateway offline"
    assert "Check the power LED first." in html.body
    assert "## Network" in html.body and "- ping the gateway\n- check DHCP" in html.body
    assert "```\nkb status --all\n```" in html.body and "red | no uplink" in html.body
    for dropped in ("tracking", "color:red", "Home", "Menu item", "Related posts", "2026 Lumen"):
        assert dropped not in html.body


def test_i_ingest_pdf_keeps_page_starts() -> None:
    data = make_pdf(["Page one talks about pumps.", "Page two talks about valves."], title="Manual")
    pdf = extract("m.pdf", data)
    assert pdf.title == "Manual" and len(pdf.page_starts) == 2
    assert pdf.body[pdf.page_starts[0] :].startswith("Page one")
    assert pdf.body[pdf.page_starts[1] :].startswith("Page two talks about valves.")


def pdf_with_unicode_map(pages: list[bytes], unicode: dict[int, int]) -> bytes:
    """A PDF drawing each page's bytes as one line in Helvetica, its font's ToUnicode map sending each code
    of `unicode` to that code point: what a producer's font says its glyphs are, right or wrong."""
    chars = " ".join(f"<{code:02X}> <{point:04X}>" for code, point in unicode.items())
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Shown def "
        b"1 begincodespacerange <00> <FF> endcodespacerange %d beginbfchar %s endbfchar "
        b"endcmap CMapName currentdict /CMap defineresource pop end end" % (len(unicode), chars.encode())
    )
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 4 0 R >>")
    objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(cmap), cmap))
    kids = []
    for drawn in pages:
        escaped = drawn.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
        content = b"BT /F1 12 Tf 72 720 Td (" + escaped + b") Tj ET"
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(kids))
    return pdf_file(objects)


def pdf_mapping_a_code_to_nul(pages: list[str]) -> bytes:
    """Code 0x01 drawn before every letter, its glyph mapped to U+0000 (as some producers' fonts do): pypdf
    extracts a NUL beside every letter."""
    drawn = [b"".join(b"\x01" + bytes([c]) for c in text.encode("latin-1")) for text in pages]
    return pdf_with_unicode_map(drawn, {1: 0})


def test_i_ingest_extracted_text_has_no_control_characters() -> None:
    """A PDF whose font maps glyphs to U+0000 gives a NUL beside every letter (pypdf returns what the file
    says): left in, every word would be split in the index and agents would read "\\u0000". Every format's
    text leaves out C0 controls but tab, newline and carriage return, DEL and C1 controls (a form feed or
    vertical tab is a newline), and the PDF's page starts still point at its pages."""
    from pypdf import PdfReader

    data = pdf_mapping_a_code_to_nul(["Pump seals", "Valve torque"])
    assert "\x00" in PdfReader(io.BytesIO(data)).pages[0].extract_text()  # the file is as described
    pdf = extract("nul.pdf", data)
    assert pdf.body == "Pump seals\n\nValve torque\n\n" and pdf.page_starts == [0, 12]
    assert pdf.body[pdf.page_starts[1] :].startswith("Valve torque")
    text = extract("log.txt", "Tower\x00 log\x07\fpH 9.5\x1b\x7f\x85\vdone\tok\r\n".encode())
    assert text.body == "Tower log\npH 9.5\ndone\tok\r\n"
    md = extract("t.md", b"# Tit\x00le\n\nBody\x00.\n")
    assert (md.title, md.body) == ("Title", "Body.")
    with pytest.raises(ExtractionError) as caught:  # nothing but controls is nothing
        extract("c.txt", b"\x00\x01\x02")
    assert caught.value.code in ("empty", "corrupt")


def test_i_ingest_pdf_look_alike_glyphs_are_the_characters_they_show() -> None:
    """A CJK font may map its ideographs to the Kangxi radicals ("⿊" U+2FCA for 黑: Noto CJK in Chrome's
    PDFs), to the CJK radicals supplement ("⻄" U+2EC4 for 西, which NFKC leaves alone) or to compatibility
    ideographs, a Latin font its ligatures to U+FB01 ("ﬁ"): a search for 黑豹 or
    "find" would miss them. They become the characters they show; other punctuation stays as printed."""
    unicode = {1: 0x2FCA, 2: 0x8C79, 3: 0xFB01, 4: 0xF900, 5: 0xFF0C, 6: 0x2F0A, 7: 0x2EC4, 8: 0x2EE2}
    drawn = b"\x01\x02\x05\x06 \x03nd \x04 \x07\x08"  # ⿊豹，⼊ ﬁnd 豈 ⻄⻢
    pdf = extract("k.pdf", pdf_with_unicode_map([drawn], unicode))
    assert pdf.body.strip() == "黑豹，入 find 豈西马"  # (no space between two CJK characters)


def test_i_ingest_pdf_justified_cjk_spacing_is_not_text() -> None:
    """A justified line's spacing comes out of pypdf as spaces between CJK characters ("补 充 同"), cutting
    every bigram of the words it splits: dropped between two CJK characters, kept around Latin words and
    digits and between Hangul words (Korean spaces its words)."""
    unicode = {1: 0x8865, 2: 0x5145, 3: 0x540C, 4: 0x3002, 5: 0xD55C, 6: 0xAD6D}  # 补 充 同 。 한 국
    drawn = b"\x01 \x02 \x03 \x04 A B 24 \x01 \x05 \x06"
    pdf = extract("j.pdf", pdf_with_unicode_map([drawn], unicode))
    assert pdf.body.strip() == "补充同。 A B 24 补 한 국"


def test_i_ingest_pdf_lines_run_on_into_paragraphs() -> None:
    """pypdf gives one line per printed line: a sentence wrapped over three lines was three "sentences"
    to summaries and readers, and a CJK word cut at a line's end lost its bigram. A line runs on into the
    next unless it is short (a paragraph's last line, a heading); CJK lines join without a space, a word
    hyphenated at the end joins its rest; a list item starts its own paragraph; the first page's opening
    paragraph, when it is the PDF's title, is a heading (`# title`, as Markdown). (A paragraph whose last
    line is nearly full runs on into the next one: its sentences stay whole all the same.)"""
    english = (
        "Pressure relief valves are tested every six months by a certified technician who records the set "
        "pressure and the reseat pressure."
    )
    chinese = "安全阀每六个月由持证技术人员检测一次，记录整定压力、回座压力以及任何泄漏情况，并填写记录。" * 2
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Valve testing")
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    for text in ("Valve testing", english, "A second paragraph.", "- first item", "- second item"):
        pdf.multi_cell(0, 8, text, new_x="LMARGIN", new_y="NEXT")
    extracted = extract("v.pdf", bytes(pdf.output()))
    blocks = extracted.body.strip().split("\n\n")
    assert blocks[:2] == ["# Valve testing", english]  # the title a heading, the paragraph on one line
    assert blocks[-2:] == ["- first item", "- second item"]
    from knowledge_core.extraction import _pdf_page

    wrapped = "\n".join(chinese[i : i + 40] for i in range(0, len(chinese), 40))  # 40 wide characters a line
    assert _pdf_page(wrapped + "\n短行") == chinese + "\n\n短行"
    assert _pdf_page("The relief valve on the steam header is a well-\nknown part.\nEnd.") == (
        "The relief valve on the steam header is a well-known part.\n\nEnd."
    )


def test_i_ingest_pdf_sentence_broken_at_a_short_line_runs_on() -> None:
    """A line can be short and still end mid-sentence: a URL too long for the rest of the line pushes it
    down, and a note in a smaller font makes every body line short beside it. Such a line runs on when it
    ends on no sentence end and the next line starts in lower case or the line ends inside a clause (a
    comma, an article); a short heading before a capitalised paragraph still stands alone."""
    from fpdf import FPDF

    english = (
        "Pressure relief valves are tested every six months by a certified technician who records the set "
        "pressure and the reseat pressure, and any seat leakage is written into the plant log before the "
        "valve goes back into service."
    )
    link = (
        "The test report is kept with the maintenance records; see "
        "https://intranet.example.com/maintenance/valves/relief/reports/archive for older ones."
    )
    note = (
        "Note: a valve that fails the test is tagged out of service and replaced by a spare of the same type "
        "and set pressure within one shift."
    )
    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    for text in ("Valve testing", english, link):
        pdf.multi_cell(0, 8, text, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("helvetica", size=8)
    pdf.multi_cell(0, 5, note, new_x="LMARGIN", new_y="NEXT")
    blocks = extract("v.pdf", bytes(pdf.output())).body.strip().split("\n\n")
    assert blocks == ["Valve testing", english, link, note]
    from knowledge_core.extraction import _pdf_page

    full = "x" * 80  # the page's full line, its own paragraph
    assert _pdf_page(f"{full}\n\nThe report is signed by the\nPlant Manager on duty.") == (
        f"{full}\n\nThe report is signed by the Plant Manager on duty."
    )
    assert (
        _pdf_page(f"{full}\n\n安全阀每六个月检测一次，\n记录整定压力。")
        == f"{full}\n\n安全阀每六个月检测一次，记录整定压力。"
    )
    assert _pdf_page(f"{full}\n\nInstallation\nMount the valve upright.") == (
        f"{full}\n\nInstallation\n\nMount the valve upright."
    )


def test_i_ingest_docx_headings_become_markdown_headings() -> None:
    doc = extract("v.docx", make_docx())
    assert doc.title == "Valve manual"
    assert doc.body.startswith("# Installation\n\nMount the valve upright.")
    assert "- first step\n- second step" in doc.body
    assert "## Torque" in doc.body and "M8 | 12 Nm" in doc.body


def encrypted_pdf() -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["secret plans"]))))
    writer.encrypt(user_password="pw", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("x.bin", b"\x00\x01", "unsupported_format"),
        ("x.xlsx", b"PK\x03\x04", "unsupported_format"),
        ("x.md", b"  \n\n", "empty"),
        ("x.txt", b"\xff\xfe\xfa bad utf-8", "corrupt"),
        ("x.pdf", b"%PDF-1.7 not really a pdf", "corrupt"),
        ("x.pdf", make_pdf([""]), "empty"),
        ("x.docx", b"PK\x03\x04 broken zip", "corrupt"),
        ("x.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 64, "encrypted"),
        ("x.html", b"<html><body><nav>only navigation</nav></body></html>", "empty"),
    ],
)
def test_i_ingest_unreadable_files_are_typed_errors(name: str, data: bytes, code: str) -> None:
    with pytest.raises(ExtractionError) as caught:
        extract(name, data)
    assert caught.value.code == code and str(caught.value) == code  # no text of the file, no library detail


@pytest.mark.parametrize(
    ("name", "data", "text"),
    [
        ("a.md", "# 阀门检修\n先关闭上游阀门。".encode(), "先关闭上游阀门。"),
        ("a.md", "\ufeff# Valve\nClose it.".encode(), "Close it."),  # the mark is not text
        ("a.txt", "冷却水的电导率应保持在 1500 以下，每周检测一次。".encode("gb18030"), "每周检测一次"),
        ("a.txt", "閥門檢修：先關閉上游閥門，再洩壓。".encode("big5"), "先關閉上游閥門"),
        ("a.txt", "Die Prüfung der Ölpumpe kostet 4,50 €.".encode("cp1252"), "Prüfung der Ölpumpe"),
        ("a.txt", "L'été à Paris: café crème.".encode("cp1252"), "L'été à Paris"),
        ("a.txt", "Notepad 冷却塔".encode("utf-16"), "Notepad 冷却塔"),
        ("a.txt", b"\xfe\xff" + "UTF-16BE 冷却塔".encode("utf-16-be"), "UTF-16BE 冷却塔"),
        ("a.txt", "UTF-32 café".encode("utf-32"), "UTF-32 café"),
    ],
)
def test_i_ingest_text_in_the_encodings_windows_saves_is_read(name: str, data: bytes, text: str) -> None:
    """A Markdown or text file by its byte-order mark, else UTF-8, else GB18030, Big5 or Windows-1252 (the
    legacy encodings of Chinese and Western Windows): never a `corrupt` for a file an editor reads."""
    assert text in extract(name, data).body


@pytest.mark.parametrize(
    "data",
    [b"plain\x00words \xff", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"\xff\xfeodd", bytes(range(256)) * 4],
    ids=["nul", "png", "utf-16-odd-length", "every-byte"],
)
def test_i_ingest_binary_named_text_is_corrupt(data: bytes) -> None:
    """Bytes no text encoding reads (a NUL without a byte-order mark, a mark its bytes do not follow)."""
    with pytest.raises(ExtractionError) as caught:
        extract("x.txt", data)
    assert caught.value.code == "corrupt"


def test_i_ingest_encrypted_pdf_is_a_typed_error() -> None:
    with pytest.raises(ExtractionError) as caught:
        extract("locked.pdf", encrypted_pdf())
    assert caught.value.code == "encrypted"


def test_i_ingest_passage_pages_follow_the_page_starts() -> None:
    from knowledge_core.domain.passages import hit_source, page_label, passage_pages, split_passages

    # Pages longer than a passage (PASSAGE_TOKENS estimated tokens).
    pages = ["one " * 1000, "two " * 300, "three " * 200]
    body, starts = "", []
    for text in pages:
        starts.append(len(body))
        body += text.strip() + "\n\n"
    passages = split_passages(body)
    found = passage_pages(body, passages, starts)
    assert found[0] == [1] and found[-1] in ([2, 3], [3])
    assert all(p for p in found) and passage_pages(body, passages, []) == [[] for _ in passages]
    source = hit_source({"uri": "u", "page_starts": starts}, [2, 3])
    assert source == {"uri": "u", "pages": [2, 3]} and page_label(source) == "pp. 2–3"
    assert page_label(hit_source({"uri": "u"}, [])) == "" and hit_source(None, [1]) is None

"""Text extraction for ingestion (I-INGEST): Markdown, plain text, HTML, PDF and DOCX to Markdown with
headings kept; PDF page starts kept so passages can name their page. A file that cannot be read, for any
reason, is a typed `ExtractionError` (`unsupported_format`, `corrupt`, `encrypted`, `empty`, `too_large`,
`too_complex`, `timeout`, `extraction_failed`) carrying no text of the file and no library message.

Extraction is bounded before and while it reads (SPEC §7): the input size, a DOCX's
declared decompressed size and compression ratio, a PDF's page count and decoded content, an HTML page's
nesting depth and element count (scanned before the tree is built), the output size and a wall-time
deadline checked between pages and blocks. Memory and CPU are bounded by the process this runs in
(`extraction_sandbox`). The format libraries are imported on first use (cold start)."""

from __future__ import annotations

import contextlib
import io
import re
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

from .domain.ingestion import ErrorCode, file_format
from .domain.models import MAX_BODY_BYTES

_BLANK_RUNS = re.compile(r"\n{3,}")
_SPACES = re.compile(r"[ \t\r\f\v]+")
# HTML elements that are never content.
_HTML_DROP = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "svg",
    "iframe",
    "button",
)
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # an encrypted Office file is an OLE container, not a zip
_MIB = 1024 * 1024


class ExtractionError(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code)
        self.code: ErrorCode = code


@dataclass(frozen=True)
class ExtractionLimits:
    """The bounds of one extraction. Sizes are bytes; `wall_seconds` is also the CPU bound of the worker
    process and `memory_bytes` its address-space bound (see `extraction_sandbox`)."""

    max_input_bytes: int = 32 * _MIB
    max_output_bytes: int = MAX_BODY_BYTES
    max_unzipped_bytes: int = 64 * _MIB  # DOCX: the sum of the zip entries' declared sizes
    max_zip_ratio: int = 100  # DOCX: an entry over 1 MiB may not be more than this much compressed
    max_zip_entries: int = 5_000
    max_pdf_pages: int = 2_000
    max_pdf_content_bytes: int = 64 * _MIB  # decoded content streams, all pages together
    max_html_depth: int = 256
    max_html_elements: int = 200_000
    wall_seconds: float = 30.0
    memory_bytes: int = 1024 * _MIB


DEFAULT_LIMITS = ExtractionLimits()


class _Budget:
    """What one extraction may still spend: a deadline (monotonic) and the output size."""

    def __init__(self, limits: ExtractionLimits) -> None:
        self.limits = limits
        self._deadline = time.monotonic() + limits.wall_seconds

    def check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise ExtractionError("timeout")

    def check_output(self, chars: int) -> None:
        # A character is at least one UTF-8 byte: more characters than bytes allowed is too large already.
        if chars > self.limits.max_output_bytes:
            raise ExtractionError("too_large")
        self.check_time()


@dataclass(frozen=True)
class Extracted:
    """A file as Markdown: the title it names (if any), the body, and for PDFs the character offset in
    `body` where each page starts (page n starts at `page_starts[n - 1]`)."""

    format: str
    title: str | None
    body: str
    page_starts: list[int] = field(default_factory=list)


def extract(filename: str, data: bytes, limits: ExtractionLimits = DEFAULT_LIMITS) -> Extracted:
    """`data` as Markdown, or an ExtractionError whatever went wrong: a library's own exception (a
    RecursionError on deep markup, NotImplementedError on an unknown PDF cipher, MemoryError…) becomes a
    typed code, so one hostile file never stops the job it is part of."""
    with typed_failures():
        return _extract(filename, data, _Budget(limits))


@contextlib.contextmanager
def typed_failures() -> Iterator[None]:
    """Any exception inside becomes an ExtractionError with its code (the one rule for it)."""
    try:
        yield
    except ExtractionError:
        raise
    except RecursionError:
        raise ExtractionError("too_complex") from None
    except MemoryError:
        raise ExtractionError("too_large") from None
    except Exception:
        raise ExtractionError("extraction_failed") from None


def _extract(filename: str, data: bytes, budget: _Budget) -> Extracted:
    kind = file_format(filename)
    if kind is None:
        raise ExtractionError("unsupported_format")
    if len(data) > budget.limits.max_input_bytes:
        raise ExtractionError("too_large")
    if not data.strip():
        raise ExtractionError("empty")
    extracted = _printable(_EXTRACTORS[kind](data, budget))
    if not extracted.body.strip():
        raise ExtractionError("empty")
    budget.check_output(len(extracted.body))
    if len(extracted.body.encode("utf-8")) > budget.limits.max_output_bytes:
        raise ExtractionError("too_large")
    return extracted


# Characters no reader can use: C0 controls but tab, newline and carriage return, DEL, and C1 controls. A PDF
# whose font maps glyphs to U+0000 puts a NUL beside every letter of its extracted text (pypdf returns what
# the file says), which would split every word in the index and reach agents as "\u0000"; a UTF-8 text
# file may hold them too. A form feed or vertical tab (a page or line break) becomes a newline.
_NOT_TEXT = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_BREAKS = str.maketrans({"\f": "\n", "\v": "\n"})


def printable_text(text: str) -> str:
    """`text` without the characters of `_NOT_TEXT` (form feeds and vertical tabs as newlines)."""
    return _NOT_TEXT.sub("", text.translate(_BREAKS))


def _printable(extracted: Extracted) -> Extracted:
    """`extracted` without the characters of `_NOT_TEXT`, each page cleaned alone so that `page_starts`
    stay the offsets where the pages start."""
    title = printable_text(extracted.title) if extracted.title is not None else None
    body, starts = extracted.body, extracted.page_starts
    cuts = [0, *starts, len(body)]
    pieces = [printable_text(body[a:b]) for a, b in pairwise(cuts)]  # before page 1, then each page
    offsets = [sum(len(p) for p in pieces[: n + 1]) for n in range(len(starts))]
    return replace(extracted, title=title, body="".join(pieces), page_starts=offsets)


def markdown_title(text: str) -> tuple[str | None, str]:
    """The first line's `# heading` as the title, and the rest as the body."""
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        return lines[0][2:].strip(), "\n".join(lines[1:]).lstrip("\n")
    return None, text


# Text files without a byte-order mark that are not UTF-8: the legacy encodings of the service's two
# languages as Windows saves them (Simplified Chinese GBK/GB18030, Traditional Chinese Big5, Western
# Windows-1252), the likeliest of them as charset_normalizer measures it. Among every encoding it knows it
# reads short Western text as Baltic or UTF-16 and short Chinese as Korean.
LEGACY_ENCODINGS = ("gb18030", "big5", "cp1252")
_BOMS = (
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
)


def decode_text(data: bytes) -> str:
    """A Markdown or text file's characters: by its byte-order mark (UTF-8, UTF-16, UTF-32), else UTF-8,
    else one of LEGACY_ENCODINGS; `corrupt` when none reads it (a NUL byte without a mark is binary)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                raise ExtractionError("corrupt") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if b"\x00" in data:
        raise ExtractionError("corrupt")
    from charset_normalizer import from_bytes

    best = from_bytes(data, cp_isolation=list(LEGACY_ENCODINGS)).best()
    if best is None:
        raise ExtractionError("corrupt")
    return str(best)


def _plain(data: bytes, budget: _Budget) -> str:
    # The body is the file itself: a file over the body limit (and a BOM) is refused before decoding.
    if len(data) > budget.limits.max_output_bytes + 3:
        raise ExtractionError("too_large")
    return decode_text(data)


def _markdown(data: bytes, budget: _Budget) -> Extracted:
    return Extracted("markdown", *plain_title("markdown", _plain(data, budget)))


def _text(data: bytes, budget: _Budget) -> Extracted:
    return Extracted("text", *plain_title("text", _plain(data, budget)))


def printable_document(fmt: str, text: str) -> tuple[str | None, str]:
    """A Markdown or text file's title and body as a job that extracts it stores them (`plain_title`, then
    `printable_text`): for `kb ingest`, which sends such a file as text, so one file is one document."""
    title, body = plain_title(fmt, text)
    return (printable_text(title) if title is not None else None), printable_text(body)


def plain_title(fmt: str, text: str) -> tuple[str | None, str]:
    """A Markdown or text file's own title (None: it has none) and its body without it — one rule for a job
    that extracts the file and for `kb ingest`, which sends such a file as text: a `# heading` first line,
    and for text also a title line (`text_title`)."""
    title, body = markdown_title(text)
    if title is None and fmt == "text":
        return text_title(text)
    return title, body


TEXT_TITLE_CHARS = 80
_SENTENCE_END = tuple(".!?;:,…。！？；：，、")


def text_title(text: str) -> tuple[str | None, str]:
    """A plain text's title line, the way such files are titled: a short first line standing alone (a blank
    line after it, more text after that, no sentence punctuation at its end) is the title and the rest the
    body; otherwise no title (the caller's `--title` or the file name)."""
    lines = text.splitlines()
    first = lines[0].strip() if lines else ""
    if (
        len(lines) >= 3
        and 0 < len(first) <= TEXT_TITLE_CHARS
        and not first.endswith(_SENTENCE_END)
        and not lines[1].strip()
        and any(line.strip() for line in lines[2:])
    ):
        return first, "\n".join(lines[2:]).lstrip("\n")
    return None, text


def _clean(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def _join(blocks: list[str]) -> str:
    return _BLANK_RUNS.sub("\n\n", "\n\n".join(b for b in blocks if b.strip())).strip() + "\n"


# --- HTML ---------------------------------------------------------------------------------------------


# Start or end tags, and comments (skipped) as html.parser sees them; void elements never nest.
_HTML_TAG = re.compile(rb"<!--.*?-->|<(/?)([A-Za-z][A-Za-z0-9:-]*)(?:[^>]*?)(/?)>", re.DOTALL)
_HTML_VOID = frozenset(b"area base br col embed hr img input link meta param source track wbr keygen".split())


def html_shape(data: bytes, limits: ExtractionLimits) -> None:
    """Refuse markup that would build too deep or too large a tree (`too_complex`), before building it:
    the tags are scanned the way the tree builder nests them (an end tag closes up to its open twin)."""
    stack: list[bytes] = []
    elements = 0
    for match in _HTML_TAG.finditer(data):
        name = match.group(2)
        if name is None:
            continue
        name = name.lower()
        if match.group(1):  # an end tag: close up to the nearest open element of that name
            for i in range(len(stack) - 1, -1, -1):
                if stack[i] == name:
                    del stack[i:]
                    break
            continue
        elements += 1
        if elements > limits.max_html_elements:
            raise ExtractionError("too_complex")
        if not match.group(3) and name not in _HTML_VOID:
            stack.append(name)
            if len(stack) > limits.max_html_depth:
                raise ExtractionError("too_complex")


def _html(data: bytes, budget: _Budget) -> Extracted:
    from bs4 import BeautifulSoup

    if b"\x00" in data[:1024]:
        raise ExtractionError("corrupt")
    html_shape(data, budget.limits)
    budget.check_time()
    soup = BeautifulSoup(data, "html.parser")
    budget.check_time()
    title_tag = soup.find("title")
    title = _clean(title_tag.get_text()) if title_tag else None
    for tag in soup.find_all(list(_HTML_DROP)):
        tag.decompose()
    for role in ("navigation", "banner", "contentinfo"):
        for tag in soup.find_all(True, attrs={"role": role}):
            tag.decompose()
    root: Any = soup.find("main") or soup.find("article") or soup.find("body") or soup
    blocks: list[str] = []
    _html_blocks(root, blocks, budget)
    body = _join(blocks)
    h1 = soup.find("h1")
    if not title and h1:
        title = _clean(h1.get_text())
    if title and body.startswith(f"# {title}\n"):
        body = body[len(title) + 3 :].lstrip("\n")
    return Extracted("html", title or None, body)


_BLOCK_TAGS = {"p", "div", "section", "article", "main", "blockquote", "dd", "dt", "figcaption", "address"}


def _html_blocks(node: Any, blocks: list[str], budget: _Budget) -> None:
    """Markdown blocks of an element tree: headings as `#`, list items as `-`, code as fences, table rows
    as `|`-separated cells; inline text joined."""
    from bs4.element import NavigableString, Tag

    inline: list[str] = []

    def flush() -> None:
        text = _clean("".join(inline))
        if text:
            blocks.append(text)
        inline.clear()
        budget.check_time()

    for child in node.children:
        if isinstance(child, NavigableString):
            if type(child) is NavigableString:  # not a comment, doctype or CDATA
                inline.append(str(child))
            continue
        if not isinstance(child, Tag):
            continue
        name = child.name
        if name in ("h1", "h2", "h3", "h4", "h5", "h6"):
            flush()
            text = _clean(child.get_text(" "))
            if text:
                blocks.append("#" * int(name[1]) + " " + text)
        elif name in ("ul", "ol"):
            flush()
            items = [_clean(li.get_text(" ")) for li in child.find_all("li", recursive=False)]
            blocks.append("\n".join(f"- {item}" for item in items if item))
        elif name == "pre":
            flush()
            blocks.append("```\n" + child.get_text().strip("\n") + "\n```")
        elif name == "table":
            flush()
            rows = [
                " | ".join(_clean(cell.get_text(" ")) for cell in row.find_all(["th", "td"]))
                for row in child.find_all("tr")
            ]
            blocks.append("\n".join(r for r in rows if r.strip(" |")))
        elif name == "br":
            inline.append("\n")
        elif name in _BLOCK_TAGS or name == "li":
            flush()
            _html_blocks(child, blocks, budget)
        else:
            inline.append(child.get_text(" ") if name not in ("img",) else "")
    flush()


# --- PDF ----------------------------------------------------------------------------------------------


def _pdf(data: bytes, budget: _Budget) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = _pdf_reader(PdfReader, data)
        _pdf_unlock(reader)
        if len(reader.pages) > budget.limits.max_pdf_pages:
            raise ExtractionError("too_large")
        texts = _pdf_texts(reader, budget)
        meta_title = reader.metadata.title if reader.metadata else None
    except ExtractionError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError):
        raise ExtractionError("corrupt") from None
    title = _clean(meta_title) if isinstance(meta_title, str) and meta_title.strip() else None
    if title is not None:
        title = printable_text(title).translate(_LOOK_ALIKES)
    body = ""
    starts: list[int] = []
    for text in texts:
        starts.append(len(body))
        page = _pdf_page(text)
        if not body and title and page.split("\n\n", 1)[0] == title:
            page = "# " + page  # the first page opens with the title: a heading, as Markdown's `# title`
        if page:
            body += page + "\n\n"
    return Extracted("pdf", title, body, starts)


# Glyphs a PDF font maps to look-alike code points rather than the characters they show: a CJK font's
# ideographs to the Kangxi radicals (U+2F00–U+2FD5: "⿊" for 黑, "⼊" for 入) and the CJK radicals supplement
# (U+2E81–U+2EF3: "⻄" for 西, "⻢" for 马 — Noto CJK in Chrome's PDFs), to CJK compatibility ideographs
# (U+F900–U+FAFF), and Latin ligatures (U+FB00–U+FB06: "ﬁ"). Each becomes the character it shows, so words
# are found and read as typed: NFKC for all but the supplement, which NFKC leaves alone; its ideographs are
# the Unicode Character Database's EquivalentUnifiedIdeograph.txt (14.0; U+2E9A is unassigned). Nothing
# else is normalized (NFKC of the whole text would turn "，" into "," and "6½" into "61⁄2").
_RADICALS_SUPPLEMENT = (
    "厂乛乚乙亻冂𠘨刀刂卜㔾小小兀尣尢𡯂巳幺彑彐忄心扌攵旡日月歺母民氵氺灬爫爫丬牛犭王𤴔目示礻𥫗糹纟罓罒㓁冗𦉫羊𦍌𦍋耂肀"
    "聿肉𦥑艹艹艹虎衤覀西见角𧢲讠贝𧾷车辶辶辶邑钅長镸长门𨸏阝雨青韦页风飞食𩙿飠饣𩠐马骨鬼鱼鸟卤麦黄黾斉齐歯齿竜龙龜亀龟"
)
_LOOK_ALIKES = {
    **{
        cp: shown
        for start, end in ((0x2F00, 0x2FDF), (0xF900, 0xFAFF), (0xFB00, 0xFB06))
        for cp in range(start, end + 1)
        if (shown := unicodedata.normalize("NFKC", chr(cp))) != chr(cp)
    },
    **dict(zip((cp for cp in range(0x2E81, 0x2EF4) if cp != 0x2E9A), _RADICALS_SUPPLEMENT, strict=True)),
}
# Characters two columns wide (CJK, kana, Hangul, fullwidth forms): a line's printed width, and where a
# wrapped line joins the next without a space.
_WIDE = re.compile(
    r"[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6]"
)
# A space between two CJK characters (ideographs, kana, CJK punctuation and fullwidth forms; not Hangul,
# whose words are spaced): a justified line's spacing that pypdf returns as text ("时 补 充 同 型 号"),
# which would cut every bigram of the words it splits.
_CJK_GAP = re.compile(
    r"(?<=[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]) (?=[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef])"
)
_ITEM = re.compile(r"\s*(?:[•·▪◦‣●○■□\-*–—]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
_SHORT_LINE = 0.75  # of the page's full line: a line this short ends its paragraph
_SHORT_SENTENCE_LINE = 0.9  # ... and one this short that ends a sentence (a full line is justified text's)
_ENDS_SENTENCE = re.compile(r"[.!?。！？][\"'”’)）」』]*$")
# A line ending inside a clause: on a comma or enumeration mark, or on a word no sentence or heading ends on.
_ENDS_MID_CLAUSE = re.compile(
    r"(?:[,，、]|\b(?:a|an|the|and|or|nor|but|of|to|for|with|from|into|than|that|which|whose|its|their|"
    r"our|your))$",
    re.IGNORECASE,
)


def _pdf_page(text: str) -> str:
    """A PDF page's text (pypdf: one line per printed line) as paragraphs. A line runs on into the next
    unless it is short — under `_SHORT_LINE` of the page's full line (its longest), or under
    `_SHORT_SENTENCE_LINE` when it ends a sentence: a paragraph's last line, a heading (a line longer than
    the text's, a table's or two columns', only makes more lines short, as before) — or the next starts a
    list item; always after a word hyphenated at its end. A short line runs on all the same when its
    sentence goes on: it ends on no sentence end and either inside a clause (a comma, an article, a
    preposition: `_ENDS_MID_CLAUSE`) or before a line starting in lower case. Lines join without a space
    between two wide (CJK) characters and after a hyphen, else with one; a space between two CJK
    characters inside a line (a justified line's spacing) is dropped. Paragraphs are separated by a blank
    line, as in Markdown, so sentences and words are whole again for the index, summaries and readers."""
    text = printable_text(text.replace("\r\n", "\n")).translate(_LOOK_ALIKES)
    lines = [_CJK_GAP.sub("", _SPACES.sub(" ", line)).strip() for line in text.split("\n")]
    widths = [len(line) + len(_WIDE.findall(line)) for line in lines]
    full = max(widths, default=0)
    if not full:
        return ""
    paragraphs: list[str] = []
    current = ""
    for line, width, after in zip(lines, widths, [*lines[1:], ""], strict=True):
        if not line:
            if current:
                paragraphs.append(current)
            current = ""
            continue
        if not current:
            current = line
        elif (_WIDE.match(current[-1]) and _WIDE.match(line[0])) or current.endswith("-"):
            current += line
        else:
            current += " " + line
        wrapped = current[-1] == "-" and current[-2:-1].isalpha()  # a word hyphenated at the line's end
        ends_sentence = _ENDS_SENTENCE.search(line) is not None
        short = width < (_SHORT_SENTENCE_LINE if ends_sentence else _SHORT_LINE) * full
        # A short line whose sentence goes on (a long word or URL pushed to the next line, a page whose
        # longest line is in a smaller font) still runs on.
        goes_on = not ends_sentence and (_ENDS_MID_CLAUSE.search(line) is not None or after[:1].islower())
        if not wrapped and ((short and not goes_on) or not after or _ITEM.match(after)):
            paragraphs.append(current)
            current = ""
    if current:
        paragraphs.append(current)
    return "\n\n".join(paragraphs)


def _pdf_reader(reader_class: Any, data: bytes) -> Any:
    """The reader of `data`; a security handler pypdf does not implement (it raises NotImplementedError
    while reading `/Encrypt`) is `encrypted`, like any file we cannot unlock."""
    try:
        return reader_class(io.BytesIO(data))
    except NotImplementedError:
        raise ExtractionError("encrypted" if b"/Encrypt" in data else "corrupt") from None


def _pdf_unlock(reader: Any) -> None:
    """An owner password only (no user password) still lets anyone read the text; anything else, an
    unknown cipher included (pypdf's NotImplementedError), is `encrypted`."""
    if not reader.is_encrypted:
        return
    try:
        unlocked = reader.decrypt("")
    except Exception:
        raise ExtractionError("encrypted") from None
    if not unlocked:
        raise ExtractionError("encrypted")


def _pdf_texts(reader: Any, budget: _Budget) -> list[str]:
    """Each page's text, bounded while it reads: the decoded content of all pages together (pages may
    share one huge content stream), the text produced and the deadline, checked page by page."""
    texts: list[str] = []
    content = 0
    chars = 0
    for page in reader.pages:
        budget.check_time()
        stream = page.get_contents()
        content += len(stream.get_data()) if stream is not None else 0
        if content > budget.limits.max_pdf_content_bytes:
            raise ExtractionError("too_large")
        text = page.extract_text() or ""
        chars += len(text)
        budget.check_output(chars)
        texts.append(text)
    return texts


# --- DOCX ---------------------------------------------------------------------------------------------


def _docx(data: bytes, budget: _Budget) -> Extracted:
    import zipfile

    if data.startswith(_OLE_MAGIC):
        raise ExtractionError("encrypted")
    try:
        import docx
        from docx.opc.exceptions import PackageNotFoundError

        with zipfile.ZipFile(io.BytesIO(data)) as package:
            zip_shape(package.infolist(), budget.limits)
        budget.check_time()
        document = docx.Document(io.BytesIO(data))
    except ExtractionError:
        raise
    except (zipfile.BadZipFile, PackageNotFoundError, KeyError, ValueError, OSError, EOFError):
        raise ExtractionError("corrupt") from None
    except Exception as exc:  # lxml's XMLSyntaxError and friends: a broken package
        if type(exc).__module__.startswith(("lxml", "docx")):
            raise ExtractionError("corrupt") from None
        raise
    title = _clean(document.core_properties.title or "") or None
    blocks = _docx_blocks(document, budget)
    if title is None and blocks and blocks[0].startswith("# "):
        title = blocks.pop(0)[2:]
    return Extracted("docx", title, _join(blocks))


def zip_shape(entries: list[Any], limits: ExtractionLimits) -> None:
    """Refuse a zip bomb before inflating anything (`too_large`): too many entries, a declared total over
    the bound, or a large entry compressed beyond any real document. zipfile never inflates an entry past
    its declared size (it stops and fails the CRC), so the declared sizes bound what is read."""
    if len(entries) > limits.max_zip_entries:
        raise ExtractionError("too_large")
    total = 0
    for entry in entries:
        total += entry.file_size
        if total > limits.max_unzipped_bytes:
            raise ExtractionError("too_large")
        if entry.file_size > _MIB and entry.file_size > limits.max_zip_ratio * max(entry.compress_size, 1):
            raise ExtractionError("too_large")


def _docx_blocks(document: Any, budget: _Budget) -> list[str]:
    """Paragraphs and tables in document order: `Heading N` styles as Markdown headings, `Title` as `#`,
    list styles as `-` items, table rows as `|`-separated cells."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    blocks: list[str] = []
    chars = counted = 0
    for item in document.iter_inner_content():
        chars += sum(len(b) for b in blocks[counted:])
        counted = len(blocks)
        budget.check_output(chars)
        if isinstance(item, Paragraph):
            text = _clean(item.text)
            if not text:
                continue
            style = (item.style.name if item.style is not None else "") or ""
            level = re.fullmatch(r"Heading ([1-9])", style)
            if level:
                blocks.append("#" * min(int(level.group(1)), 6) + " " + text)
            elif style == "Title":
                blocks.append("# " + text)
            elif style.startswith("List"):
                blocks.append("- " + text)
            else:
                blocks.append(text)
        elif isinstance(item, Table):
            rows = [" | ".join(_clean(cell.text) for cell in row.cells) for row in item.rows]
            blocks.append("\n".join(r for r in rows if r.strip(" |")))
    # Consecutive list items form one list.
    merged: list[str] = []
    for block in blocks:
        if merged and block.startswith("- ") and merged[-1].split("\n")[-1].startswith("- "):
            merged[-1] += "\n" + block
        else:
            merged.append(block)
    return merged


_EXTRACTORS = {"markdown": _markdown, "text": _text, "html": _html, "pdf": _pdf, "docx": _docx}

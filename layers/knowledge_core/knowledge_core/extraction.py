"""Text extraction for ingestion (I-INGEST): Markdown, plain text, HTML, PDF and DOCX to Markdown with
headings kept; PDF page starts kept so passages can name their page. A file that cannot be read is a typed
`ExtractionError` (`unsupported_format`, `corrupt`, `encrypted`, `empty`) carrying no text of the file and
no library message. The format libraries are imported on first use (cold start)."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

from .domain.ingestion import ErrorCode, file_format

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


class ExtractionError(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code)
        self.code: ErrorCode = code


@dataclass(frozen=True)
class Extracted:
    """A file as Markdown: the title it names (if any), the body, and for PDFs the character offset in
    `body` where each page starts (page n starts at `page_starts[n - 1]`)."""

    format: str
    title: str | None
    body: str
    page_starts: list[int] = field(default_factory=list)


def extract(filename: str, data: bytes) -> Extracted:
    kind = file_format(filename)
    if kind is None:
        raise ExtractionError("unsupported_format")
    if not data.strip():
        raise ExtractionError("empty")
    extracted = _EXTRACTORS[kind](data)
    if not extracted.body.strip():
        raise ExtractionError("empty")
    return extracted


def markdown_title(text: str) -> tuple[str | None, str]:
    """The first line's `# heading` as the title, and the rest as the body."""
    lines = text.splitlines()
    if lines and lines[0].startswith("# "):
        return lines[0][2:].strip(), "\n".join(lines[1:]).lstrip("\n")
    return None, text


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ExtractionError("corrupt") from None


def _markdown(data: bytes) -> Extracted:
    title, body = markdown_title(_decode(data))
    return Extracted("markdown", title, body)


def _text(data: bytes) -> Extracted:
    title, body = markdown_title(_decode(data))
    return Extracted("text", title, body)


def _clean(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def _join(blocks: list[str]) -> str:
    return _BLANK_RUNS.sub("\n\n", "\n\n".join(b for b in blocks if b.strip())).strip() + "\n"


# --- HTML ---------------------------------------------------------------------------------------------


def _html(data: bytes) -> Extracted:
    from bs4 import BeautifulSoup

    if b"\x00" in data[:1024]:
        raise ExtractionError("corrupt")
    soup = BeautifulSoup(data, "html.parser")
    title_tag = soup.find("title")
    title = _clean(title_tag.get_text()) if title_tag else None
    for tag in soup.find_all(list(_HTML_DROP)):
        tag.decompose()
    for role in ("navigation", "banner", "contentinfo"):
        for tag in soup.find_all(True, attrs={"role": role}):
            tag.decompose()
    root: Any = soup.find("main") or soup.find("article") or soup.find("body") or soup
    blocks: list[str] = []
    _html_blocks(root, blocks)
    body = _join(blocks)
    h1 = soup.find("h1")
    if not title and h1:
        title = _clean(h1.get_text())
    if title and body.startswith(f"# {title}\n"):
        body = body[len(title) + 3 :].lstrip("\n")
    return Extracted("html", title or None, body)


_BLOCK_TAGS = {"p", "div", "section", "article", "main", "blockquote", "dd", "dt", "figcaption", "address"}


def _html_blocks(node: Any, blocks: list[str]) -> None:
    """Markdown blocks of an element tree: headings as `#`, list items as `-`, code as fences, table rows
    as `|`-separated cells; inline text joined."""
    from bs4 import NavigableString, Tag

    inline: list[str] = []

    def flush() -> None:
        text = _clean("".join(inline))
        if text:
            blocks.append(text)
        inline.clear()

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
            _html_blocks(child, blocks)
        else:
            inline.append(child.get_text(" ") if name not in ("img",) else "")
    flush()


# --- PDF ----------------------------------------------------------------------------------------------


def _pdf(data: bytes) -> Extracted:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:  # an owner password only (no user password) still lets anyone read the text
                if not reader.decrypt(""):
                    raise ExtractionError("encrypted")
            except ExtractionError:
                raise
            except Exception:
                raise ExtractionError("encrypted") from None
        texts = [page.extract_text() or "" for page in reader.pages]
        meta_title = reader.metadata.title if reader.metadata else None
    except ExtractionError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError):
        raise ExtractionError("corrupt") from None
    body = ""
    starts: list[int] = []
    for text in texts:
        starts.append(len(body))
        page = _BLANK_RUNS.sub("\n\n", text.replace("\r\n", "\n")).strip()
        if page:
            body += page + "\n\n"
    title = _clean(meta_title) if isinstance(meta_title, str) and meta_title.strip() else None
    return Extracted("pdf", title, body, starts)


# --- DOCX ---------------------------------------------------------------------------------------------


def _docx(data: bytes) -> Extracted:
    import zipfile

    if data.startswith(_OLE_MAGIC):
        raise ExtractionError("encrypted")
    try:
        import docx
        from docx.opc.exceptions import PackageNotFoundError

        document = docx.Document(io.BytesIO(data))
    except (zipfile.BadZipFile, PackageNotFoundError, KeyError, ValueError, OSError):
        raise ExtractionError("corrupt") from None
    except Exception as exc:  # lxml's XMLSyntaxError and friends: a broken package
        if type(exc).__module__.startswith(("lxml", "docx")):
            raise ExtractionError("corrupt") from None
        raise
    title = _clean(document.core_properties.title or "") or None
    blocks: list[str] = []
    for block in _docx_blocks(document):
        blocks.append(block)
    if title is None and blocks and blocks[0].startswith("# "):
        title = blocks.pop(0)[2:]
    return Extracted("docx", title, _join(blocks))


def _docx_blocks(document: Any) -> list[str]:
    """Paragraphs and tables in document order: `Heading N` styles as Markdown headings, `Title` as `#`,
    list styles as `-` items, table rows as `|`-separated cells."""
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    blocks: list[str] = []
    for item in document.iter_inner_content():
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

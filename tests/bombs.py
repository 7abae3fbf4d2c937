"""Hostile files (the review's M1, M2), generated small on disk: each is what a second security review fed
the ingestion worker. Shared by the unit tests and `bench/extraction_bombs.py` (which measures them)."""

from __future__ import annotations

import io
import zipfile
import zlib
from pathlib import Path

GIB = 1024 * 1024 * 1024


def docx_of_spaces(path: Path, spaces: int = GIB) -> Path:
    """A DOCX (~1 MB on disk) whose `word/document.xml` inflates to `spaces` bytes of blanks: a valid
    package to every check but its size."""
    import docx

    template = io.BytesIO()
    document = docx.Document()
    document.add_paragraph("bomb")
    document.save(template)
    with zipfile.ZipFile(template) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for entry in src.infolist():
            if entry.filename != "word/document.xml":
                out.writestr(entry, src.read(entry))
                continue
            xml = src.read(entry)
            head, tail = xml.split(b"<w:body>", 1)
            with out.open("word/document.xml", "w", force_zip64=True) as sink:
                sink.write(head + b"<w:body>")
                chunk = b" " * (8 * 1024 * 1024)
                left = spaces
                while left > 0:
                    sink.write(chunk[: min(left, len(chunk))])
                    left -= len(chunk)
                sink.write(tail)
    return path


def nested_tables(depth: int = 2000) -> bytes:
    """`depth` tables nested in each other's cells (~66 KB for 2,000)."""
    return b"<html><body>" + b"<table><tr><td>x" * depth + b"</td></tr></table>" * depth + b"</body></html>"


def nested_divs(size: int = 1024 * 1024) -> bytes:
    """About `size` bytes of `<div>` nested in each other, never closed."""
    return b"<html><body>" + b"<div>" * (size // 5) + b"text</body></html>"


def pdf_shared_stream(pages: int = 200, repeats: int = 60_000) -> bytes:
    """A PDF (~9 KB) of `pages` pages that all draw one Flate content stream inflating to `repeats`
    text operations: small on disk, a long read for an extractor that decodes each page's content."""
    ops = b"BT /F1 12 Tf 72 712 Td (x) Tj ET\n" * repeats
    stream = zlib.compress(ops, 9)
    first_page = 5
    kids = b" ".join(b"%d 0 R" % (first_page + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<</Type/Pages/MediaBox[0 0 612 792]/Resources<</Font<</F1 3 0 R>>>>/Kids["
        + kids
        + b"]/Count %d>>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    objects += [b"<</Type/Page/Parent 2 0 R/Contents 4 0 R>>"] * pages  # resources inherited
    return pdf_file(objects)


def pdf_file(objects: list[bytes], version: bytes = b"1.4", trailer: bytes = b"") -> bytes:
    """A PDF file of `objects` (numbered from 1, the first the catalog) with its cross-reference table;
    `trailer`: entries beside /Size and /Root."""
    out = io.BytesIO()
    out.write(b"%%PDF-%s\n" % version)
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R%s >>\n" % (len(objects) + 1, trailer))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def pdf_unknown_cipher() -> bytes:
    """A PDF whose /Encrypt names a security handler pypdf does not implement (NotImplementedError)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        b"<< /Filter /Standard /V 9 /R 9 /O <00> /U <00> /P -4 /Length 128 >>",
    ]
    return pdf_file(objects, b"1.7", b" /Encrypt 4 0 R /ID [<01> <01>]")

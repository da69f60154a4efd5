"""Generators of the hostile attachments of issue 17, shared by the reliability tests and the benchmark.

Each writes a small, valid-looking file whose parse would be unbounded without the conversion budgets:
zip bombs dressed as office documents, spreadsheets with huge shared strings or millions of rows, PDFs
with thousands of trivial pages, text too large to convert, a CSV on one line, a WAV whose header lies.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MB = 1024 * 1024

_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="{part}" ContentType="{type}"/>'
    '</Types>'
)
_ROOT_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    'officeDocument" Target="{target}"/></Relationships>'
)
_W = 'http://schemas.openxmlformats.org/wordprocessingml/2006/main'
_S = 'http://schemas.openxmlformats.org/spreadsheetml/2006/main'
_R = 'http://schemas.openxmlformats.org/officeDocument/2006/relationships'


def _write_stream(archive: zipfile.ZipFile, name: str, chunks: Iterator[bytes]) -> None:
    with archive.open(name, 'w', force_zip64=True) as f:
        for chunk in chunks:
            f.write(chunk)


def _repeat(head: bytes, unit: bytes, tail: bytes, total: int) -> Iterator[bytes]:
    """`head`, then `unit` repeated to about `total` bytes, then `tail`, in 1 MiB chunks."""
    yield head
    block = unit * max(1, MB // len(unit))
    written = 0
    while written < total:
        yield block
        written += len(block)
    yield tail


def docx_bomb(uncompressed: int) -> bytes:
    """A DOCX whose word/document.xml is `uncompressed` bytes of one repeated paragraph."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(
            '[Content_Types].xml',
            _CONTENT_TYPES.format(
                part='/word/document.xml',
                type='application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml',
            ),
        )
        archive.writestr('_rels/.rels', _ROOT_RELS.format(target='word/document.xml'))
        _write_stream(
            archive,
            'word/document.xml',
            _repeat(
                f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{_W}"><w:body>'.encode(),
                b'<w:p><w:r><w:t>All work and no play makes Jack a dull boy.</w:t></w:r></w:p>',
                b'</w:body></w:document>',
                uncompressed,
            ),
        )
    return buffer.getvalue()


def pptx_bomb(uncompressed: int) -> bytes:
    """A PPTX whose only slide is `uncompressed` bytes of repeated text runs."""
    buffer = io.BytesIO()
    a = 'http://schemas.openxmlformats.org/drawingml/2006/main'
    p = 'http://schemas.openxmlformats.org/presentationml/2006/main'
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(
            '[Content_Types].xml',
            _CONTENT_TYPES.format(
                part='/ppt/presentation.xml',
                type='application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml',
            ),
        )
        archive.writestr('_rels/.rels', _ROOT_RELS.format(target='ppt/presentation.xml'))
        archive.writestr('ppt/presentation.xml', f'<p:presentation xmlns:p="{p}"/>')
        _write_stream(
            archive,
            'ppt/slides/slide1.xml',
            _repeat(
                f'<p:sld xmlns:p="{p}" xmlns:a="{a}"><p:cSld><p:spTree><p:sp><p:txBody>'.encode(),
                b'<a:p><a:r><a:t>All work and no play makes Jack a dull boy.</a:t></a:r></a:p>',
                b'</p:txBody></p:sp></p:spTree></p:cSld></p:sld>',
                uncompressed,
            ),
        )
    return buffer.getvalue()


def odt_bomb(uncompressed: int) -> bytes:
    """An OpenDocument text whose content.xml is `uncompressed` bytes of repeated paragraphs."""
    buffer = io.BytesIO()
    text = 'urn:oasis:names:tc:opendocument:xmlns:text:1.0'
    office = 'urn:oasis:names:tc:opendocument:xmlns:office:1.0'
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(
            zipfile.ZipInfo('mimetype'), 'application/vnd.oasis.opendocument.text'
        )  # stored, first: the ODF signature
        archive.writestr('META-INF/manifest.xml', '<manifest/>')
        _write_stream(
            archive,
            'content.xml',
            _repeat(
                f'<office:document-content xmlns:office="{office}" xmlns:text="{text}">'
                '<office:body><office:text>'.encode(),
                b'<text:p>All work and no play makes Jack a dull boy.</text:p>',
                b'</office:text></office:body></office:document-content>',
                uncompressed,
            ),
        )
    return buffer.getvalue()


def _xlsx(sheet: Iterator[bytes], shared_strings: Iterator[bytes] | None = None, level: int = 9) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        archive.writestr(
            '[Content_Types].xml',
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            '<Override PartName="/xl/worksheets/sheet1.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
            + (
                '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
                'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
                if shared_strings is not None
                else ''
            )
            + '</Types>',
        )
        archive.writestr('_rels/.rels', _ROOT_RELS.format(target='xl/workbook.xml'))
        archive.writestr(
            'xl/workbook.xml',
            f'<workbook xmlns="{_S}" xmlns:r="{_R}"><sheets>'
            '<sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>',
        )
        rels = (
            '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
            'relationships/worksheet" Target="worksheets/sheet1.xml"/>'
        )
        if shared_strings is not None:
            rels += (
                '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
                'relationships/sharedStrings" Target="sharedStrings.xml"/>'
            )
        archive.writestr(
            'xl/_rels/workbook.xml.rels',
            f'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{rels}'
            '</Relationships>',
        )
        _write_stream(archive, 'xl/worksheets/sheet1.xml', sheet)
        if shared_strings is not None:
            _write_stream(archive, 'xl/sharedStrings.xml', shared_strings)
    return buffer.getvalue()


def xlsx_shared_strings(uncompressed: int) -> bytes:
    """An XLSX with two cells and a sharedStrings.xml of `uncompressed` bytes."""
    sheet = iter(
        [
            f'<worksheet xmlns="{_S}"><sheetData><row r="1"><c r="A1" t="s"><v>0</v></c></row>'
            '<row r="2"><c r="A2" t="s"><v>1</v></c></row></sheetData></worksheet>'.encode()
        ]
    )
    strings = _repeat(
        f'<sst xmlns="{_S}">'.encode(),
        b'<si><t>All work and no play makes Jack a dull boy.</t></si>',
        b'</sst>',
        uncompressed,
    )
    return _xlsx(sheet, strings)


def _rows(rows: int) -> Iterator[bytes]:
    yield f'<worksheet xmlns="{_S}"><dimension ref="A1:B{rows}"/><sheetData>'.encode()
    step = 50_000
    row = '<row r="%d"><c r="A%d"><v>%d</v></c><c r="B%d"><v>%d</v></c></row>'
    for start in range(1, rows + 1, step):
        yield ''.join([row % (i, i, i, i, i * 2) for i in range(start, min(start + step, rows + 1))]).encode()
    yield b'</sheetData></worksheet>'


def xlsx_rows(rows: int) -> bytes:
    """An XLSX of one sheet with `rows` rows of two numbers (fast compression: rows are not repetitive)."""
    return _xlsx(_rows(rows), level=1)


def _export_rows(rows: int) -> Iterator[bytes]:
    """A sheet as openpyxl's write-only mode and many exporters write it: no dimension (its size is not known
    before the end), inline strings, a header row."""
    yield (
        f'<worksheet xmlns="{_S}"><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>order_id</t></is></c>'
        '<c r="B1" t="inlineStr"><is><t>sku</t></is></c><c r="C1" t="inlineStr"><is><t>quantity</t></is></c>'
        '</row>'
    ).encode()
    step = 50_000
    row = (
        '<row r="%d"><c r="A%d" t="n"><v>%d</v></c><c r="B%d" t="inlineStr"><is><t>SKU-%05d</t></is></c>'
        '<c r="C%d" t="n"><v>%d</v></c></row>'
    )
    for start in range(2, rows + 2, step):
        end = min(start + step, rows + 2)
        cells = [row % (i, i, i - 1, i, (i - 1) % 5000, i, (i - 1) % 17) for i in range(start, end)]
        yield ''.join(cells).encode()
    yield b'</sheetData></worksheet>'


def xlsx_export(rows: int) -> bytes:
    """A legitimate XLSX of one sheet with `rows` data rows (order id, SKU, quantity) that does not declare
    its size: 3 million rows make about 50 MB."""
    return _xlsx(_export_rows(rows), level=6)


def pdf_pages(pages: int) -> bytes:
    """A valid PDF of `pages` trivial pages, each showing one line of text."""
    out = io.BytesIO()
    out.write(b'%PDF-1.4\n')
    offsets: list[int] = []

    def obj(number: int, body: bytes) -> None:
        while len(offsets) < number:
            offsets.append(0)
        offsets[number - 1] = out.tell()
        out.write(b'%d 0 obj\n' % number + body + b'\nendobj\n')

    first_page = 4
    kids = b' '.join(b'%d 0 R' % (first_page + 2 * i) for i in range(pages))
    obj(1, b'<< /Type /Catalog /Pages 2 0 R >>')
    obj(2, b'<< /Type /Pages /Kids [' + kids + b'] /Count %d >>' % pages)
    obj(3, b'<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>')
    for i in range(pages):
        page, content = first_page + 2 * i, first_page + 2 * i + 1
        stream = b'BT /F1 12 Tf 72 720 Td (Page %d) Tj ET' % (i + 1)
        obj(
            page,
            b'<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> '
            b'/Contents %d 0 R >>' % content,
        )
        obj(content, b'<< /Length %d >>\nstream\n' % len(stream) + stream + b'\nendstream')
    xref = out.tell()
    out.write(b'xref\n0 %d\n0000000000 65535 f \n' % (len(offsets) + 1))
    out.write(b''.join(b'%010d 00000 n \n' % o for o in offsets))
    out.write(b'trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n' % (len(offsets) + 1, xref))
    return out.getvalue()


def text_plain(size: int) -> bytes:
    """`size` bytes of ordinary English text lines."""
    line = b'The quick brown fox jumps over the lazy dog, line after line after line.\n'
    return _filled(line, size)


def _filled(unit: bytes, size: int) -> bytes:
    """`unit` repeated to exactly `size` bytes, holding one copy only (BytesIO hands its buffer over)."""
    out = io.BytesIO()
    block = unit * max(1, MB // len(unit))
    while out.tell() + len(block) <= size:
        out.write(block)
    rest = size - out.tell()
    out.write((unit * (rest // len(unit) + 1))[:rest])
    return out.getvalue()


def csv_one_line(size: int) -> bytes:
    """A CSV of `size` bytes on a single line: a header of many short columns and no newline."""
    return _filled(b'alpha,beta,gamma,', size)


def lying_wav(size: int = 16 * 1024, byte_rate: int = 1) -> bytes:
    """A PCM WAV (16 kHz, mono, 16-bit) of `size` bytes whose header claims `byte_rate` bytes per second."""
    samples = size - 44
    header = b'RIFF' + struct.pack('<I', 36 + samples) + b'WAVE'
    header += b'fmt ' + struct.pack('<IHHIIHH', 16, 1, 1, 16_000, byte_rate, 2, 16)
    header += b'data' + struct.pack('<I', samples)
    return header + bytes(samples)


@dataclass(frozen=True)
class Case:
    """One hostile attachment: how to build it, and how it is sent."""

    name: str
    build: Callable[[], bytes]
    media_type: str
    filename: str


DOCX = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'
XLSX = 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'
PPTX = 'application/vnd.openxmlformats-officedocument.presentationml.presentation'
ODT = 'application/vnd.oasis.opendocument.text'

CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case('docx_bomb_10mb', lambda: docx_bomb(10 * MB), DOCX, 'bomb.docx'),
        Case('docx_bomb_30mb', lambda: docx_bomb(30 * MB), DOCX, 'bomb.docx'),
        Case('docx_bomb_100mb', lambda: docx_bomb(100 * MB), DOCX, 'bomb.docx'),
        Case('pptx_bomb_10mb', lambda: pptx_bomb(10 * MB), PPTX, 'bomb.pptx'),
        Case('odt_bomb_10mb', lambda: odt_bomb(10 * MB), ODT, 'bomb.odt'),
        Case('xlsx_shared_strings_300mb', lambda: xlsx_shared_strings(300 * MB), XLSX, 'strings.xlsx'),
        Case('xlsx_3m_rows', lambda: xlsx_rows(3_000_000), XLSX, 'rows.xlsx'),
        Case('xlsx_export_3m_rows', lambda: xlsx_export(3_000_000), XLSX, 'orders.xlsx'),
        Case('pdf_10k_pages', lambda: pdf_pages(10_000), 'application/pdf', 'pages.pdf'),
        Case('pdf_100k_pages', lambda: pdf_pages(100_000), 'application/pdf', 'pages.pdf'),
        Case('text_500mb', lambda: text_plain(500 * MB), 'text/plain', 'huge.txt'),
        Case('csv_48mb_one_line', lambda: csv_one_line(48 * MB), 'text/csv', 'line.csv'),
        Case('wav_lying_header', lying_wav, 'audio/wav', 'clip.wav'),
    )
}

"""Documents converted by markitdown: PDF, Word, PowerPoint, HTML, EPUB, notebooks, Outlook, RSS."""

from __future__ import annotations

import contextlib
import functools
import io
import re
from typing import Any

from ._base import Extraction, FileInfo, Reader, ReaderError
from ._results import Truncation
from ._settings import FileSettings
from ._text import tidy_lines


@functools.cache
def _converter(name: str) -> Any:
    """One instance per markitdown converter class, created on first use (imports are slow)."""
    from markitdown import converters

    return getattr(converters, name)()


def convert_with(converter_name: str, data: bytes, info: FileInfo) -> str:
    """Run one markitdown converter on `data` and normalize its output as `MarkItDown.convert` does.

    The format's converter is called directly rather than through `MarkItDown.convert_stream`, which
    guesses the type again (loading magika) and falls back to other converters, e.g. the plain-text one
    for a PDF that failed: our sniffing already decided the format, and a failure should stay a failure.
    """
    from markitdown import StreamInfo

    stream_info = StreamInfo(mimetype=info.media_type, extension=info.extension, filename=info.name)
    result = _converter(converter_name).convert(io.BytesIO(data), stream_info)
    # The same normalization MarkItDown._convert applies, so output matches markitdown's own.
    return tidy_lines(re.split(r'\r?\n', result.markdown))


class MarkItDownReader(Reader):
    """A format markitdown's converter named `converter` reads as it is (its markdown, nothing added)."""

    def __init__(
        self, format: str, types: tuple[str, ...], suffixes: tuple[str, ...], converter: str
    ) -> None:
        self.format, self.media_types, self.extensions, self.converter = format, types, suffixes, converter

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        return Extraction(convert_with(self.converter, data, info))


DOCX_TYPE = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'
OUTLOOK_TYPE = 'application/vnd.ms-outlook'
DOCX = MarkItDownReader('DOCX', (DOCX_TYPE,), ('.docx',), 'DocxConverter')
HTML = MarkItDownReader(
    'HTML', ('text/html', 'application/xhtml+xml'), ('.html', '.htm', '.xhtml'), 'HtmlConverter'
)
EPUB = MarkItDownReader('EPUB', ('application/epub+zip',), ('.epub',), 'EpubConverter')
IPYNB = MarkItDownReader('Jupyter notebook', ('application/x-ipynb+json',), ('.ipynb',), 'IpynbConverter')
OUTLOOK_MSG = MarkItDownReader('Outlook message', (OUTLOOK_TYPE,), ('.msg',), 'OutlookMsgConverter')


class PdfReader(Reader):
    """PDFs: counted first, then converted by markitdown, or only their first `pdf_max_pages` by pdfminer."""

    format = 'PDF'
    media_types = ('application/pdf', 'application/x-pdf')
    extensions = ('.pdf',)

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        document = _open_pdf(data)
        pages = _pdf_pages(data, document)
        # The page tree's /Count can lie; page objects in plain sight are a second opinion.
        seen = max(pages or 0, len(_PAGE_OBJECT.findall(data)))
        truncations: tuple[Truncation, ...] = ()
        if seen > settings.pdf_max_pages:
            # markitdown opens every page (pdfplumber walks them all); this stops at the limit.
            limit = settings.pdf_max_pages
            text = _first_pages_text(document, limit)
            text += f'\n\n[... pages {limit + 1:,}-{seen:,} not converted (the limit is {limit:,} pages) ...]'
            truncations = (Truncation('pages', limit, seen),)
        else:
            text = convert_with('PdfConverter', data, info)
        note = None
        if not text.strip():
            count = 'unknown number of pages' if pages is None else f'{pages} page{"s" if pages != 1 else ""}'
            note = f'no extractable text; {count} (scanned or image-only PDF?)'
        return Extraction(text, truncations, pages=pages, note=note)


_PAGE_OBJECT = re.compile(rb'/Type\s*/Page(?!s)')
_PAGES_NODE = re.compile(rb'<<[^<>]*/Type\s*/Pages\b[^<>]*>>')
_COUNT = re.compile(rb'/Count\s+(\d{1,9})\b')


def _first_pages_text(document: Any, max_pages: int) -> str:
    """The text of the first `max_pages` pages, as pdfminer's `extract_text` gives it (same layout
    analysis), from the document already parsed."""
    from pdfminer.converter import TextConverter
    from pdfminer.layout import LAParams
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage

    out = io.StringIO()
    manager = PDFResourceManager(caching=True)
    with TextConverter(manager, out, codec='utf-8', laparams=LAParams()) as device:
        interpreter = PDFPageInterpreter(manager, device)
        for number, page in enumerate(PDFPage.create_pages(document)):
            if number >= max_pages:
                break
            interpreter.process_page(page)
    return tidy_lines(out.getvalue().splitlines())


def _open_pdf(data: bytes) -> Any:
    """pdfminer's document (markitdown[pdf], a dependency)."""
    from pdfminer.pdfdocument import PDFDocument, PDFPasswordIncorrect
    from pdfminer.pdfparser import PDFParser

    try:
        return PDFDocument(PDFParser(io.BytesIO(data)))
    except PDFPasswordIncorrect as e:
        raise ReaderError('encrypted PDF (password required)') from e
    except Exception as e:
        raise ReaderError(f'corrupt PDF ({type(e).__name__}: {e})') from e


def _pdf_pages(data: bytes, document: Any) -> int | None:
    """The page count: the root page-tree node's /Count, read with a regex (pdfminer would parse its
    whole /Kids array, seconds for 100,000 pages, to read one number), else from pdfminer's tree;
    `/Type /Page` counting alone misses pages in compressed object streams."""
    counts = [int(c) for node in _PAGES_NODE.findall(data) for c in _COUNT.findall(node)]
    if counts:
        return max(counts)
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdftypes import resolve1

    with contextlib.suppress(Exception):
        declared = resolve1(resolve1(document.catalog['Pages'])['Count'])
        if isinstance(declared, int) and declared >= 0:
            return declared
    try:
        return sum(1 for _ in PDFPage.create_pages(document))
    except Exception:
        return None


class PptxReader(Reader):
    format = 'PPTX'
    media_types = ('application/vnd.openxmlformats-officedocument.presentationml.presentation',)
    extensions = ('.pptx',)

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        text = convert_with('PptxConverter', data, info)
        slides = len(re.findall(r'^<!-- Slide number: \d+ -->', text, flags=re.M))
        return Extraction(text, pages=slides or None)


class RssReader(Reader):
    """RSS and Atom feeds; markitdown returns nothing useful for other XML, which then reads as text."""

    format = 'RSS'
    media_types = ('application/rss+xml', 'application/atom+xml')
    extensions = ('.rss', '.atom')

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        text = convert_with('RssConverter', data, info)
        if not text.strip():
            raise ReaderError('not an RSS or Atom feed')
        return Extraction(text)

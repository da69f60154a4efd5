"""Documents converted by markitdown: PDF, Word, PowerPoint, HTML, EPUB, notebooks, Outlook, RSS."""

from __future__ import annotations

import io
import re
import threading
from typing import Any

from ._base import Extraction, FileInfo, Reader, ReaderError
from ._settings import FileSettings

_lock = threading.Lock()
_converters: dict[str, Any] = {}


def _converter(name: str) -> Any:
    """One instance per markitdown converter class, created on first use (imports are slow)."""
    with _lock:
        converter = _converters.get(name)
        if converter is None:
            from markitdown import converters

            converter = _converters[name] = getattr(converters, name)()
        return converter


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
    text = '\n'.join(line.rstrip() for line in re.split(r'\r?\n', result.markdown))
    return re.sub(r'\n{3,}', '\n\n', text)


class MarkItDownReader(Reader):
    """A format markitdown converts; subclasses name the converter and may add page counts or notes."""

    converter: str

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        return Extraction(convert_with(self.converter, data, info))


class PdfReader(MarkItDownReader):
    format = 'PDF'
    media_types = ('application/pdf', 'application/x-pdf')
    extensions = ('.pdf',)
    converter = 'PdfConverter'

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        pages = _pdf_pages(data)
        text = convert_with(self.converter, data, info)
        note = None
        if not text.strip():
            count = 'unknown number of pages' if pages is None else f'{pages} page{"s" if pages != 1 else ""}'
            note = f'no extractable text; {count} (scanned or image-only PDF?)'
        return Extraction(text, pages=pages, note=note)


def _pdf_pages(data: bytes) -> int | None:
    """Page count from pdfminer (a markitdown `[pdf]` dependency); `/Type /Page` counting misses
    pages in compressed object streams."""
    try:
        from pdfminer.pdfdocument import PDFDocument, PDFPasswordIncorrect
        from pdfminer.pdfpage import PDFPage
        from pdfminer.pdfparser import PDFParser
    except ImportError:  # pragma: no cover - markitdown[pdf] installs it
        return None
    try:
        document = PDFDocument(PDFParser(io.BytesIO(data)))
    except PDFPasswordIncorrect as e:
        raise ReaderError('encrypted PDF (password required)') from e
    except Exception as e:
        raise ReaderError(f'corrupt PDF ({type(e).__name__}: {e})') from e
    try:
        return sum(1 for _ in PDFPage.create_pages(document))
    except Exception:
        return None


class DocxReader(MarkItDownReader):
    format = 'DOCX'
    media_types = ('application/vnd.openxmlformats-officedocument.wordprocessingml.document',)
    extensions = ('.docx',)
    converter = 'DocxConverter'


class PptxReader(MarkItDownReader):
    format = 'PPTX'
    media_types = ('application/vnd.openxmlformats-officedocument.presentationml.presentation',)
    extensions = ('.pptx',)
    converter = 'PptxConverter'

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        text = convert_with(self.converter, data, info)
        slides = len(re.findall(r'^<!-- Slide number: \d+ -->', text, flags=re.M))
        return Extraction(text, pages=slides or None)


class HtmlReader(MarkItDownReader):
    format = 'HTML'
    media_types = ('text/html', 'application/xhtml+xml')
    extensions = ('.html', '.htm', '.xhtml')
    converter = 'HtmlConverter'


class EpubReader(MarkItDownReader):
    format = 'EPUB'
    media_types = ('application/epub+zip',)
    extensions = ('.epub',)
    converter = 'EpubConverter'


class IpynbReader(MarkItDownReader):
    format = 'Jupyter notebook'
    media_types = ('application/x-ipynb+json',)
    extensions = ('.ipynb',)
    converter = 'IpynbConverter'


class OutlookMsgReader(MarkItDownReader):
    format = 'Outlook message'
    media_types = ('application/vnd.ms-outlook',)
    extensions = ('.msg',)
    converter = 'OutlookMsgConverter'


class RssReader(MarkItDownReader):
    """RSS and Atom feeds; markitdown returns nothing useful for other XML, which then reads as text."""

    format = 'RSS'
    media_types = ('application/rss+xml', 'application/atom+xml')
    extensions = ('.rss', '.atom')
    converter = 'RssConverter'

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        text = convert_with(self.converter, data, info)
        if not text.strip():
            raise ReaderError('not an RSS or Atom feed')
        return Extraction(text)

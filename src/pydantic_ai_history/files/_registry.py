"""The one place that maps media types, extensions and magic bytes to readers."""

from __future__ import annotations

import posixpath
import zipfile
from io import BytesIO

from ._archive import ZipReader
from ._base import Reader
from ._budget import zip_entry_bound
from ._markitdown import (
    DOCX,
    DOCX_TYPE,
    EPUB,
    HTML,
    IPYNB,
    OUTLOOK_MSG,
    OUTLOOK_TYPE,
    PdfReader,
    PptxReader,
    RssReader,
)
from ._structured import JsonLinesReader, JsonReader, SvgReader, XmlReader, YamlReader
from ._tables import CsvReader, XlsReader
from ._text import RtfReader, TextReader, looks_like_text
from ._xlsx import XlsxReader

READERS: tuple[Reader, ...] = (
    PdfReader(),
    DOCX,
    PptxReader(),
    XlsxReader(),
    XlsReader(),
    HTML,
    EPUB,
    IPYNB,
    OUTLOOK_MSG,
    RtfReader(),
    RssReader(),
    SvgReader(),
    XmlReader(),
    JsonReader(),
    JsonLinesReader(),
    YamlReader(),
    CsvReader(),
    ZipReader(),
    TextReader(),
)

_SNIFF_MAX_ENTRIES = 100_000
"""Beyond this many members the directory is not even parsed to tell the format: it is refused later."""

IMAGE_TYPES = {
    **{
        f'.{ext}': f'image/{ext}'
        for ext in ('png', 'gif', 'webp', 'bmp', 'tiff', 'avif', 'heic', 'heif', 'apng')
    },
    **{'.jpg': 'image/jpeg', '.jpeg': 'image/jpeg', '.tif': 'image/tiff', '.ico': 'image/x-icon'},
}
AUDIO_TYPES = {
    **{f'.{ext}': f'audio/{ext}' for ext in ('wav', 'ogg', 'flac', 'aac', 'opus', 'aiff', 'webm')},
    **{'.mp3': 'audio/mpeg', '.oga': 'audio/ogg', '.m4a': 'audio/mp4'},
}

_BY_MEDIA_TYPE: dict[str, Reader] = {t: r for r in reversed(READERS) for t in r.media_types}
_BY_EXTENSION: dict[str, str] = {
    **{ext: r.media_types[0] for r in reversed(READERS) for ext in r.extensions},
    **IMAGE_TYPES,
    **AUDIO_TYPES,
}
# Names that say nothing about the content: sniffing decides instead.
_GENERIC = frozenset(
    {'', 'application/octet-stream', 'binary/octet-stream', 'application/unknown', 'text/plain'}
)
_ALIASES = {
    **dict.fromkeys(('image/jpg', 'image/pjpeg'), 'image/jpeg'),
    **dict.fromkeys(('image/x-png', 'application/vnd.apple.png'), 'image/png'),
    **dict.fromkeys(('audio/x-wav', 'audio/wave', 'audio/vnd.wave'), 'audio/wav'),
    **{'audio/mp3': 'audio/mpeg', 'image/x-ms-bmp': 'image/bmp', 'application/x-zip': 'application/zip'},
    'text/x-csv': 'text/csv',
}


def reader_for(media_type: str) -> Reader | None:
    """The reader for a media type; any other `text/*` reads as plain text."""
    reader = _BY_MEDIA_TYPE.get(media_type)
    if reader is None and media_type.startswith('text/'):
        return _BY_MEDIA_TYPE['text/plain']
    return reader


def format_name(media_type: str) -> str:
    reader = _BY_MEDIA_TYPE.get(media_type)
    if reader is not None:
        return reader.format
    return media_type.rsplit('/', 1)[-1].removeprefix('x-').upper()


def extension_of(name: str | None) -> str | None:
    if not name:
        return None
    ext = posixpath.splitext(name.replace('\\', '/'))[1].lower()
    return ext or None


def normalize_media_type(media_type: str | None) -> str:
    if not media_type:
        return ''
    base = media_type.split(';', 1)[0].strip().lower()
    return _ALIASES.get(base, base)


def sniff_media_type(data: bytes, name: str | None, declared: str | None) -> str:
    """The media type to read `data` as: magic bytes, then a specific declared type, then the extension,
    then a look at the content; 'application/octet-stream' when nothing fits.

    Magic bytes win because declared types are often wrong (e.g. a PNG uploaded as image/jpeg).
    """
    declared_type = normalize_media_type(declared)
    extension = extension_of(name)
    magic = _magic(data, extension)
    if magic is not None:
        return magic
    if declared_type not in _GENERIC:
        return declared_type
    if extension in _BY_EXTENSION:
        by_extension = _BY_EXTENSION[extension]
        if by_extension == 'application/xml' and _sniff_text(data) == 'application/rss+xml':
            return 'application/rss+xml'
        # A binary format's extension on bytes without its magic is not that format.
        if reader_for(by_extension) is not None and looks_like_text(data) == _is_text_type(by_extension):
            return by_extension
        if by_extension.startswith('audio/'):
            return by_extension
    if data and looks_like_text(data):
        return _sniff_text(data) or 'text/plain'
    return 'application/octet-stream'


def _is_text_type(media_type: str) -> bool:
    return media_type.startswith('text/') or media_type in (
        'application/json',
        'application/jsonl',
        'application/xml',
        'application/rtf',
        'application/yaml',
        'application/x-ipynb+json',
        'application/rss+xml',
        'application/xhtml+xml',
        'image/svg+xml',
    )


def _sniff_text(data: bytes) -> str | None:
    head = data[:4096].lstrip(b'\xef\xbb\xbf \t\r\n').lower()
    if head.startswith(b'{\\rtf'):
        return 'application/rtf'
    if head.startswith((b'<!doctype html', b'<html')) or b'<html' in head[:1024]:
        return 'text/html'
    if head.startswith(b'<?xml') or head.startswith(b'<'):
        if b'<svg' in head:
            return 'image/svg+xml'
        if b'<rss' in head or b'<feed' in head:
            return 'application/rss+xml'
        return 'application/xml' if head.startswith(b'<?xml') else None
    if head.startswith((b'{', b'[')):
        if b'"nbformat"' in data[-4096:] or b'"cells"' in head:
            return 'application/x-ipynb+json'
        return 'application/json'
    return None


_PREFIXES: tuple[tuple[tuple[bytes, ...], str], ...] = (
    ((b'\x89PNG\r\n\x1a\n',), 'image/png'),
    ((b'\xff\xd8\xff',), 'image/jpeg'),
    ((b'GIF87a', b'GIF89a'), 'image/gif'),
    ((b'II*\x00', b'MM\x00*'), 'image/tiff'),
    ((b'OggS',), 'audio/ogg'),
    ((b'fLaC',), 'audio/flac'),
    ((b'ID3', b'\xff\xfb', b'\xff\xf3', b'\xff\xf2'), 'audio/mpeg'),
    ((b'{\\rtf',), 'application/rtf'),
)
"""Formats a fixed opening identifies, checked in order."""
_RIFF_KINDS = {b'WEBP': 'image/webp', b'WAVE': 'audio/wav'}
_FTYP_BRANDS = {
    **dict.fromkeys((b'avif', b'avis'), 'image/avif'),
    **dict.fromkeys((b'heic', b'heix', b'hevc', b'heim', b'heis', b'mif1', b'msf1'), 'image/heic'),
    **dict.fromkeys((b'M4A ', b'M4B '), 'audio/mp4'),
}
"""ISO media files (`....ftyp<brand>`): the brand says which."""
_BMP_HEADER_SIZES = (12, 40, 52, 56, 64, 108, 124)


def _magic(data: bytes, extension: str | None) -> str | None:
    head = data[:64]
    if b'%PDF-' in data[:1024]:
        return 'application/pdf'
    kind = _container_kind(data, head)
    if kind is not None:
        return kind
    for prefixes, media_type in _PREFIXES:
        if head.startswith(prefixes):
            return media_type
    if head.startswith((b'PK\x03\x04', b'PK\x05\x06')):
        return _zip_type(data)
    if head.startswith(b'\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1'):
        return _ole_type(data, extension)
    return None


def _container_kind(data: bytes, head: bytes) -> str | None:
    """RIFF, BMP and ISO media files: a signature plus a field further in."""
    if head.startswith(b'RIFF'):
        kind = _RIFF_KINDS.get(head[8:12])
        if kind is not None:
            return kind
    if head.startswith(b'BM') and len(data) > 18 and data[14] in _BMP_HEADER_SIZES:
        return 'image/bmp'
    if head[4:8] == b'ftyp':
        return _FTYP_BRANDS.get(head[8:12])
    return None


def _zip_type(data: bytes) -> str:
    """Office documents and EPUB are ZIPs told apart by member names; only a sane-sized directory is read."""
    if zip_entry_bound(data) > _SNIFF_MAX_ENTRIES:
        return 'application/zip'
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            names = archive.namelist()
            if 'mimetype' in names:
                with archive.open('mimetype') as f:
                    if f.read(64).strip() == b'application/epub+zip':
                        return 'application/epub+zip'
    except Exception:
        return 'application/zip'
    if '[Content_Types].xml' in names:
        for prefix, media_type in (
            ('word/', DOCX_TYPE),
            ('ppt/', PptxReader.media_types[0]),
            ('xl/', XlsxReader.media_types[0]),
        ):
            if any(n.startswith(prefix) for n in names):
                return media_type
    return 'application/zip'


def _ole_type(data: bytes, extension: str | None) -> str:
    """Legacy Office and Outlook files share the OLE container; the stream names tell them apart."""
    if extension == '.msg' or '__substg1.0_'.encode('utf-16-le') in data:
        return OUTLOOK_TYPE
    if extension == '.xls' or 'Workbook'.encode('utf-16-le') in data or 'Book'.encode('utf-16-le') in data:
        return XlsReader.media_types[0]
    if extension == '.doc':
        return 'application/msword'
    if extension == '.ppt':
        return 'application/vnd.ms-powerpoint'
    return 'application/x-ole-storage'

"""`read_file`: sniff, dispatch to the image, audio or document path, cut, describe; never raise."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace

from ._audio import fit_audio
from ._base import Extraction, FileInfo, MemberReader, ReaderError
from ._budget import check_before_parse
from ._images import fit_image
from ._manifest import document_manifest, human_size, unreadable
from ._registry import extension_of, format_name, reader_for, sniff_media_type
from ._results import ConvertedDocument, FileResult, Truncation, UnreadableFile
from ._settings import FileSettings
from ._text import as_text, looks_like_text
from ._tokens import CountTokens, cut_tokens
from ._worker import WorkerUnavailable, convert_in_worker

logger = logging.getLogger('pydantic_ai_history.files')

_DEFAULT_SETTINGS = FileSettings()
_SVG = 'image/svg+xml'
_INLINE_MAX_BYTES = 256 * 1024
"""Text formats this small parse in linear time and memory: converted in the calling thread."""
_INLINE_FORMATS = frozenset({'text', 'CSV', 'JSON', 'JSON Lines', 'XML', 'SVG', 'RTF'})
_inline_warned = False


def read_file(
    data: bytes,
    *,
    media_type: str | None = None,
    name: str | None = None,
    settings: FileSettings = _DEFAULT_SETTINGS,
    count_tokens: Callable[[str], int] | None = None,
) -> FileResult:
    """Convert a file's bytes into what a model can afford: markdown, a fitted image or audio clip.

    Synchronous (run it in a thread from async code). Never raises for bad input: anything that cannot be
    read comes back as an `UnreadableFile` with a reason. Documents are checked before they are parsed
    (declared sizes, compression ratios), then converted in a worker process under the time and memory
    limits of `settings`; only what is shown is tokenized.
    """
    size = len(data)
    declared = media_type or 'application/octet-stream'
    if size > settings.max_file_bytes:
        return _too_large(name, declared, size, settings)
    if size == 0:
        return unreadable(name, declared, 0, 'empty file (0 bytes)')
    try:
        sniffed = sniff_media_type(data, name, media_type)
    except Exception:  # sniffing peeks into ZIP containers; a broken one must not escape
        sniffed = declared
    try:
        if sniffed.startswith('image/') and sniffed != _SVG:  # SVG is XML text, read as a document
            return fit_image(data, sniffed, name, settings)
        if sniffed.startswith('audio/'):
            return fit_audio(data, sniffed, name, settings)
        return _convert(data, sniffed, name, settings, count_tokens)
    except Exception as e:  # the never-raise promise: a bug in one format must not fail the whole run
        return unreadable(
            name, sniffed, size, f'{format_name(sniffed)} could not be read: {type(e).__name__}: {e}'
        )


def read_path(
    path: str | os.PathLike[str],
    *,
    media_type: str | None = None,
    name: str | None = None,
    settings: FileSettings = _DEFAULT_SETTINGS,
    count_tokens: Callable[[str], int] | None = None,
) -> FileResult:
    """`read_file` for a local path; the size is checked before anything is read."""
    name = name if name is not None else os.path.basename(os.fspath(path))
    declared = media_type or 'application/octet-stream'
    try:
        size = os.stat(path).st_size
        if size > settings.max_file_bytes:
            return _too_large(name, declared, size, settings)
        with open(path, 'rb') as f:
            # Read one byte past the limit: the file may have grown since stat().
            data = f.read(settings.max_file_bytes + 1)
    except OSError as e:
        return unreadable(name, declared, 0, f'could not open file: {e.strerror or e}')
    return read_file(data, media_type=media_type, name=name, settings=settings, count_tokens=count_tokens)


def extract(data: bytes, media_type: str, name: str | None, settings: FileSettings) -> Extraction | str:
    """The reader's markdown before the final token cut, or the reason it could not be read.

    Runs the reader in the calling thread; its text is capped at `max_extracted_chars` (head and tail).
    """
    reader = reader_for(media_type)
    if reader is None:
        return f'unsupported file type ({media_type})'
    info = FileInfo(media_type=media_type, name=name, extension=extension_of(name), members=_MEMBERS)
    try:
        extraction = reader.read(data, info, settings)
    except ReaderError as e:
        return f'{reader.format} could not be read: {e}'
    except RecursionError:
        # a parser that recurses once per level met a document nested deeper than the stack allows
        if not looks_like_text(data[:65536]):
            return f'{reader.format} could not be read: nested too deeply to parse'
        extraction = as_text(
            data, settings, None, f'{reader.format} nested too deeply to parse; shown as text'
        )
    except Exception as e:
        detail = str(e).strip().splitlines()[0][:300] if str(e).strip() else ''
        return f'{reader.format} could not be read: {type(e).__name__}' + (f': {detail}' if detail else '')
    return cap_chars(extraction, settings.max_extracted_chars)


def cap_chars(extraction: Extraction, max_chars: int) -> Extraction:
    """Keep at most `max_chars` characters of the text, 70% head and 30% tail, so that nothing larger
    than that ever reaches a tokenizer."""
    text = extraction.text
    if len(text) <= max_chars:
        return extraction
    head = int(max_chars * 0.7)
    tail = max_chars - head
    omitted = len(text) - head - tail
    marker = f'\n\n[... {omitted:,} characters omitted ...]\n\n'
    cut = text[:head] + marker + (text[-tail:] if tail else '')
    truncation = Truncation('chars', head + tail, len(text))
    return replace(extraction, text=cut, truncations=(*extraction.truncations, truncation))


def _extract_bounded(
    data: bytes, media_type: str, name: str | None, settings: FileSettings
) -> Extraction | str:
    """`extract` under the settings' limits: in a worker process unless the input is provably cheap."""
    global _inline_warned
    reader = reader_for(media_type)
    cheap = reader is not None and len(data) <= _INLINE_MAX_BYTES and reader.format in _INLINE_FORMATS
    if reader is None or settings.conversion_isolation == 'inline' or cheap:
        return extract(data, media_type, name, settings)
    try:
        return convert_in_worker(data, media_type, name, settings, reader.format)
    except WorkerUnavailable as e:
        if not _inline_warned:
            _inline_warned = True
            logger.warning(
                'files: documents are converted inline, without the time and memory limits (%s)', e
            )
        return extract(data, media_type, name, settings)


def convert_document(
    data: bytes, media_type: str, name: str | None, settings: FileSettings
) -> Extraction | str:
    """Extract and token-cut with the estimate, for documents nested in archives."""
    extraction = extract(data, media_type, name, settings)
    if isinstance(extraction, str):
        return extraction
    return replace(extraction, text=cut_tokens(extraction.text, settings.max_tokens).text)


_MEMBERS = MemberReader(sniff=sniff_media_type, convert=convert_document)


def _convert(
    data: bytes, media_type: str, name: str | None, settings: FileSettings, count_tokens: CountTokens | None
) -> ConvertedDocument | UnreadableFile:
    refusal = check_before_parse(data, media_type, settings)
    if refusal is not None:
        return unreadable(name, media_type, len(data), f'{format_name(media_type)} not opened: {refusal}')
    extraction = _extract_bounded(data, media_type, name, settings)
    if isinstance(extraction, str):
        return unreadable(name, media_type, len(data), extraction)
    cut = cut_tokens(extraction.text, settings.max_tokens, count_tokens)
    truncations = extraction.truncations
    if cut.cut:
        truncations = (*truncations, Truncation('tokens', cut.shown_tokens, cut.full_tokens))
    document = ConvertedDocument(
        kind='text',
        name=name,
        media_type=media_type,
        format=extraction.format or format_name(media_type),
        size_bytes=len(data),
        text=cut.text,
        full_text_tokens=cut.full_tokens,
        shown_tokens=cut.shown_tokens,
        truncations=truncations,
        pages=extraction.pages,
        note=extraction.note,
        manifest='',
    )
    return replace(document, manifest=document_manifest(document))


def _too_large(name: str | None, media_type: str, size: int, settings: FileSettings) -> UnreadableFile:
    reason = (
        f'file too large: {human_size(size)} > {human_size(settings.max_file_bytes)} limit; not converted'
    )
    return unreadable(name, media_type, size, reason)

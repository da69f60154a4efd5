"""Checks made before a document is parsed, from what its container declares, inflating nothing.

A ZIP-based document (DOCX, XLSX, PPTX, ODF, EPUB) is refused when its directory is too long, when it
declares more uncompressed bytes than the limit (XLSX sheets aside: they are streamed), when a large member
compressed suspiciously well (a zip bomb), or when XLSX shared strings (loaded whole) are too large.
`zipfile` never inflates a member past its declared size, so declared sizes truly bound parsing.
"""

from __future__ import annotations

import zipfile
from io import BytesIO

from ._manifest import human_size
from ._settings import FileSettings

ZIP_DOCUMENT_TYPES = frozenset(
    {
        'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
        'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
        'application/vnd.openxmlformats-officedocument.presentationml.presentation',
        'application/vnd.oasis.opendocument.text',
        'application/vnd.oasis.opendocument.spreadsheet',
        'application/vnd.oasis.opendocument.presentation',
        'application/epub+zip',
    }
)
"""Formats parsed as a whole from a ZIP container: a bomb anywhere in them refuses the whole file."""
_ARCHIVE_TYPES = frozenset({'application/zip', 'application/x-zip-compressed'})
_CENTRAL_ENTRY = b'PK\x01\x02'
_RATIO_FLOOR = 1024 * 1024
"""Members smaller than this are never called bombs, however well they compress."""
_SHARED_STRINGS = 'xl/sharedStrings.xml'
_XLSX = 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'
_XLSX_SHEET = 'xl/worksheets/'


def zip_entry_bound(data: bytes) -> int:
    """An upper bound on the members of a ZIP, from its directory's signatures, without parsing it."""
    return data.count(_CENTRAL_ENTRY)


def bomb_reason(entry: zipfile.ZipInfo, settings: FileSettings) -> str | None:
    """Why one member looks like a zip bomb (it inflates too far from too little), or None."""
    if entry.file_size <= _RATIO_FLOOR:
        return None
    if entry.file_size <= settings.max_compression_ratio * max(entry.compress_size, 1):
        return None
    ratio = entry.file_size // max(entry.compress_size, 1)
    return (
        f'{entry.filename} inflates to {human_size(entry.file_size)} from {human_size(entry.compress_size)} '
        f'(ratio {ratio:,}:1 > {settings.max_compression_ratio:,}:1); possible zip bomb'
    )


def check_before_parse(data: bytes, media_type: str, settings: FileSettings) -> str | None:
    """Why a document must not be parsed at all, or None when its declared sizes are within the limits."""
    if media_type not in ZIP_DOCUMENT_TYPES and media_type not in _ARCHIVE_TYPES:
        return None
    entries = zip_entry_bound(data)
    if entries > settings.max_archive_entries:
        return f'{entries:,} archive members (limit {settings.max_archive_entries:,}); possible zip bomb'
    if media_type in _ARCHIVE_TYPES:
        return None  # archives are listed, their members checked one by one (ZipReader)
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None  # the reader reports the corruption in its own words
    return _declared_sizes_reason(infos, media_type, settings)


def _declared_sizes_reason(
    infos: list[zipfile.ZipInfo], media_type: str, settings: FileSettings
) -> str | None:
    # XLSX sheets are streamed row by row up to `table_max_rows`: only what readers load whole counts.
    streamed = _XLSX_SHEET if media_type == _XLSX else None
    total = sum(info.file_size for info in infos if not (streamed and info.filename.startswith(streamed)))
    if total > settings.max_uncompressed_bytes:
        return (
            f'{human_size(total)} uncompressed > {human_size(settings.max_uncompressed_bytes)} limit; '
            'not opened'
        )
    for info in infos:
        reason = bomb_reason(info, settings)
        if reason is not None:
            return reason
        if info.filename == _SHARED_STRINGS and info.file_size > settings.xlsx_max_shared_strings_bytes:
            return (
                f'shared strings of {human_size(info.file_size)} > '
                f'{human_size(settings.xlsx_max_shared_strings_bytes)} limit; not opened'
            )
    return None

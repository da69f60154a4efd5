"""ZIP archives: a listing, then each entry converted by its own reader, with zip-bomb guards."""

from __future__ import annotations

import posixpath
import zipfile
from dataclasses import replace
from io import BytesIO

from ._base import Extraction, FileInfo, Reader, ReaderError
from ._budget import bomb_reason
from ._manifest import human_size
from ._results import Truncation
from ._settings import FileSettings

MAX_LISTED = 200
MAX_CONVERTED = 50
_COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)


class ZipReader(Reader):
    """Lists the archive and converts the documents inside it; nested archives are listed, not opened.

    Guards (from `FileSettings`): the entry count (`max_archive_entries`, checked before the directory is
    parsed), the declared uncompressed total (`max_uncompressed_bytes`), each entry's compression ratio
    (`max_compression_ratio`), and the bytes actually read, capped too in case the headers lie.
    """

    format = 'ZIP'
    media_types = ('application/zip', 'application/x-zip-compressed')
    extensions = ('.zip',)

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        try:
            archive = zipfile.ZipFile(BytesIO(data))
        except (zipfile.BadZipFile, OSError, ValueError) as e:
            raise ReaderError(f'corrupt ZIP ({e})') from e
        with archive:
            entries = [e for e in archive.infolist() if not e.is_dir()]
            if len(entries) > settings.max_archive_entries:
                limit = settings.max_archive_entries
                raise ReaderError(f'ZIP has {len(entries):,} entries (limit {limit:,}); possible zip bomb')
            declared = sum(e.file_size for e in entries)
            lines = [f'Archive with {len(entries):,} files, {human_size(declared)} uncompressed:', '']
            lines.extend(f'- {e.filename} ({human_size(e.file_size)})' for e in entries[:MAX_LISTED])
            if len(entries) > MAX_LISTED:
                lines.append(f'- … {len(entries) - MAX_LISTED:,} more files')
            skipped: list[str] = []
            budget = min(settings.max_uncompressed_bytes, settings.max_file_bytes)
            converted = 0
            # Entries are converted with a smaller token budget each, so one file cannot crowd out the rest.
            entry_settings = replace(settings, max_tokens=max(settings.max_tokens // 2, 200))
            for entry in entries:
                name = entry.filename
                reason = self._skip_reason(entry, budget, settings)
                if reason is None and converted >= MAX_CONVERTED:
                    reason = f'more than {MAX_CONVERTED} files'
                if reason is not None:
                    skipped.append(f'{name}: {reason}')
                    continue
                # Read at most the declared size + 1 byte: a header that understates the size is caught.
                with archive.open(entry) as stream:
                    content = stream.read(entry.file_size + 1)
                if len(content) > entry.file_size:
                    skipped.append(f'{name}: size header is wrong; possible zip bomb')
                    continue
                budget -= len(content)
                media_type = info.members.sniff(content, name, None)
                if media_type in self.media_types or media_type.startswith(('image/', 'audio/', 'video/')):
                    skipped.append(f'{name}: {media_type}, not shown inside an archive')
                    continue
                converted += 1
                result = info.members.convert(content, media_type, posixpath.basename(name), entry_settings)
                lines.extend(['', f'## File: {name}', ''])
                if isinstance(result, str):
                    lines.append(f'(could not be read: {result})')
                else:
                    lines.append(result.text)
        note = None
        if skipped:
            lines.extend(['', 'Not converted:', *[f'- {s}' for s in skipped[:MAX_LISTED]]])
            more = f' and {len(skipped) - 1:,} more' if len(skipped) > 1 else ''
            note = f'{len(skipped)} of {len(entries)} entries not converted ({skipped[0]}{more})'
        truncations = (Truncation('items', converted, len(entries)),) if converted < len(entries) else ()
        return Extraction('\n'.join(lines), truncations, note=note)

    @staticmethod
    def _skip_reason(entry: zipfile.ZipInfo, budget: int, settings: FileSettings) -> str | None:
        if entry.flag_bits & 0x1:
            return 'encrypted'
        if entry.file_size > budget:
            return (
                f'{human_size(entry.file_size)} uncompressed exceeds the remaining limit; possible zip bomb'
            )
        if bomb_reason(entry, settings) is not None:
            ratio = entry.file_size // max(entry.compress_size, 1)
            return f'compression ratio {ratio:,}:1; possible zip bomb'
        if entry.compress_type not in _COMPRESSIONS:
            return 'unsupported compression'
        return None

"""Limits applied when turning an attached file into something a model can afford."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ('FileSettings',)

# Bumped when conversion output changes for the same settings, so cached conversions are not reused.
_CONVERTER_VERSION = 1


@dataclass(frozen=True)
class FileSettings:
    """Every limit of the file conversion layer; the defaults are the project's documented ones."""

    max_file_bytes: int = 50 * 1024 * 1024
    """Larger files are not read at all: a note is returned instead."""
    max_tokens: int = 5_000
    """Final cut per converted file, keeping head and tail."""
    text_max_lines: int = 200
    text_max_line_chars: int = 1_000
    table_head_rows: int = 20
    table_tail_rows: int = 10
    table_max_columns: int = 50
    table_max_cell_chars: int = 500
    struct_max_depth: int = 5
    struct_max_items: int = 50
    struct_max_keys: int = 50
    struct_max_string_chars: int = 500
    image_max_bytes: int = 2 * 1024 * 1024
    image_max_dimension: int = 8_000
    image_max_pixels: int = 50_000_000
    """Decompression-bomb guard: images with more pixels are never decoded."""
    audio_max_seconds: float = 30.0
    audio_max_bytes: int = 10 * 1024 * 1024

    def fingerprint(self) -> str:
        """A stable string of every setting (and the converter version), for callers' cache keys."""
        parts = [f'v={_CONVERTER_VERSION}']
        parts.extend(f'{f.name}={getattr(self, f.name)!r}' for f in fields(self))
        return ';'.join(parts)

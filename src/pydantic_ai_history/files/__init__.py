"""File conversion: attached files in, text (or a fitted image or audio clip) a model can afford out.

Pure bytes in, results out: nothing here depends on pydantic-ai, so callers decide how results become
message parts. `read_file` never raises for bad input; it is synchronous and CPU-bound.
"""

from __future__ import annotations

from ._read import read_file, read_path
from ._registry import sniff_media_type
from ._results import ConvertedDocument, FileResult, FittedAudio, FittedImage, Truncation, UnreadableFile
from ._settings import FileSettings

__all__ = (
    'ConvertedDocument',
    'FileResult',
    'FileSettings',
    'FittedAudio',
    'FittedImage',
    'Truncation',
    'UnreadableFile',
    'read_file',
    'read_path',
    'sniff_media_type',
)

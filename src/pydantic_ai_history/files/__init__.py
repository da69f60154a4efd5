"""File conversion: attached files in, text (or a fitted image or audio clip) a model can afford out.

Pure bytes in, results out: nothing here depends on pydantic-ai, so callers decide how results become
message parts. `read_file` never raises for bad input; it is synchronous and CPU-bound.

The readers (Pillow, markitdown, the parsers, the worker pool) load on first use, not on import: an app
that never sees a file never pays for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._settings import FileSettings

if TYPE_CHECKING:
    from ._read import read_file, read_path
    from ._registry import sniff_media_type
    from ._results import ConvertedDocument, FileResult, FittedAudio, FittedImage, Truncation, UnreadableFile

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

_LAZY = {
    'read_file': '._read',
    'read_path': '._read',
    'sniff_media_type': '._registry',
    'ConvertedDocument': '._results',
    'FileResult': '._results',
    'FittedAudio': '._results',
    'FittedImage': '._results',
    'Truncation': '._results',
    'UnreadableFile': '._results',
}
"""Public names by the module that defines them: the readers load with the first file, the results with the
first file or the first processor that converts one."""

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)

"""The sliding window: the last line of defence that makes a history fit its hard limit.

It keeps the preserved head, the pinned units and the longest contiguous run of recent units that fits,
stopping at the first that does not; dropped messages become one short note (keeping their system prompt
parts). Before dropping, it stores their transcript, which the note names for `read_artifact`; when the
store fails it still drops what it must and a `ContentLost` event says what went.

`select_window` decides, `window_note` writes the note, `SlidingWindow` prices, stores and assembles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ._note import dropped_count, note_transcript, window_note
    from ._select import WindowSelection, select_window
    from ._stage import SlidingWindow

__all__ = (
    'SlidingWindow',
    'WindowSelection',
    'dropped_count',
    'note_transcript',
    'select_window',
    'window_note',
)

_EXPORTS = {
    'SlidingWindow': '._stage',
    'WindowSelection': '._select',
    'dropped_count': '._note',
    'note_transcript': '._note',
    'select_window': '._select',
    'window_note': '._note',
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)

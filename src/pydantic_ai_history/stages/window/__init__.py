"""The sliding window: the last line of defence that makes a history fit its hard limit.

It keeps the preserved head (system prompt, first user message), the pinned units, and the longest
contiguous run of recent units that fits, stopping at the first unit that does not fit. Dropped messages
are replaced by one short note, which also carries any system prompt parts they held.

The budget is the context policy's (`ContextPolicy(budget_tokens=...)`, by default the usable window minus
the reserve), resolved once per request into `context.limits.budget`; `pin` and `keep_first_user_message`
are the processor's. `SlidingWindow()` takes no settings.

Before it drops anything, the window stores the transcript of what it drops (its own earlier notes aside) in
the spill store, and the note names it: `read_artifact(artifact_id="...", query=...)`. The transcript opens
with a line naming the previous window transcript, so one note suffices however often the window cut. When
the store fails (or there is none) the window still drops what it must, the request has to fit, and a
`ContentLost` event, logged at error level, names the tool calls and counts the user prompts that went.

`select_window` is the pure decision (which units to keep), `window_note` the note, `SlidingWindow` the stage
that prices, stores and assembles around them.
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

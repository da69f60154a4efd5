"""The request that carries a summary, and reading the summary back out of it.

Where `CompactionPart` is a request part (2.x) the summary is one: every provider model sends it as framed
user-voice text. Elsewhere it is a `UserPromptPart` opening with `TEXT_MARKERS['summary']`. Never a
`SystemPromptPart` mid-history (providers have rejected that). The request is marked in its metadata
(where messages have metadata) so the next compaction finds it; `pinning.marker_kind` also knows the text.

Pinned units evicted by a compaction are carried verbatim after the summarizer's text, under
`PINNED_HEADING`; the next compaction splits them off (`split_pinned`) so the summarizer never rewrites them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..._compat import (
    COMPACTION_PART,
    COMPACTION_REQUEST_PART,
    ModelMessage,
    ModelRequest,
    SystemPromptPart,
    UserPromptPart,
    make_request,
)
from ..._context import MARKER_KEY
from ...pinning import TEXT_MARKERS, marker_kind

__all__ = ('PINNED_HEADING', 'build_summary_message', 'join_pinned', 'split_pinned', 'summary_text')

PINNED_HEADING = '## Pinned (kept verbatim)'
"""The heading of the pinned section of a summary; the summarizer never sees it, so never writes it."""
_PINNED_SEPARATOR = f'\n\n{PINNED_HEADING}\n'


def build_summary_message(
    text: str,
    *,
    details: Mapping[str, Any],
    system_parts: Sequence[SystemPromptPart] = (),
) -> ModelRequest:
    """A new request holding `text` as the summary of the messages it replaces.

    `system_parts` are system prompt parts found among the evicted messages: they are kept, not summarized.
    No `run_id` is set: the summary is not a message of this run, so `new_messages()` on 2.x starts at the
    run's own first message and apps that store it keep their full history.
    """
    marker = {MARKER_KEY: {'kind': 'summary', **details}}
    part: Any
    if COMPACTION_REQUEST_PART is not None:
        part = COMPACTION_REQUEST_PART(content=text, metadata={MARKER_KEY: {'kind': 'summary'}})
    else:
        part = UserPromptPart(content=f'{TEXT_MARKERS["summary"]}\n{text}')
    return make_request([*system_parts, part], metadata=marker)


def summary_text(message: ModelMessage) -> str | None:
    """The summary a request of ours carries (without the text marker), or None if it is not one."""
    if not isinstance(message, ModelRequest) or marker_kind(message) != 'summary':
        return None
    opening = TEXT_MARKERS['summary']
    for part in message.parts:
        if COMPACTION_PART is not None and isinstance(part, COMPACTION_PART):
            return part.content or ''
        if isinstance(part, UserPromptPart) and isinstance(part.content, str):
            content = part.content
            return content[len(opening) :].lstrip('\n') if content.startswith(opening) else content
    return None


def split_pinned(text: str) -> tuple[str, str]:
    """A summary's text split into the summarizer's part and the pinned section (without its heading)."""
    summary, found, pinned = text.partition(_PINNED_SEPARATOR)
    return (summary, pinned) if found else (text, '')


def join_pinned(summary: str, *pinned: str) -> str:
    """The summary text with the non-empty `pinned` pieces appended, in order, under `PINNED_HEADING`."""
    pieces = [p for p in pinned if p]
    return f'{summary}{_PINNED_SEPARATOR}' + '\n\n'.join(pieces) if pieces else summary

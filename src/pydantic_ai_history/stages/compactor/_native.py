"""Provider-native compaction: where its compaction item goes in the history, and what comes after it.

The provider's adapter sends nothing before the latest `CompactionPart` but the system prompt (pydantic-ai's
`_trim_before_compaction`), so what must stay in front of the model comes after it:

    [system-prompt request] + compaction response + [first user turn] + our note (pins, transcript) + tail

A later compaction finds our marked compaction response and replaces it, so there is never more than one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart

from ..._compat import is_compaction_response, message_metadata
from ...messages._marks import MARKER_KEY, marker_kind, own_metadata
from ...messages.units import Unit, head_length
from ._summary_message import SummarySections, summary_sections

NATIVE_NOTE = (
    'The conversation before this point was compacted by the model provider: its compaction item above '
    'stands for the earlier messages.'
)
"""The summary section of the note that follows a provider's compaction item."""

_KIND = 'provider_compaction'


@dataclass(frozen=True)
class NativeLayout:
    """A history seen as what stays in front of a provider compaction, and where its body starts."""

    standing: list[ModelMessage]
    """The system-prompt requests that go before the compaction response."""
    task: ModelRequest | None
    """The first user turn without its system prompts, kept verbatim after the compaction response."""
    sent: list[ModelMessage]
    """What the provider is sent before the evicted messages: the head, the previous compaction or summary."""
    earlier: SummarySections
    """The sections of the previous note or summary (its pins and transcript reference are carried on)."""
    body_start: int

    @property
    def after_item(self) -> list[ModelMessage]:
        return [self.task] if self.task is not None else []

    @property
    def kept(self) -> list[ModelMessage]:
        """Everything kept around the compaction item but our note: its cost is fixed whatever the cut."""
        return [*self.standing, *self.after_item]


def mark_compaction(response: ModelResponse, details: dict[str, Any]) -> ModelResponse:
    metadata = dict(message_metadata(response))
    metadata[MARKER_KEY] = {'kind': _KIND, **details}
    return dataclasses.replace(response, metadata=metadata)


def native_layout(
    messages: Sequence[ModelMessage], units: Sequence[Unit], *, keep_first_user_message: bool
) -> NativeLayout | None:
    """None when the history's start is not one we can rebuild."""
    previous = _previous_compaction(messages)
    if previous is not None:
        return _after_previous(messages, previous)
    return _from_head(messages, units, keep_first_user_message=keep_first_user_message)


def _previous_compaction(messages: Sequence[ModelMessage]) -> int | None:
    """Index of our compaction response when only system-prompt requests come before it."""
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            ours = own_metadata(message_metadata(message)).get('kind') == _KIND
            return index if ours and is_compaction_response(message) else None
        if not _system_only(message):
            return None
    return None


def preserved_head(
    messages: Sequence[ModelMessage], units: Sequence[Unit], *, keep_first_user_message: bool
) -> int:
    """The messages kept in front of any compaction. Our own summary is never head (1.x renders it as user
    text): it is the previous summary, to be updated."""
    head = head_length(messages, units, keep_first_user_message=keep_first_user_message)
    while head > 0 and marker_kind(messages[head - 1]) is not None:
        head -= 1
    return head


def _earlier(messages: Sequence[ModelMessage], index: int) -> SummarySections | None:
    if index < len(messages) - 1 and marker_kind(messages[index]) == 'summary':
        return summary_sections(messages[index]) or SummarySections('')
    return None


def _after_previous(messages: Sequence[ModelMessage], compaction: int) -> NativeLayout:
    index = compaction + 1
    task: ModelRequest | None = None
    candidate = messages[index] if index < len(messages) - 1 else None
    if (
        isinstance(candidate, ModelRequest)
        and marker_kind(candidate) is None
        and any(isinstance(p, UserPromptPart) for p in candidate.parts)
    ):
        task, index = candidate, index + 1
    earlier = _earlier(messages, index)
    index += earlier is not None
    standing = list(messages[:compaction])
    sent = [*standing, messages[compaction], *([task] if task is not None else [])]
    return NativeLayout(standing, task, sent, earlier or SummarySections(''), index)


def _from_head(
    messages: Sequence[ModelMessage], units: Sequence[Unit], *, keep_first_user_message: bool
) -> NativeLayout | None:
    head = preserved_head(messages, units, keep_first_user_message=keep_first_user_message)
    requests = [m for m in messages[:head] if isinstance(m, ModelRequest)]
    if len(requests) != head:
        return None  # a malformed start (a response in the head): left to the LLM summary
    system = [p for m in requests for p in m.parts if isinstance(p, SystemPromptPart)]
    standing: list[ModelMessage] = [dataclasses.replace(requests[0], parts=system)] if system else []
    task: ModelRequest | None = None
    for request in requests:
        others = [p for p in request.parts if not isinstance(p, SystemPromptPart)]
        if others:
            task = dataclasses.replace(request, parts=others)
            break
    earlier = _earlier(messages, head)
    body_start = head + (earlier is not None)
    # a previous LLM summary is content the provider compacts with the rest
    return NativeLayout(
        standing, task, list(messages[:body_start]), earlier or SummarySections(''), body_start
    )


def _system_only(message: ModelMessage) -> bool:
    return (
        isinstance(message, ModelRequest)
        and bool(message.parts)
        and all(isinstance(p, SystemPromptPart) for p in message.parts)
    )

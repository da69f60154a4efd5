"""Deterministic stand-ins for a summary when the summarizer fails or is cooling down: `digest` (sections
of trimmed items, newest first when they do not all fit) and `head_tail_cut` (25% head, 75% tail)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ..._compat import NATIVE_TOOL_CALL_PARTS, RETRY_FEEDBACK_PART
from ...messages._marks import marker_kind
from ...messages.units import fit_suffix
from ...tokens import TokenCounter
from .._transcript import TranscriptUnit, content_text

_ITEM_TOKENS = 150
"""Each user message, error or tool outcome in the digest is trimmed to about this many tokens."""

_SHARES = {'previous': 0.35, 'user': 0.2, 'tools': 0.25, 'errors': 0.1, 'last': 0.1}
"""Each digest section's share of the summary cap."""


class _DigestNotes:
    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.user: list[str] = []
        self.tools: list[str] = []
        self.errors: list[str] = []
        self.last_text = ''
        self.calls: dict[str, str] = {}

    def add(self, message: ModelMessage) -> None:
        if marker_kind(message) is not None:
            return
        if isinstance(message, ModelRequest):
            for part in message.parts:
                self._request_part(part)
        else:
            for response_part in message.parts:
                self._response_part(response_part)

    def _request_part(self, part: Any) -> None:
        counter = self.counter
        if isinstance(part, UserPromptPart):
            self.user.append(_trim(counter, content_text(part.content)))
        elif isinstance(part, ToolReturnPart):
            call = self.calls.pop(part.tool_call_id, part.tool_name)
            outcome = getattr(part, 'outcome', 'success')
            result = _trim(counter, content_text(part.content), 60)
            if outcome not in (None, 'success'):
                self.errors.append(f'{part.tool_name}: {_trim(counter, content_text(part.content))}')
            self.tools.append(f'{call} -> {outcome or "success"}: {result}')
        elif isinstance(part, RetryPromptPart) or (
            RETRY_FEEDBACK_PART is not None and isinstance(part, RETRY_FEEDBACK_PART)
        ):
            name = getattr(part, 'tool_name', None) or 'output'
            self.errors.append(f'{name}: {_trim(counter, part.model_response())}')
            self.calls.pop(getattr(part, 'tool_call_id', ''), None)

    def _response_part(self, item: Any) -> None:
        if isinstance(item, TextPart) and item.content.strip():
            self.last_text = item.content
        elif isinstance(item, ToolCallPart) or isinstance(item, NATIVE_TOOL_CALL_PARTS):  # noqa: SIM101
            args = item.args if isinstance(item.args, str) else content_text(item.args or {})
            self.calls[item.tool_call_id] = f'{item.tool_name}({_trim(self.counter, args, 40)})'


def digest(
    messages: Sequence[ModelMessage], previous_summary: str | None, counter: TokenCounter, max_tokens: int
) -> str:
    notes = _DigestNotes(counter)
    for message in messages:
        notes.add(message)
    tools = [*notes.tools, *(f'{call} -> no result recorded' for call in notes.calls.values())]
    share = {name: int(max_tokens * fraction) for name, fraction in _SHARES.items()}
    previous = counter.truncate_text(previous_summary, share['previous']) if previous_summary else ''
    sections = [
        *([('Previous summary', previous)] if previous_summary else []),
        ('User messages', _fit(counter, notes.user, share['user'])),
        ('Tool calls and outcomes', _fit(counter, tools, share['tools'])),
        ('Errors', _fit(counter, notes.errors, share['errors'])),
        ('Last assistant text', counter.truncate_text(notes.last_text, share['last']) or 'none'),
    ]
    body = '\n\n'.join(f'## {title}\n{text}' for title, text in sections)
    text = f'Automatic digest of {len(messages)} earlier messages (the summarizer was unavailable).\n\n{body}'
    return counter.truncate_text(text, max_tokens)


def head_tail_cut(
    units: Sequence[TranscriptUnit], previous_summary: str | None, counter: TokenCounter, max_tokens: int
) -> str:
    items = list(units)
    if previous_summary:
        items.insert(
            0,
            TranscriptUnit(f'Earlier summary:\n{previous_summary}', counter.count_text(previous_summary), 0),
        )
    head_budget, tail_budget = int(max_tokens * 0.25), int(max_tokens * 0.75) - 60
    costs = [u.tokens for u in items]
    head_end = len(items) - fit_suffix(costs[::-1], head_budget, at_least=0)
    tail_start = head_end + fit_suffix(costs[head_end:], tail_budget, at_least=0)
    head, removed, tail = items[:head_end], items[head_end:tail_start], items[tail_start:]
    parts = [u.text for u in head]
    # a unit larger than its whole share is cut rather than lost: keep its start (head) or its end (tail)
    if not head and removed:
        parts.append(counter.truncate_text(removed[0].text, head_budget, head_fraction=1.0))
    if removed:
        count = sum(u.messages for u in removed)
        tokens = sum(u.tokens for u in removed)
        parts.append(
            f'[... {count} messages (about {tokens:,} tokens) removed here, in whole or in part ...]'
        )
    if not tail and removed:
        parts.append(counter.truncate_text(removed[-1].text, tail_budget, head_fraction=0.0))
    parts.extend(u.text for u in tail)
    text = 'Earlier messages, cut to their start and end (the summarizer was unavailable):\n\n' + '\n\n'.join(
        parts
    )
    return counter.truncate_text(text, max_tokens)


def _trim(counter: TokenCounter, text: str, tokens: int = _ITEM_TOKENS) -> str:
    text = ' '.join(text.split())
    return counter.truncate_text(text, tokens) if len(text) > tokens else text


def _fit(counter: TokenCounter, items: list[str], budget: int) -> str:
    omitted = fit_suffix([counter.count_text(item) + 2 for item in items], budget, at_least=0)
    kept = [f'- {item}' for item in items[omitted:]]
    if omitted:
        kept.insert(0, f'- ({omitted} earlier item(s) left out)')
    return '\n'.join(kept) or 'none'

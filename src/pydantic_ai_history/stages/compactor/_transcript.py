"""The evicted messages as the plain-text transcript the summarizer (or the fallback) reads.

One `TranscriptUnit` per history unit, so chunks and cuts fall on unit boundaries. Token counts come from
the counter's content memo (the strings were counted when the history was estimated), so rendering does
not tokenize the history again; framing labels are estimated from their length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..._compat import (
    COMPACTION_PART,
    FILE_PART,
    NATIVE_TOOL_CALL_PARTS,
    NATIVE_TOOL_RETURN_PARTS,
    RETRY_FEEDBACK_PART,
    ModelMessage,
    ModelRequest,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    is_media,
    json_text,
    media_type_of,
)
from ...pinning import marker_kind
from ...tokens import TokenCounter
from ...units import Unit
from ._summary_message import summary_text

__all__ = ('TranscriptUnit', 'content_text', 'first_user_text', 'render_units')


@dataclass(frozen=True)
class TranscriptUnit:
    """The transcript of one unit: its text, its (raw tokenizer) size, and how many messages it stands for."""

    text: str
    tokens: int
    messages: int


@dataclass(frozen=True)
class _Renderer:
    counter: TokenCounter
    cap: int | None
    system_prompts: bool = True

    def piece(self, label: str, body: str, *, capped: bool = True) -> tuple[str, int]:
        tokens = self.counter.count_text(body)
        if capped and self.cap is not None and tokens > self.cap:
            body = self.counter.truncate_text(body, self.cap, head_fraction=0.5)
            tokens = self.cap
        return f'{label}{body}', tokens + len(label) // 3 + 1

    def message(self, message: ModelMessage) -> tuple[list[str], int]:
        lines: list[str] = []
        tokens = 0
        kind = marker_kind(message)
        if kind == 'summary':
            text, n = self.piece('Earlier summary:\n', summary_text(message) or '', capped=False)
            return [text], n
        if kind == 'window':
            return ['[some earlier messages had been removed to fit the context window]'], 12
        for part in message.parts:
            rendered = self.part(part) if isinstance(message, ModelRequest) else self.response_part(part)
            if rendered is not None:
                lines.append(rendered[0])
                tokens += rendered[1]
        return lines, tokens

    def part(self, part: Any) -> tuple[str, int] | None:
        if isinstance(part, SystemPromptPart):
            return self.piece('System: ', part.content, capped=False) if self.system_prompts else None
        if isinstance(part, UserPromptPart):
            return self.piece('User: ', content_text(part.content), capped=False)
        if isinstance(part, ToolReturnPart):
            failed = getattr(part, 'outcome', 'success') not in (None, 'success')
            label = f'Tool result {part.tool_name}{" [error]" if failed else ""}: '
            return self.piece(label, content_text(part.content))
        if isinstance(part, RetryPromptPart) or (
            RETRY_FEEDBACK_PART is not None and isinstance(part, RETRY_FEEDBACK_PART)
        ):
            name = getattr(part, 'tool_name', None)
            return self.piece(
                f'Error sent back to the model{f" ({name})" if name else ""}: ', part.model_response()
            )
        if COMPACTION_PART is not None and isinstance(part, COMPACTION_PART):
            return self.piece('Earlier summary:\n', part.content or '', capped=False)
        return None  # framework bookkeeping parts carry no conversation content

    def response_part(self, part: Any) -> tuple[str, int] | None:
        if isinstance(part, TextPart):
            return self.piece('Assistant: ', part.content, capped=False)
        if isinstance(part, ToolCallPart) or isinstance(part, NATIVE_TOOL_CALL_PARTS):  # noqa: SIM101
            args = part.args if isinstance(part.args, str) else content_text(part.args or {})
            return self.piece(f'Assistant called {part.tool_name} with: ', args)
        if isinstance(part, NATIVE_TOOL_RETURN_PARTS):
            return self.piece(f'Built-in tool {part.tool_name} returned: ', content_text(part.content))
        if FILE_PART is not None and isinstance(part, FILE_PART):
            return f'[assistant produced a file: {media_type_of(part.content) or "?"}]', 10
        if COMPACTION_PART is not None and isinstance(part, COMPACTION_PART):
            return self.piece('Provider summary: ', part.content or '[opaque]')
        return None  # thinking is the model's scratchpad; its conclusions are in the text and calls


def render_units(
    messages: Sequence[ModelMessage],
    units: Sequence[Unit],
    counter: TokenCounter,
    *,
    tool_result_max_tokens: int | None,
    system_prompts: bool = True,
) -> list[TranscriptUnit]:
    """Render each unit's messages; tool results and call arguments are cut to `tool_result_max_tokens`.

    `None` renders them whole (the pinned section of a summary); `system_prompts=False` leaves system prompt
    parts out (the summary message keeps them as parts).
    """
    renderer = _Renderer(counter, tool_result_max_tokens, system_prompts)
    rendered: list[TranscriptUnit] = []
    for unit in units:
        lines: list[str] = []
        tokens = 0
        for message in messages[unit.start : unit.end]:
            message_lines, n = renderer.message(message)
            lines.extend(message_lines)
            tokens += n
        if lines:
            rendered.append(TranscriptUnit('\n'.join(lines), tokens, unit.end - unit.start))
    return rendered


def content_text(content: Any) -> str:
    """A part's content as text: strings as they are, media as a placeholder, anything else as JSON."""
    if content is None:
        return ''
    if isinstance(content, str):
        return content
    if is_media(content):
        return f'[{media_type_of(content) or "file"}]'
    if isinstance(content, (list, tuple)):
        return '\n'.join(content_text(item) for item in content if type(item).__name__ != 'CachePoint')
    return json_text(content)


def first_user_text(messages: Sequence[ModelMessage]) -> str | None:
    """The text of the first user prompt that is not one of our own messages: the original task."""
    for message in messages:
        if isinstance(message, ModelRequest) and marker_kind(message) is None:
            texts = [content_text(p.content) for p in message.parts if isinstance(p, UserPromptPart)]
            if texts:
                return '\n'.join(texts)
    return None

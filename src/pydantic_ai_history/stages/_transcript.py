"""Removed messages as the transcript the summarizer (or the fallback) reads and the spill store keeps.

Every part becomes one record framed by `<msg-NONCE ...>` tags, NONCE drawn afresh per transcript and absent
from its content: whatever a user or tool wrote stays inside its record, and roles and tool names come from
the part's type, never from content. One `TranscriptUnit` per history unit, so cuts fall on unit boundaries;
token counts come from the counter's memo, so rendering does not tokenize the history again.
"""

from __future__ import annotations

import functools
import io
import itertools
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .._compat import (
    CACHE_POINTS,
    COMPACTION_PART,
    FILE_PART,
    NATIVE_TOOL_CALL_PARTS,
    NATIVE_TOOL_RETURN_PARTS,
    RETRY_FEEDBACK_PART,
    is_media,
    is_request_scoped,
    media_type_of,
)
from ..messages._clock import replay_safe_token
from ..messages._marks import OPENINGS, marker_kind, part_kinds, readback_tool, strip_seal
from ..messages._nesting import json_text
from ..messages._utf8 import from_utf8, utf8
from ..messages.units import Unit
from ..tokens import TokenCounter

_NONCE_BYTES = 4
_READ_CALL = re.compile(r'[A-Za-z0-9_-]+\(artifact_id="([^"\n]+)"')
"""A read-back call in a note of ours, whatever the tool is named (it may have been renamed since)."""
_TOOL_NAME = re.compile(r'[^A-Za-z0-9_.:-]')


@dataclass(frozen=True)
class TranscriptUnit:
    """The transcript of one unit: its text, its (raw tokenizer) size, and how many messages it stands for."""

    source: str | bytes
    """The unit's text, or the UTF-8 transcript it sits in at `span` (one per rendering)."""
    tokens: int
    messages: int
    nonce: str = ''
    """The nonce of the records in `text` (the same for every unit of one transcript); '' for a unit that is
    no rendering of records."""
    span: tuple[int, int] = (0, 0)
    """Where the unit's text sits in `source` when that is the shared transcript (byte offsets)."""

    @property
    def text(self) -> str:
        """The unit's text (decoded from the shared transcript on each read: the transcript is held once)."""
        if isinstance(self.source, str):
            return self.source
        start, end = self.span
        return from_utf8(self.source[start:end])

    def record_texts(self, counter: TokenCounter) -> Iterator[tuple[str, int]]:
        """Each record of `text` and its size: where a unit too large for one summarizer request is divided.
        Found by the nonce's closing tag here only: few units are ever divided."""
        if not self.nonce:
            return
        text = self.text
        closing = f'</msg-{self.nonce}>'
        start = 0
        while start < len(text):
            end = text.find(closing, start)
            end = len(text) if end < 0 else end + len(closing)
            record = text[start:end]
            yield record, counter.count_text(record)
            start = end + 1  # the newline between two records


def transcript_preamble(previous: Sequence[str], gone: Sequence[str] = ()) -> str | None:
    """The opening line naming the `previous` transcripts (newest first), so one reference reaches every
    earlier removal, and saying the `gone` ones cannot be read; None when there are neither."""
    lines: list[str] = []
    if previous:
        # more than one only for a history written before transcripts were chained, or with several notes
        links = ', '.join(f'{readback_tool()}(artifact_id="{p}")' for p in reversed(previous))
        where = 'the earlier transcript' if len(previous) == 1 else 'the earlier transcripts, newest first'
        lines.append(f'The messages before these are in {where}: {links}.')
    if gone:
        lines.append(NO_LONGER_STORED)
    return ' '.join(lines) or None


NO_LONGER_STORED = (
    'The transcript of earlier messages is no longer stored (the store removed it, as its retention allows): '
    'the summary is all that is left of them.'
)
"""What a transcript or a summary says in place of an earlier transcript the store no longer holds."""


def transcript_data(units: Sequence[TranscriptUnit], preamble: str | None) -> bytes:
    """The stored transcript: `preamble` and the units joined by blank lines, UTF-8 (as rendered, when the
    units were rendered with that preamble)."""
    shared = units[0].source if units else None
    if isinstance(shared, bytes) and _is_whole(shared, units, preamble):
        return shared
    buffer = io.BytesIO()  # a unit at a time: `bytes.join` would hold every encoded unit and the result
    texts = (unit.text for unit in units)
    for number, text in enumerate(itertools.chain([preamble] if preamble else [], texts)):
        buffer.write(_SEPARATOR if number else b'')
        buffer.write(utf8(text))
    return buffer.getvalue()


def _is_whole(data: bytes, units: Sequence[TranscriptUnit], preamble: str | None) -> bool:
    """Whether `units` are all of `data`, after exactly `preamble`."""
    head = (utf8(preamble) + _SEPARATOR) if preamble else b''
    position = len(head)
    for unit in units:
        if unit.source is not data or unit.span[0] != position:
            return False
        position = unit.span[1] + len(_SEPARATOR)
    return data.startswith(head) and position - len(_SEPARATOR) == len(data)


_SEPARATOR = b'\n\n'


def new_nonce() -> str:
    """A fresh random nonce for one transcript's record tags (a replay-safe one inside a durable workflow)."""
    return replay_safe_token(_NONCE_BYTES) or secrets.token_hex(_NONCE_BYTES)


class _NonceInContent(Exception):
    """The drawn nonce occurs in the content: draw another and render again."""


@functools.lru_cache(maxsize=1_024)
def _tool(name: str | None) -> str:
    return f' tool="{_TOOL_NAME.sub("_", name)[:80]}"' if name else ''


Cut = Callable[[str, int], str]
"""How a record body over the cap is shortened to at most about `cap` tokens (default: head and tail)."""


@dataclass(frozen=True)
class _Renderer:
    counter: TokenCounter
    cap: int | None
    nonce: str
    system_prompts: bool = True
    cut: Cut | None = None

    def record(
        self, role: str, body: str, *, tool: str | None = None, capped: bool = True
    ) -> tuple[str, int]:
        if self.nonce in body:
            raise _NonceInContent
        tokens = self.counter.count_text(body)
        if capped and self.cap is not None and tokens > self.cap:
            if self.cut is None:
                body = self.counter.truncate_text(body, self.cap, head_fraction=0.5)
                tokens = self.cap
            else:
                body = self.cut(body, self.cap)
                tokens = self.counter.count_text(body)
        opening = f'<msg-{self.nonce} role="{role}"{_tool(tool)}>\n'
        closing = f'\n</msg-{self.nonce}>'
        # tags are counted (once each, memoized), not estimated: a random nonce can take twice the tokens a
        # length estimate gives; one more token stands for the newline joining two records
        framing = self.counter.count_text(opening) + self.counter.count_text(closing) + 1
        return f'{opening}{body}{closing}', tokens + framing

    def message(self, message: ModelMessage) -> list[tuple[str, int]]:
        if isinstance(message, ModelRequest):
            rendered_parts = [
                self.part(part) if kind is None else self.own_part(part, kind)
                for part, kind in zip(message.parts, part_kinds(message), strict=True)
            ]
        else:
            rendered_parts = [self.response_part(part) for part in message.parts]
        return [rendered for rendered in rendered_parts if rendered is not None]

    def own_part(self, part: Any, kind: str) -> tuple[str, int] | None:
        """A part this package wrote (recognised by identity, never by its text)."""
        content = getattr(part, 'content', None)
        text = strip_seal(content) if isinstance(content, str) else content_text(content)
        if kind == 'window':
            # the note's own wording is not repeated; the transcript it names is, so the chain stays walkable
            stored = named_transcripts(text)
            where = f'; their transcript: {read_call(stored[0])}' if stored else ''
            removed = 'some earlier messages had been removed to fit the context window'
            return self.record('note', f'{removed}{where}')
        if kind == 'summary':
            opening = OPENINGS['summary']
            text = text[len(opening) :].lstrip('\n') if text.startswith(opening) else text
            return self.record('earlier_summary', text, capped=False)
        if kind in ('pinned', 'transcript', 'trail'):
            return self.record('earlier_summary_pinned', text, capped=False)
        if kind == 'recall':  # copies of stored passages: the originals are in the transcript already
            return self.record(
                'note', 'stored passages of the earlier conversation were shown with the question'
            )
        return self.part(part)  # an artifact's text stands for what the user or the tool sent

    def part(self, part: Any) -> tuple[str, int] | None:
        if isinstance(part, SystemPromptPart):
            if not self.system_prompts or is_request_scoped(part):  # a nudge for one request: not content
                return None
            return self.record('system', part.content, capped=False)
        if isinstance(part, UserPromptPart):
            return self.record('user', content_text(part.content), capped=False)
        if isinstance(part, ToolReturnPart):
            failed = getattr(part, 'outcome', 'success') not in (None, 'success')
            role = 'tool_error' if failed else 'tool_result'
            return self.record(role, content_text(part.content), tool=part.tool_name)
        if isinstance(part, RetryPromptPart) or (
            RETRY_FEEDBACK_PART is not None and isinstance(part, RETRY_FEEDBACK_PART)
        ):
            name = getattr(part, 'tool_name', None)
            return self.record('error_sent_to_assistant', part.model_response(), tool=name)
        if COMPACTION_PART is not None and isinstance(part, COMPACTION_PART):
            return self.record('earlier_summary', part.content or '', capped=False)
        return None  # framework bookkeeping parts carry no conversation content

    def response_part(self, part: Any) -> tuple[str, int] | None:
        if isinstance(part, TextPart):
            return self.record('assistant', part.content, capped=False)
        if isinstance(part, ToolCallPart) or isinstance(part, NATIVE_TOOL_CALL_PARTS):  # noqa: SIM101
            args = part.args if isinstance(part.args, str) else content_text(part.args or {})
            return self.record('assistant_tool_call', args, tool=part.tool_name)
        if isinstance(part, NATIVE_TOOL_RETURN_PARTS):
            return self.record('builtin_tool_result', content_text(part.content), tool=part.tool_name)
        if FILE_PART is not None and isinstance(part, FILE_PART):
            return self.record('assistant_file', f'[a file: {media_type_of(part.content) or "?"}]')
        if COMPACTION_PART is not None and isinstance(part, COMPACTION_PART):
            return self.record('provider_summary', part.content or '[opaque]')
        return None  # thinking is the model's scratchpad; its conclusions are in the text and calls


def render_units(
    messages: Sequence[ModelMessage],
    units: Sequence[Unit],
    counter: TokenCounter,
    *,
    tool_result_max_tokens: int | None,
    system_prompts: bool = True,
    preamble: str | None = None,
    cut: Cut | None = None,
) -> list[TranscriptUnit]:
    """Render each unit's messages as framed records sharing one nonce; tool results and call arguments
    are cut to `tool_result_max_tokens` (None: whole); `system_prompts=False` leaves system prompts out;
    empty units are left out."""
    rendered = render_each_unit(
        messages,
        units,
        counter,
        tool_result_max_tokens=tool_result_max_tokens,
        system_prompts=system_prompts,
        preamble=preamble,
        cut=cut,
    )
    return [unit for unit in rendered if unit is not None]


def render_each_unit(
    messages: Sequence[ModelMessage],
    units: Sequence[Unit],
    counter: TokenCounter,
    *,
    tool_result_max_tokens: int | None,
    system_prompts: bool = True,
    preamble: str | None = None,
    cut: Cut | None = None,
) -> list[TranscriptUnit | None]:
    """`render_units`, one entry per unit (None: nothing to render), each encoded as it is rendered into one
    transcript opening with `preamble`, so the text is held once, as the bytes the store keeps."""
    while True:
        renderer = _Renderer(counter, tool_result_max_tokens, new_nonce(), system_prompts, cut)
        try:
            return _render(messages, units, renderer, preamble)
        except _NonceInContent:
            continue


def _render(
    messages: Sequence[ModelMessage], units: Sequence[Unit], renderer: _Renderer, preamble: str | None
) -> list[TranscriptUnit | None]:
    buffer = io.BytesIO()
    if preamble:
        buffer.write(utf8(preamble))
    placed: list[tuple[int, int, int, int] | None] = []
    for unit in units:
        records = [
            record for message in messages[unit.start : unit.end] for record in renderer.message(message)
        ]
        if not records:
            placed.append(None)
            continue
        if buffer.tell():
            buffer.write(_SEPARATOR)
        start = buffer.tell()
        buffer.write(utf8('\n'.join(text for text, _ in records)))
        tokens = sum(n for _, n in records)
        placed.append((start, buffer.tell(), tokens, unit.end - unit.start))
    data = buffer.getvalue()  # CPython hands over the buffer itself, without a copy
    return [
        None
        if entry is None
        else TranscriptUnit(data, entry[2], entry[3], renderer.nonce, span=(entry[0], entry[1]))
        for entry in placed
    ]


def split_record(record: str, pieces: Sequence[str]) -> list[str]:
    """`record` (one framed record) again as one record per piece of its body, each marked `part="i/n"`."""
    opening, _, rest = record.partition('\n')
    _, _, closing = rest.rpartition('\n')
    opening = opening[:-1]  # the closing '>' of the opening tag
    count = len(pieces)
    return [f'{opening} part="{i}/{count}">\n{piece}\n{closing}' for i, piece in enumerate(pieces, start=1)]


def record_body(record: str) -> str:
    """The body of one framed record."""
    _, _, rest = record.partition('\n')
    body, _, _ = rest.rpartition('\n')
    return body


def content_text(content: Any) -> str:
    """A part's content as text: strings as they are, media as a placeholder, anything else as JSON."""
    if content is None:
        return ''
    if isinstance(content, str):
        return content
    if is_media(content):
        return f'[{media_type_of(content) or "file"}]'
    if isinstance(content, (list, tuple)):
        return '\n'.join(content_text(item) for item in content if not isinstance(item, CACHE_POINTS))
    return json_text(content)


def read_call(artifact_id: str) -> str:
    """How a reference line tells the model to read a stored transcript back."""
    return f'{readback_tool()}(artifact_id="{artifact_id}", query=...)'


def named_transcripts(text: str) -> list[str]:
    """The artifact ids a text of ours names in `read_artifact(artifact_id="...")` calls, in order."""
    return _READ_CALL.findall(text)


def first_user_text(messages: Sequence[ModelMessage]) -> str | None:
    """The text of the first user prompt that is not one of our own messages: the original task."""
    for message in messages:
        if isinstance(message, ModelRequest) and marker_kind(message) is None:
            kinds = part_kinds(message)
            texts = [
                content_text(p.content)
                for p, kind in zip(message.parts, kinds, strict=True)
                if isinstance(p, UserPromptPart) and kind is None
            ]
            if texts:
                return '\n'.join(texts)
    return None

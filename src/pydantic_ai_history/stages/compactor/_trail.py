"""The summary's trail: the exact details of what a summary replaces, written by code beside the prose.

Models paraphrase ids, amounts and paths away ("the reservation ID"); the trail keeps constraints, paths,
commands, errors, identifiers and amounts verbatim, each once. It is data kept in the message's metadata (a
sealed part where there is none), carried forward without parsing the summary. When it does not fit its share
of the target, kinds take turns, newest first, so no kind crowds out the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Literal

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ...messages._marks import part_kinds
from ...tokens import TokenCounter
from .._transcript import content_text

TrailKind = Literal['constraint', 'path', 'command', 'error', 'identifier', 'amount']
TrailEntry = tuple[TrailKind, str]
"""One exact detail: its kind and its text, exactly as it appeared."""

TRAIL_HEADING = 'Exact details of the summarized messages (verbatim):'
"""The first line of the trail as the model reads it."""

_LABELS: dict[TrailKind, str] = {
    'constraint': "the user's constraints",
    'path': 'paths',
    'command': 'commands',
    'error': 'errors',
    'identifier': 'identifiers',
    'amount': 'amounts',
}
_KIND_OF_LABEL = {f'{label}:': kind for kind, label in _LABELS.items()}
_ORDER: tuple[TrailKind, ...] = ('constraint', 'path', 'command', 'error', 'identifier', 'amount')

_PATH = re.compile(r'(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w-]+(?:\.[A-Za-z0-9]{1,8})+(?![\w/])')
_ERROR = re.compile(r'\b[A-Z][A-Za-z]*(?:Error|Exception)\b(?::[^\n]{1,100})?')
_IDENTIFIER = re.compile(
    r'(?<![\w./-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*(?![\w/-]|\.\w)'
)
_AMOUNT = re.compile(
    r'(?<![\w.,/:-])[$€£]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,/:-]|\.\d)'
    r'|(?<![\w.,/:-])[$€£]?\d+(?:\.\d+)?(?![\w,/:-]|\.\d)'
)
_SENTENCE = re.compile(r'[^.!?\n]+[.!?]?')
_CONSTRAINT = re.compile(
    r"\b(?:must|should|shouldn't|don't|do not|never|always|only|make sure|without|at least|at most|"
    r'instead|prefer|need to|needs to|not allowed|cannot|can\'t|no more than|unless)\b',
    re.IGNORECASE,
)
_DATE = re.compile(r'\d{4}-\d{2}-\d{2}')
_OUR_ID = re.compile(r'art_[0-9a-f]{16,}')
_COMMAND_ARGS = frozenset({'command', 'cmd', 'script', 'shell'})
_MAX_VALUE_CHARS = 200
_PER_MESSAGE = 60
"""Details taken from one part at most (a long listing does not fill the trail on its own)."""


def extract_trail(messages: Sequence[ModelMessage], *, known: str = '') -> list[TrailEntry]:
    """The details of `messages` in order of appearance, each once, leaving out those `known` (the lowercased
    text of what stays verbatim) already holds and the package's own notes."""
    seen: set[str] = set()
    found: list[TrailEntry] = []
    for source, text in _texts(messages):
        taken = 0
        for kind, value in _details(text, source):
            key = value.lower()
            if key in seen or key in known or _OUR_ID.search(value):
                continue
            seen.add(key)
            found.append((kind, value))
            taken += 1
            if taken >= _PER_MESSAGE:
                break
    return found


def prune_trail(
    earlier: Sequence[TrailEntry], new: Sequence[TrailEntry], *, budget: int, counter: TokenCounter
) -> list[TrailEntry]:
    """The carried trail and the new details within `budget` tokens, in order (carried first), each kind
    taking its turn, newest first."""
    unique: dict[str, TrailEntry] = {}
    for entry in (*earlier, *new):
        unique.setdefault(entry[1].lower(), entry)
    merged = list(unique.values())
    if budget <= 0 or not merged:
        return []
    queues = {kind: [i for i in reversed(range(len(merged))) if merged[i][0] == kind] for kind in _ORDER}
    chosen: set[int] = set()
    used = counter.count_text(TRAIL_HEADING) + 2 * len(_ORDER)
    while any(queues.values()):
        for kind in _ORDER:
            if not queues[kind]:
                continue
            index = queues[kind].pop(0)
            cost = counter.count_text(merged[index][1]) + 2  # the line's indent and newline
            if used + cost <= budget:
                chosen.add(index)
                used += cost
    return [merged[i] for i in sorted(chosen)]


def render_trail(entries: Sequence[TrailEntry]) -> str:
    if not entries:
        return ''
    lines = [TRAIL_HEADING]
    for kind in _ORDER:
        values = [value for k, value in entries if k == kind]
        if values:
            lines.append(f'{_LABELS[kind]}:')
            lines.extend(f'  {value}' for value in values)
    return '\n'.join(lines)


def parse_trail(text: str) -> list[TrailEntry]:
    """Entries from `render_trail`'s text (where messages have no metadata for them)."""
    entries: list[TrailEntry] = []
    kind: TrailKind | None = None
    for line in text.split('\n'):
        if line.startswith('  ') and kind is not None:
            entries.append((kind, line[2:]))
        else:
            kind = _KIND_OF_LABEL.get(line)
    return entries


def known_text(messages: Sequence[ModelMessage]) -> str:
    """The lowercased text of `messages` (what stays verbatim): a detail it holds needs no trail entry."""
    return '\n'.join(text for _, text in _texts(messages)).lower()


def trail_from_data(value: object) -> tuple[TrailEntry, ...]:
    """Entries from `[kind, value]` pairs (message metadata, cache); anything else is left out."""
    if not isinstance(value, (list, tuple)):
        return ()
    entries: list[TrailEntry] = []
    for item in value:
        if isinstance(item, (list, tuple)) and len(item) == 2 and item[0] in _ORDER:
            entries.append((item[0], str(item[1])))
    return tuple(entries)


def _texts(messages: Sequence[ModelMessage]) -> Iterator[tuple[str, str]]:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part, kind in zip(message.parts, part_kinds(message), strict=True):
                if kind is not None:
                    continue
                if isinstance(part, UserPromptPart):
                    yield 'user', content_text(part.content)
                elif isinstance(part, ToolReturnPart):
                    yield 'tool', content_text(part.content)
            continue
        for response_part in message.parts:
            if isinstance(response_part, TextPart):
                yield 'assistant', response_part.content
            elif isinstance(response_part, ToolCallPart):
                yield from _call_texts(response_part)


def _call_texts(part: ToolCallPart) -> Iterator[tuple[str, str]]:
    try:
        args = part.args_as_dict()
    except Exception:  # arguments that are not JSON
        args = {}
    for name, value in args.items():
        if isinstance(value, str) and name.lower() in _COMMAND_ARGS:
            yield 'command', value
    yield 'call', part.args if isinstance(part.args, str) else content_text(part.args or {})


def _details(text: str, source: str) -> Iterator[TrailEntry]:
    if source == 'command':
        line = text.strip().split('\n', 1)[0].strip()
        if ' ' in line and len(line) <= _MAX_VALUE_CHARS:
            yield 'command', line
        return
    if source == 'user':
        for match in _SENTENCE.finditer(text):
            sentence = match.group().strip()
            if _CONSTRAINT.search(sentence) and 12 <= len(sentence) <= _MAX_VALUE_CHARS:
                yield 'constraint', sentence
    taken: list[tuple[int, int]] = []
    patterns: tuple[tuple[TrailKind, re.Pattern[str]], ...] = (
        ('path', _PATH),
        ('error', _ERROR),
        ('identifier', _IDENTIFIER),
        ('amount', _AMOUNT),
    )
    for kind, pattern in patterns:
        for match in pattern.finditer(text):
            if any(start <= match.start() < end for start, end in taken):
                continue  # inside a path or an error already taken
            value = _trimmed(kind, match.group(), text[match.end() : match.end() + 1])
            if value is None or text.startswith('":', match.end()):  # a JSON key names a field
                continue
            taken.append((match.start(), match.end()))
            yield kind, value


def _trimmed(kind: TrailKind, value: str, following: str) -> str | None:
    """The value as a detail (ending on a whole word), or None when it is too slight to keep."""
    value = value.strip()
    if kind == 'error':
        if ':' not in value and len(value) <= 9:
            return None
        if following[:1].isalnum() and value[-1:].isalnum():
            value = value[: value.rfind(' ')] if ' ' in value else value
        return value.rstrip(' ,;:')
    if kind == 'identifier':
        return value if len(value) >= 5 and not _DATE.match(value) else None
    if kind == 'amount':
        digits = sum(c.isdigit() for c in value)
        return value if digits >= 3 or '.' in value or value[:1] in '$€£' else None
    return value

"""The summary's trail: the exact details of what a summary replaces, written by code beside the prose.

Models paraphrase ids, amounts and paths away ("the reservation ID"); the trail keeps constraints, paths,
commands, errors, identifiers and amounts verbatim, each with what it is about: the field it was in and the
object that field belongs to (`$300 — gift_card_7219 balance`), the call that sent it, or the words around it
in its sentence. "$300" alone cannot answer "how much is left on gift card X?"; "$300 — gift_card_7219
balance" can. Each value is kept once, with what it was about where it first appeared (an about that many
values share, a listing's repeated words, tells none of them apart and is left out). It is data kept in the
message's metadata (a sealed part where there is none), carried forward without parsing the summary. When it
does not fit its share of the target, kinds take turns, newest first, so no kind crowds out the others.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, Literal, NamedTuple

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from ...messages._marks import part_kinds
from ...messages._nesting import value_too_deep
from ...tokens import TokenCounter
from .._transcript import content_text

TrailKind = Literal['constraint', 'path', 'command', 'error', 'identifier', 'amount']


class TrailEntry(NamedTuple):
    """One exact detail."""

    kind: TrailKind
    """What the detail is."""
    value: str
    """The detail, exactly as it appeared."""
    about: str = ''
    """What it is about: `gift_card_7219 balance` (the field and the object it belongs to), `book_flight
    payment_id` (the call that sent it), `I want to pay … with the gift card` (its sentence, the value's place
    marked); empty for constraints and commands, which say it themselves."""


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
_WORDS_BEFORE, _WORDS_AFTER = 3, 2
"""The words of a value's sentence that say what it is about, before and after it."""
_MAX_ABOUT_CHARS = 48
_SHARED_ABOUT = 2
"""Values one about may describe; later ones go without it (it no longer tells them apart)."""
_SENTENCE_END = re.compile(r'[.!?](?=\s|$)|\n')
_MAX_JSON_CHARS = 1_000_000
"""A tool return's text is read as JSON (its fields name what each value is) up to this size."""
_ID_FIELDS = ('id', 'name', 'title', 'code')
_ID_SUFFIXES = ('_id', '_number', '_code', '_name')


def extract_trail(messages: Sequence[ModelMessage], *, known: str = '') -> list[TrailEntry]:
    """The details of `messages` in order of appearance with what each is about, each once, leaving out those
    `known` (the lowercased text of what stays verbatim) already holds and the package's own notes."""
    seen: set[str] = set()
    abouts: Counter[str] = Counter()
    found: list[TrailEntry] = []
    for source in _sources(messages):
        taken = 0
        for entry in _entries(source):
            key = entry.value.lower()
            if key in seen or key in known or _OUR_ID.search(entry.value):
                continue
            seen.add(key)
            abouts[entry.about] += 1
            found.append(entry if abouts[entry.about] <= _SHARED_ABOUT else entry._replace(about=''))
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
        unique.setdefault(entry.value.lower(), entry)
    merged = list(unique.values())
    if budget <= 0 or not merged:
        return []
    queues = {kind: [i for i in reversed(range(len(merged))) if merged[i].kind == kind] for kind in _ORDER}
    chosen: set[int] = set()
    used = counter.count_text(TRAIL_HEADING) + 2 * len(_ORDER)
    while any(queues.values()):
        for kind in _ORDER:
            if not queues[kind]:
                continue
            index = queues[kind].pop(0)
            cost = counter.count_text(_line(merged[index])) + 1  # the line's newline
            if used + cost <= budget:
                chosen.add(index)
                used += cost
    return [merged[i] for i in sorted(chosen)]


def render_trail(entries: Sequence[TrailEntry]) -> str:
    if not entries:
        return ''
    lines = [TRAIL_HEADING]
    for kind in _ORDER:
        of_kind = [entry for entry in entries if entry.kind == kind]
        if of_kind:
            lines.append(f'{_LABELS[kind]}:')
            lines.extend(_line(entry) for entry in of_kind)
    return '\n'.join(lines)


def _line(entry: TrailEntry) -> str:
    return f'  {entry.value}{_ABOUT}{entry.about}' if entry.about else f'  {entry.value}'


_ABOUT = ' — '
"""Between a value and what it is about, in the trail's text."""


def parse_trail(text: str) -> list[TrailEntry]:
    """Entries from `render_trail`'s text (where messages have no metadata for them)."""
    entries: list[TrailEntry] = []
    kind: TrailKind | None = None
    for line in text.split('\n'):
        if line.startswith('  ') and kind is not None:
            value, _, about = line[2:].rpartition(_ABOUT) if _ABOUT in line else (line[2:], '', '')
            entries.append(TrailEntry(kind, value, about))
        else:
            kind = _KIND_OF_LABEL.get(line)
    return entries


def known_text(messages: Sequence[ModelMessage]) -> str:
    """The lowercased text of `messages` (what stays verbatim): a detail it holds needs no trail entry."""
    return '\n'.join(source.text for source in _sources(messages)).lower()


def trail_from_data(value: object) -> tuple[TrailEntry, ...]:
    """Entries from `[kind, value, about]` lists (message metadata, cache; `[kind, value]` from before details
    had their meaning); anything else is left out."""
    if not isinstance(value, (list, tuple)):
        return ()
    entries: list[TrailEntry] = []
    for item in value:
        if isinstance(item, (list, tuple)) and len(item) in (2, 3) and item[0] in _ORDER:
            entries.append(TrailEntry(item[0], str(item[1]), str(item[2]) if len(item) == 3 else ''))
    return tuple(entries)


class _Source(NamedTuple):
    """One text of a message to take details from."""

    kind: Literal['user', 'assistant', 'tool', 'call', 'command']
    text: str
    tool: str = ''
    """The tool that returned it or was called with it."""
    content: Any = None
    """The same content as it was sent (a tool return's content, a call's arguments), read as data when it
    is structured."""


def _sources(messages: Sequence[ModelMessage]) -> Iterator[_Source]:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part, kind in zip(message.parts, part_kinds(message), strict=True):
                if kind is not None:
                    continue
                if isinstance(part, UserPromptPart):
                    yield _Source('user', content_text(part.content))
                elif isinstance(part, ToolReturnPart):
                    yield _Source('tool', content_text(part.content), part.tool_name, part.content)
            continue
        for response_part in message.parts:
            if isinstance(response_part, TextPart):
                yield _Source('assistant', response_part.content)
            elif isinstance(response_part, ToolCallPart):
                yield from _call_sources(response_part)


def _call_sources(part: ToolCallPart) -> Iterator[_Source]:
    try:
        args = part.args_as_dict()
    except Exception:  # arguments that are not JSON
        args = {}
    for name, value in args.items():
        if isinstance(value, str) and name.lower() in _COMMAND_ARGS:
            yield _Source('command', value, part.tool_name)
    text = part.args if isinstance(part.args, str) else content_text(part.args or {})
    yield _Source('call', text, part.tool_name, args or None)


def _data_of(source: _Source) -> Any:
    """The source's content as data (a dict or a list, not too large or deep to walk): as it was sent, or its
    text read as JSON; else None."""
    data = source.content
    if not isinstance(data, (dict, list)):
        text = source.text
        if source.kind != 'tool' or not text.lstrip().startswith(('{', '[')) or len(text) > _MAX_JSON_CHARS:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return None
    return data if isinstance(data, (dict, list)) and not value_too_deep(data) else None


def _entries(source: _Source) -> Iterator[TrailEntry]:
    if source.kind == 'command':
        line = source.text.strip().split('\n', 1)[0].strip()
        if ' ' in line and len(line) <= _MAX_VALUE_CHARS:
            yield TrailEntry('command', line)
        return
    data = _data_of(source)
    if data is not None:
        prefix = source.tool if source.kind == 'call' else ''
        for label, leaf in _fields(data, prefix):
            if len(leaf) > _MAX_VALUE_CHARS:  # prose in a field: its sentences say what a value is
                yield from _text_entries(leaf, 'tool', label)
            else:
                for kind, value, _ in _details(leaf, 'tool'):
                    yield TrailEntry(kind, value, label)
        return
    yield from _text_entries(source.text, source.kind, source.tool if source.kind == 'tool' else '')


def _text_entries(text: str, source: str, label: str) -> Iterator[TrailEntry]:
    for kind, value, start in _details(text, source):
        about = '' if kind == 'constraint' else _around(text, start, start + len(value))
        if label and kind == 'error':
            about = label
        yield TrailEntry(kind, value, about)


def _fields(data: Any, prefix: str) -> Iterator[tuple[str, str]]:
    """Each scalar of `data` as text with the label of what it is: `prefix` (the tool a call went to), the
    identifier of the object it belongs to (an `id`/`name`/`..._id` field of its own, or the key it is filed
    under) and its field."""
    stack: list[tuple[Any, str, str]] = [(data, '', '')]
    while stack:
        value, key, owner = stack.pop()
        if isinstance(value, dict):
            owner = _owner_of(value) or owner
            for child_key, child in reversed(list(value.items())):
                name = str(child_key)
                child_owner = name if isinstance(child, dict) and _IDENTIFIER.fullmatch(name) else owner
                stack.append((child, name, child_owner))
        elif isinstance(value, list):
            stack.extend((item, key, owner) for item in reversed(value))
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            text = str(value)
            label = ' '.join(p for p in (prefix, owner if owner != text else '', key) if p)
            yield label[-_MAX_ABOUT_CHARS:], text


def _owner_of(record: dict[Any, Any]) -> str:
    """The identifier of a record: its first `id`-like field with a short scalar value."""
    for key, value in record.items():
        name = str(key).lower()
        if (name in _ID_FIELDS or name.endswith(_ID_SUFFIXES)) and isinstance(value, (str, int)):
            text = str(value)
            if 0 < len(text) <= 40:
                return text
    return ''


def _around(text: str, start: int, end: int) -> str:
    """The words of the value's sentence around it, the value's place marked with `…`."""
    window = max(0, start - 400)  # a sentence's few words are near: never scan a long text from its start
    starts = [m.end() for m in _SENTENCE_END.finditer(text, window, start)]
    sentence_start = starts[-1] if starts else window
    following = _SENTENCE_END.search(text, end, end + 400)
    sentence_end = following.start() if following else min(len(text), end + 400)
    before = text[sentence_start:start].split()[-_WORDS_BEFORE:]
    after = text[end:sentence_end].split()[:_WORDS_AFTER]
    about = ' '.join([*before, '…', *after]) if after else ' '.join(before)
    about = about.strip(' ,;:(')
    return about[:_MAX_ABOUT_CHARS] if about != '…' else ''


def _details(text: str, source: str) -> Iterator[tuple[TrailKind, str, int]]:
    if source == 'user':
        for match in _SENTENCE.finditer(text):
            sentence = match.group().strip()
            if _CONSTRAINT.search(sentence) and 12 <= len(sentence) <= _MAX_VALUE_CHARS:
                yield 'constraint', sentence, match.start()
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
            yield kind, value, match.start() + (len(match.group()) - len(match.group().lstrip()))


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

"""Exact facts taken from the evicted messages: the deterministic half of the probes.

Every fact is a literal substring of the text of one evicted part (file paths, identifiers, error strings,
commands, numbers, the user's constraints), with a cue (the words just before it) to ask about it. Pure
functions: no model, no store. The patterns are generic on purpose: they are not tuned to any strategy.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from .._compat import RETRY_FEEDBACK_PART
from ..stages._transcript import content_text
from ._text import contains, normalize

FactKind = Literal['path', 'identifier', 'error', 'command', 'number', 'constraint']


@dataclass(frozen=True, kw_only=True)
class Fact:
    """One exact detail of the evicted messages."""

    kind: FactKind
    """What the detail is: a file path, an identifier, an error string, a command, a number, or a constraint
    the user set."""
    value: str
    """The detail exactly as it appears in the part's text."""
    source: str
    """Where it appears: `user`, `assistant`, `tool_call:<tool>`, `tool_return:<tool>` or `retry:<tool>`."""
    cue: str
    """Up to a few words just before it on the same line (empty at the start of a line): what a probe asks
    about, without giving the answer away."""
    message: int
    """The index of its message among the evicted ones."""


_PATH = re.compile(r'(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w-]+(?:\.[A-Za-z0-9]{1,8})+(?![\w/])')
_ERROR = re.compile(r'\b[A-Z][A-Za-z]*(?:Error|Exception)\b(?::[^\n]{1,100})?')
_IDENTIFIER = re.compile(
    r'(?<![\w./-])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*(?![\w/-]|\.\w)'
)
_NUMBER = re.compile(
    r'(?<![\w.,/:-])\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w,/:-]|\.\d)|(?<![\w.,/:-])\$?\d+(?:\.\d+)?(?![\w,/:-]|\.\d)'
)
_SENTENCE = re.compile(r'[^.!?\n]+[.!?]?')
_CONSTRAINT = re.compile(
    r"\b(?:must|should|shouldn't|don't|do not|never|always|only|make sure|without|at least|at most|"
    r"instead|prefer|need to|needs to|not allowed|cannot|can't|no more than|before|unless)\b",
    re.IGNORECASE,
)
_DATE = re.compile(r'\d{4}-\d{2}-\d{2}')
_COMMAND_ARGS = frozenset({'command', 'cmd', 'script', 'shell'})
_CUE_WORDS = 6
_MAX_CONSTRAINT_CHARS = 200


def extract_facts(evicted: Sequence[ModelMessage]) -> list[Fact]:
    """Every fact in `evicted`, in order of appearance, each value once (the first occurrence)."""
    seen: set[tuple[str, str]] = set()
    facts: list[Fact] = []
    for index, message in enumerate(evicted):
        for source, text, arg in _texts(message):
            for kind, start, value in _matches(text, source, arg):
                key = (kind, normalize(value))
                if key in seen or not key[1]:
                    continue
                seen.add(key)
                facts.append(
                    Fact(kind=kind, value=value, source=source, cue=_cue(text, start), message=index)
                )
    return facts


def select_facts(facts: Sequence[Fact], kept_text: str, limit: int) -> list[Fact]:
    """At most `limit` of `facts` that the kept messages do not already hold (normalised `kept_text`): taken
    kind by kind in turn, each kind's facts taken message by message in turn (the first of each message's,
    then the second of each, ...), so no kind, stretch or long listing dominates and probes about one
    message stay few enough to tell apart."""
    fresh = [f for f in facts if not contains(kept_text, normalize(f.value))]
    spread = [_round_robin(_grouped(group, 'message')) for group in _grouped(fresh, 'kind')]
    chosen = _round_robin(spread)[:limit]
    return sorted(chosen, key=lambda f: (f.message, facts.index(f)))


def _grouped(facts: Sequence[Fact], key: Literal['kind', 'message']) -> list[list[Fact]]:
    """`facts` grouped by one of their fields, groups in order of first appearance."""
    groups: dict[object, list[Fact]] = {}
    for fact in facts:
        groups.setdefault(getattr(fact, key), []).append(fact)
    return list(groups.values())


def _round_robin(groups: Sequence[Sequence[Fact]]) -> list[Fact]:
    """The first item of each group, then the second of each, and so on."""
    rows = itertools.zip_longest(*groups)
    return [fact for row in rows for fact in row if fact is not None]


def _texts(message: ModelMessage) -> Iterator[tuple[str, str, str | None]]:
    """(source, text, argument name) for each part of `message` that carries conversation content."""
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                yield 'user', content_text(part.content), None
            elif isinstance(part, ToolReturnPart):
                yield f'tool_return:{part.tool_name}', content_text(part.content), None
            elif isinstance(part, RetryPromptPart) or (
                RETRY_FEEDBACK_PART is not None and isinstance(part, RETRY_FEEDBACK_PART)
            ):
                yield f'retry:{getattr(part, "tool_name", None) or "output"}', part.model_response(), None
        return
    for response_part in message.parts:
        if isinstance(response_part, TextPart):
            yield 'assistant', response_part.content, None
        elif isinstance(response_part, ToolCallPart):
            yield from _call_texts(response_part)


def _call_texts(part: ToolCallPart) -> Iterator[tuple[str, str, str | None]]:
    source = f'tool_call:{part.tool_name}'
    try:
        args = part.args_as_dict()
    except Exception:  # arguments that are not JSON: the model sent them as text
        args = {}
    text = part.args if isinstance(part.args, str) else content_text(part.args or {})
    for name, value in args.items():
        # as the model sees it: a command with quotes or backslashes is escaped in the arguments' JSON
        if isinstance(value, str) and name.lower() in _COMMAND_ARGS and _first_line(value) in text:
            yield source, value, name.lower()
    yield source, text, None


def _first_line(text: str) -> str:
    return text.strip().split('\n', 1)[0].strip()


def _matches(text: str, source: str, arg: str | None) -> Iterator[tuple[FactKind, int, str]]:
    """(kind, start, value) of every fact in `text`; a command argument is one fact (its first line)."""
    if arg is not None:
        first_line = _first_line(text)
        if ' ' in first_line:  # a shell command line, not an editor's sub-command like `view`
            yield 'command', text.find(first_line), first_line
        return
    if source == 'user':
        for match in _SENTENCE.finditer(text):
            sentence = match.group().strip()
            if _CONSTRAINT.search(sentence) and 12 <= len(sentence) <= _MAX_CONSTRAINT_CHARS:
                yield 'constraint', text.find(sentence, match.start()), sentence
    taken: list[tuple[int, int]] = []
    for kind, pattern in (
        ('path', _PATH),
        ('error', _ERROR),
        ('identifier', _IDENTIFIER),
        ('number', _NUMBER),
    ):
        for match in pattern.finditer(text):
            if any(start <= match.start() < end for start, end in taken):
                continue  # inside a path or an error string already taken
            value = _trimmed(kind, match.group(), text[match.end() : match.end() + 1])
            if value is None or text.startswith('":', match.end()):  # a JSON key names a field, not a fact
                continue
            taken.append((match.start(), match.end()))
            yield kind, match.start(), value  # type: ignore[misc]


def _trimmed(kind: str, value: str, following: str) -> str | None:
    """The value as a fact (ending where a word ends), or None when it is too slight to ask about."""
    value = value.strip()
    if kind == 'error':
        if ':' not in value and len(value) <= 9:
            return None
        if _word_char(following[:1]) and _word_char(value[-1:]):  # cut in a word: end at the last whole one
            value = value[: value.rfind(' ')] if ' ' in value else value
        return value.rstrip(' ,;:')
    if kind == 'identifier':
        return value if len(value) >= 5 and not _DATE.match(value) else None
    if kind == 'number':
        digits = sum(c.isdigit() for c in value)
        return value if digits >= 3 or '.' in value else None
    return value


def _word_char(char: str) -> bool:
    """Whether `char` continues a word as the scores read words (`contains`: a regex `\\w`, `_` included)."""
    return char.isalnum() or char == '_'


def _cue(text: str, start: int) -> str:
    line_start = text.rfind('\n', 0, start) + 1
    words = re.sub(r'[{}\[\]"]', ' ', text[line_start:start]).split()
    return ' '.join(words[-_CUE_WORDS:])

"""Pinned messages are kept ahead of older unpinned ones and never summarized away.

A message is pinned when it carries our pin marker (see `pin`), when it is one of this package's own
summary messages, or when the user's predicate says so. The current run's question (`question_unit`) is kept
verbatim, as a message, for as long as its run lasts; a later run may summarize it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, ToolReturnPart, UserPromptPart

from .._compat import message_metadata, message_run_id, part_metadata
from ._marks import MARKER_KEY, marker_kind, own_metadata, part_kinds
from .units import Unit

PinPredicate = Callable[[ModelMessage], bool]
_T = TypeVar('_T')


def pin(item: _T) -> _T:
    """A copy of a message or part with the pin marker set in its metadata; the original is not changed.
    Raises `TypeError` where the item has no metadata field (messages on 1.0): use a pin predicate instead
    (`create_history_processor(pin=...)`).
    """
    if not any(f.name == 'metadata' for f in dataclasses.fields(item)):  # type: ignore[arg-type]
        raise TypeError(
            f'{type(item).__name__} has no metadata on this pydantic-ai version; use a pin predicate'
        )
    current: dict[str, Any] = dict(getattr(item, 'metadata', None) or {})
    current[MARKER_KEY] = {**(current.get(MARKER_KEY) or {}), 'pinned': True}
    return dataclasses.replace(item, metadata=current)  # type: ignore[type-var]


_ERROR_OUTCOMES = frozenset({'failed', 'retried', 'denied'})
"""2.x `ToolReturnPart.outcome` values that report a failed call rather than a result."""


def pin_tool_errors(message: ModelMessage) -> bool:
    """A predicate: keep tool errors and retry prompts, so the model does not repeat a failed call
    (`RetryPromptPart`, and 2.x tool returns whose `outcome` is 'failed', 'retried' or 'denied').
    """
    if not isinstance(message, ModelRequest):
        return False
    for part in message.parts:
        if isinstance(part, RetryPromptPart):
            return True
        if isinstance(part, ToolReturnPart) and getattr(part, 'outcome', None) in _ERROR_OUTCOMES:
            return True
    return False


def is_pinned(messages: Sequence[ModelMessage], predicate: PinPredicate | None = None) -> bool:
    """Whether any message of a unit is pinned: by a pin marker, as our summary, or by `predicate`."""
    for message in messages:
        if own_metadata(message_metadata(message)).get('pinned') or marker_kind(message) == 'summary':
            return True
        if any(own_metadata(part_metadata(p)).get('pinned') for p in message.parts):
            return True
        if predicate is not None and predicate(message):
            return True
    return False


def is_user_prompt(message: ModelMessage) -> bool:
    """Whether `message` is a request carrying a user prompt that is not ours (a summary, a note, a trail)."""
    if not isinstance(message, ModelRequest) or marker_kind(message) is not None:
        return False
    parts = zip(message.parts, part_kinds(message), strict=True)
    return any(isinstance(p, UserPromptPart) and kind is None for p, kind in parts)


def question_unit(messages: Sequence[ModelMessage], units: Sequence[Unit], run_id: str | None) -> int | None:
    """The unit holding the current run's question: the latest user prompt that is not ours, when the run
    `run_id` asked it (2.x: the request's `run_id`; a request without one counts as the run's). None outside a
    run, and in a run begun without a prompt of its own (the question before it belongs to an earlier run)."""
    if run_id is None:
        return None
    for index in range(len(units) - 1, -1, -1):
        unit = units[index]
        for message in reversed(messages[unit.start : unit.end]):
            if is_user_prompt(message):
                asked_in = message_run_id(message)
                return index if asked_in is None or asked_in == run_id else None
    return None

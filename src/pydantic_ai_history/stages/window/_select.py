"""Which units the window keeps: a pure function of the history, each message's cost and the budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from ...messages._marks import marker_kind
from ...messages.pinning import PinPredicate, is_pinned, question_unit
from ...messages.units import Unit, fit_suffix, head_length


@dataclass(frozen=True, kw_only=True)
class WindowSelection:
    """Which units to keep: indices into the unit list, in order."""

    head: int
    """Messages `[0, head)` are the preserved head."""
    kept_units: tuple[int, ...]
    """The units kept, in order: the head's, the pinned ones and the recent run that fits, and the last."""
    dropped_units: tuple[int, ...]
    """The units the note stands for, in order (earlier window notes of ours among them)."""
    pinned_kept: int
    """How many of the kept units were kept for being pinned (ahead of newer unpinned ones)."""
    question: int | None = None
    """The unit of the current run's question (`question_unit`) when it is in the body: always kept."""


def select_window(
    messages: Sequence[ModelMessage],
    units: Sequence[Unit],
    per_message: Sequence[int],
    budget: int,
    *,
    keep_first_user_message: bool = True,
    pin: PinPredicate | None = None,
    fixed_cost: int = 0,
    run_id: str | None = None,
) -> WindowSelection:
    """Choose the units to keep within `budget` (tokens), given each message's cost.

    Mandatory: the head, the current run's question (`run_id`'s, see `question_unit`) and the last unit. Then
    pinned units, newest first, while they fit; then the contiguous suffix of the rest, stopping at the first
    unit that does not fit. Our earlier window notes are always dropped (the new note supersedes them).
    `fixed_cost`: overhead and note on top of the units kept.
    """
    head = _head(messages, units, keep_first_user_message)
    first_body = next((i for i, u in enumerate(units) if u.start >= head), len(units))
    last = len(units) - 1
    costs = [sum(per_message[u.start : u.end]) for u in units]
    body = range(first_body, last)
    question = question_unit(messages, units, run_id)
    if question not in body:  # the head and the last unit are kept anyway
        question = None
    kept_anyway = set() if question is None else {question}
    used = fixed_cost + sum(costs[:first_body]) + costs[last] + sum(costs[i] for i in kept_anyway)
    own_markers = {i for i in body if marker_kind(messages[units[i].start]) == 'window'}
    candidates = [i for i in body if i not in own_markers and i not in kept_anyway]
    pinned = _pinned(messages, units, costs, candidates, budget - used, pin)
    used += sum(costs[i] for i in pinned)
    free = [0 if i in pinned or i in own_markers or i in kept_anyway else costs[i] for i in body]
    start = first_body + fit_suffix(free, budget - used, at_least=0) if free else first_body
    kept = sorted(
        (set(range(first_body)) | pinned | kept_anyway | set(range(start, last)) | {last}) - own_markers
    )
    kept_set = set(kept)
    dropped = tuple(i for i in range(len(units)) if i not in kept_set)
    return WindowSelection(
        head=head, kept_units=tuple(kept), dropped_units=dropped, pinned_kept=len(pinned), question=question
    )


def _head(messages: Sequence[ModelMessage], units: Sequence[Unit], keep_first_user_message: bool) -> int:
    head = head_length(messages, units, keep_first_user_message=keep_first_user_message)
    if not keep_first_user_message and head and _has_user_prompt(messages[:head]):
        # the system prompt shares the first user turn's request: the note will carry its parts
        return 0
    return head


def _pinned(
    messages: Sequence[ModelMessage],
    units: Sequence[Unit],
    costs: Sequence[int],
    candidates: Sequence[int],
    room: int,
    pin: PinPredicate | None,
) -> set[int]:
    """The pinned units among `candidates` kept within `room` tokens, newest first (one that does not fit is
    passed over for an older one that does)."""
    pinned: set[int] = set()
    for index in reversed(candidates):
        unit = units[index]
        if costs[index] <= room and is_pinned(messages[unit.start : unit.end], pin):
            pinned.add(index)
            room -= costs[index]
    return pinned


def _has_user_prompt(messages: Sequence[ModelMessage]) -> bool:
    return any(
        isinstance(p, UserPromptPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts
    )


def mandatory_cost(
    per_message: Sequence[int], units: Sequence[Unit], selection: WindowSelection | None
) -> int:
    """What the window can never drop: the preserved head, the current run's question and the last unit (the
    current request)."""
    if not units:
        return 0
    head = selection.head if selection is not None else 0
    last = units[-1]
    asked = units[selection.question] if selection is not None and selection.question is not None else None
    question = sum(per_message[asked.start : asked.end]) if asked is not None else 0
    return sum(per_message[: min(head, last.start)]) + question + sum(per_message[last.start : last.end])

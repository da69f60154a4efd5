"""The sliding window: the last line of defence that makes a history fit its hard limit.

It keeps the preserved head (system prompt, first user message), the pinned units, and the longest
contiguous run of recent units that fits, stopping at the first unit that does not fit. Dropped messages
are replaced by one short note, which also carries any system prompt parts they held.

The window stores nothing: what it drops has no copy left (the compactor and the artifact stage store what
they remove first). So every drop of content is also a `ContentLost` event, logged at error level, naming
the tool calls and counting the user prompts that went; its own earlier notes are not content.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._compat import (
    ModelMessage,
    ModelRequest,
    UserPromptPart,
    message_metadata,
)
from .._context import HistoryContext
from .._marks import (
    OPENINGS,
    SEAL_TOKENS,
    marker_kind,
    own_metadata,
    own_request,
    part_kinds,
    seal,
    strip_seal,
)
from ..events import WindowApplied
from ..pinning import PinPredicate, is_pinned
from ..units import Unit, fit_suffix, head_length, split_units, system_parts
from ..windows import ContextWindowUnknownError

__all__ = ('SlidingWindow', 'WindowSettings', 'dropped_count', 'select_window', 'window_note')

logger = logging.getLogger('pydantic_ai_history.window')

_NOTE_COST = 40 + SEAL_TOKENS
"""Tokens reserved for the note that replaces dropped messages (its text alone is about 30, plus its seal)."""
_MAX_PASSES = 3


@dataclass(frozen=True)
class WindowSettings:
    """Settings of the sliding window.

    Args:
        budget: an explicit token budget; by default `context_window * context_utilization - reserve_tokens`.
        reserve_tokens: room left for the model's answer.
        context_utilization: the fraction of the window to use (e.g. 0.33, 0.66 or 1.0: cheaper requests on an
            expensive model).
        keep_first_user_message: keep the first user turn verbatim (the original task).
        pin: a predicate; units with a message it accepts are kept ahead of older unpinned ones.
    """

    budget: int | None = None
    reserve_tokens: int = 1_024
    context_utilization: float = 1.0
    keep_first_user_message: bool = True
    pin: PinPredicate | None = None

    def __post_init__(self) -> None:
        if not 0 < self.context_utilization <= 1:
            raise ValueError('context_utilization must be in (0, 1]')

    def resolve_budget(self, context_window: int | None, model_name: str | None = None) -> int:
        if self.budget is not None:
            return self.budget
        if context_window is None:
            raise ContextWindowUnknownError(model_name)
        return max(int(context_window * self.context_utilization) - self.reserve_tokens, 1)


@dataclass(frozen=True)
class WindowSelection:
    """Which units to keep: indices into the unit list, in order."""

    head: int
    """Messages `[0, head)` are the preserved head."""
    kept_units: tuple[int, ...]
    dropped_units: tuple[int, ...]
    pinned_kept: int


def select_window(
    messages: Sequence[ModelMessage],
    units: Sequence[Unit],
    per_message: Sequence[int],
    budget: int,
    *,
    keep_first_user_message: bool = True,
    pin: PinPredicate | None = None,
    fixed_cost: int = 0,
) -> WindowSelection:
    """Choose the units to keep within `budget` (tokens), given each message's cost.

    Mandatory: the head and the last unit (the current request). Then pinned units, newest first, as long
    as they fit. Then the contiguous suffix of the rest, stopping at the first unit that does not fit: a
    large unit is never skipped to keep older ones. Our own earlier window notes are always dropped (the
    new note supersedes them).
    """
    head = head_length(messages, units, keep_first_user_message=keep_first_user_message)
    if not keep_first_user_message and head and _has_user_prompt(messages[:head]):
        # The system prompt shares its request with the first user turn: dropping that request is allowed,
        # and the note that replaces it carries the system prompt parts.
        head = 0
    first_body = next((i for i, u in enumerate(units) if u.start >= head), len(units))
    last = len(units) - 1
    costs = [sum(per_message[u.start : u.end]) for u in units]
    used = fixed_cost + sum(costs[:first_body]) + costs[last]
    body = range(first_body, last)
    own_markers = {i for i in body if marker_kind(messages[units[i].start]) == 'window'}
    pinned: list[int] = []
    for index in reversed(body):
        if index in own_markers:
            continue
        unit = units[index]
        if is_pinned(messages[unit.start : unit.end], pin) and used + costs[index] <= budget:
            pinned.append(index)
            used += costs[index]
    pinned_set = set(pinned)
    free = [0 if i in pinned_set or i in own_markers else costs[i] for i in body]
    start = first_body + fit_suffix(free, budget - used, at_least=0) if free else first_body
    kept = sorted((set(range(first_body)) | pinned_set | set(range(start, last)) | {last}) - own_markers)
    kept_set = set(kept)
    dropped = tuple(i for i in range(len(units)) if i not in kept_set)
    return WindowSelection(head, tuple(kept), dropped, len(pinned_set))


def _has_user_prompt(messages: Sequence[ModelMessage]) -> bool:
    return any(
        isinstance(p, UserPromptPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts
    )


@dataclass
class SlidingWindow:
    """Keep the longest run of recent units that fits; never skip a unit to keep older ones."""

    settings: WindowSettings = WindowSettings()
    name: str = 'window'

    def hard_budget(self, context: HistoryContext) -> int | None:
        """The budget this window enforces for `context`, None when the context window is unknown."""
        try:
            return self.settings.resolve_budget(context.context_window, context.counter.model_name)
        except ContextWindowUnknownError:
            return None

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        budget = self.settings.resolve_budget(context.context_window, context.counter.model_name)
        estimate = context.estimate(messages)
        if estimate.total <= budget:
            return messages  # the idle path: no unit split, no copy
        units = split_units(messages)
        overhead = estimate.total - estimate.tokenizer
        note_cost = _NOTE_COST
        result: list[ModelMessage] = messages
        selection: WindowSelection | None = None
        candidate: WindowSelection | None = None
        after = estimate.total
        # The note's size is only known once the cut is chosen (it carries the system prompt parts of what
        # it replaces, and dropping more only adds to them): when the assembled history overshoots, choose
        # again with the note's real cost.
        for _ in range(_MAX_PASSES):
            candidate = select_window(
                messages,
                units,
                estimate.per_message,
                budget,
                keep_first_user_message=self.settings.keep_first_user_message,
                pin=self.settings.pin,
                fixed_cost=overhead + note_cost,
            )
            if not candidate.dropped_units or (
                selection is not None and candidate.dropped_units == selection.dropped_units
            ):
                break
            selection = candidate
            result, note = _assemble(messages, units, selection, context.run_id)
            after = context.counter.count_messages(result) + overhead
            real_note_cost = context.counter.count_message(note)
            if after <= budget or real_note_cost <= note_cost:
                break
            note_cost = real_note_cost
        mandatory = overhead + _mandatory_cost(estimate.per_message, units, candidate)
        if selection is None or after >= estimate.total:
            # nothing to drop, or the note costs what it would replace: the input is the best there is
            self._warn_over_budget(
                context, estimate.total, budget, mandatory, messages, estimate.per_message, units
            )
            return messages
        context.emit_event(
            WindowApplied(
                run_id=context.run_id,
                messages_before=len(messages),
                messages_after=len(result),
                tokens_before=estimate.total,
                tokens_after=after,
                budget=budget,
                units_dropped=len(selection.dropped_units),
                pinned_kept=selection.pinned_kept,
                reason=f'{estimate.total:,} tokens over the window budget of {budget:,}',
            )
        )
        logger.info(
            'window: %d -> %d messages, %d -> %d tokens (budget %d, %d units dropped, %d pinned kept)',
            len(messages),
            len(result),
            estimate.total,
            after,
            budget,
            len(selection.dropped_units),
            selection.pinned_kept,
        )
        lost = [
            m
            for i in selection.dropped_units
            for m in messages[units[i].start : units[i].end]
            if not marker_kind(m)
        ]
        if lost:  # the window keeps no copy: what it drops is gone, and is named at error level
            context.lost(
                'window', 'window_dropped', 'the window keeps no copy; its note tells the model', lost
            )
        if after > budget:
            self._warn_over_budget(context, after, budget, mandatory, messages, estimate.per_message, units)
        return result

    @staticmethod
    def _warn_over_budget(
        context: HistoryContext,
        tokens: int,
        budget: int,
        mandatory: int,
        messages: Sequence[ModelMessage],
        per_message: Sequence[int],
        units: Sequence[Unit],
    ) -> None:
        current = sum(per_message[units[-1].start : units[-1].end]) if units else 0
        if mandatory > budget:
            why = (
                f'the preserved head, the system prompt and the current request ({current:,} tokens) '
                f'alone are {mandatory:,} tokens and do not fit'
            )
        else:
            why = (
                f'the preserved head and the current request ({mandatory:,} tokens) fit, but no cut at a '
                'unit boundary, with the note that stands for what it drops, does'
            )
        context.warn(
            'over_budget',
            f'the history is {tokens:,} tokens after the window, over its budget of {budget:,}: {why}',
            tokens=tokens,
            budget=budget,
            current_request_tokens=current,
            mandatory_tokens=mandatory,
            messages=len(messages),
        )


def _mandatory_cost(
    per_message: Sequence[int], units: Sequence[Unit], selection: WindowSelection | None
) -> int:
    """What the window can never drop: the preserved head and the last unit (the current request)."""
    if not units:
        return 0
    head = selection.head if selection is not None else 0
    last = units[-1]
    return sum(per_message[: min(head, last.start)]) + sum(per_message[last.start : last.end])


def _assemble(
    messages: Sequence[ModelMessage], units: Sequence[Unit], selection: WindowSelection, run_id: str | None
) -> tuple[list[ModelMessage], ModelRequest]:
    kept = set(selection.kept_units)
    dropped_messages = [m for i in selection.dropped_units for m in messages[units[i].start : units[i].end]]
    note = window_note(dropped_messages, run_id)
    result: list[ModelMessage] = []
    note_placed = False
    for index, unit in enumerate(units):
        if index not in kept:
            continue
        if not note_placed and unit.start >= selection.head:
            result.append(note)
            note_placed = True
        result.extend(messages[unit.start : unit.end])
    return result, note


def window_note(dropped: Sequence[ModelMessage], run_id: str | None) -> ModelRequest:
    """The request that stands for dropped messages; it keeps their system prompt parts.

    Earlier notes of ours among the dropped messages are folded in: their counts add up, their own text is
    not repeated.
    """
    count = 0
    for message in dropped:
        noted = dropped_count(message)
        count += 1 if noted is None else noted
    text = (
        f'{OPENINGS["window"]} {count} earlier messages were removed to fit the context window; '
        'the conversation continues below.'
    )
    return own_request(
        [
            *((p, None) for p in system_parts(dropped)),
            (UserPromptPart(content=seal('window', text)), 'window'),
        ],
        details={'dropped_messages': count},
        run_id=run_id,
    )


_NOTE_COUNT = re.compile(re.escape(OPENINGS['window']) + r' (\d+) earlier messages were removed')


def dropped_count(message: ModelMessage) -> int | None:
    """How many messages a window note of ours stands for; None for any other message.

    Read from the note's metadata, or from its own sealed text where messages have none (1.0): only the part
    that is the note (by identity) is read, never the system prompts it carries or anybody else's text.
    """
    if marker_kind(message) != 'window':
        return None
    ours = own_metadata(message_metadata(message))
    if isinstance(ours.get('dropped_messages'), int):
        return int(ours['dropped_messages'])
    for part, kind in zip(message.parts, part_kinds(message), strict=True):
        content = getattr(part, 'content', None)
        match = (
            _NOTE_COUNT.match(strip_seal(content)) if kind == 'window' and isinstance(content, str) else None
        )
        if match:
            return int(match.group(1))
    return 0

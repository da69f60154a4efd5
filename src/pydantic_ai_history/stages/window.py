"""The sliding window: the last line of defence that makes a history fit its hard limit.

It keeps the preserved head (system prompt, first user message), the pinned units, and the longest
contiguous run of recent units that fits, stopping at the first unit that does not fit. Dropped messages
are replaced by one short note, which also carries any system prompt parts they held.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .._compat import ModelMessage, ModelRequest, SystemPromptPart, UserPromptPart, make_request
from .._context import MARKER_KEY, HistoryContext
from ..events import WindowApplied
from ..pinning import TEXT_MARKERS, PinPredicate, is_pinned, marker_kind
from ..units import Unit, fit_suffix, head_length, split_units
from ..windows import ContextWindowUnknownError

__all__ = ('SlidingWindow', 'WindowSettings', 'select_window')

logger = logging.getLogger('pydantic_ai_history.window')


@dataclass(frozen=True)
class WindowSettings:
    """Settings of the sliding window.

    Args:
        budget: an explicit token budget; by default `context_window * context_utilization - reserve_tokens`.
        reserve_tokens: room left for the model's answer.
        context_utilization: the fraction of the window to use (e.g. 0.33 for cheap requests on an expensive model).
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

    Mandatory: the head and the last unit (the current request). Then pinned units, newest first. Then the
    contiguous suffix of the rest, stopping at the first unit that does not fit.
    """
    head = head_length(messages, units, keep_first_user_message=keep_first_user_message)
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
    # an old marker of ours is superseded by the new one, wherever it stands
    kept = sorted((set(range(first_body)) | pinned_set | set(range(start, last)) | {last}) - own_markers)
    dropped = tuple(i for i in range(len(units)) if i not in set(kept))
    return WindowSelection(head, tuple(kept), dropped, len(pinned_set))


@dataclass
class SlidingWindow:
    """Keep the longest run of recent units that fits; never skip a unit to keep older ones."""

    settings: WindowSettings = WindowSettings()
    name: str = 'window'

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        budget = self.settings.resolve_budget(context.context_window, context.counter.model_name)
        estimate = context.estimate(messages)
        if estimate.total <= budget:
            return messages
        units = split_units(messages)
        overhead = estimate.total - estimate.tokenizer
        note_cost = 40  # reserved for the note that replaces dropped messages
        selection = select_window(
            messages,
            units,
            estimate.per_message,
            budget,
            keep_first_user_message=self.settings.keep_first_user_message,
            pin=self.settings.pin,
            fixed_cost=overhead + note_cost,
        )
        if not selection.dropped_units:
            self._warn_over_budget(context, estimate.total, budget)
            return messages
        result = _assemble(messages, units, selection, context.run_id)
        after = context.counter.count_messages(result) + overhead
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
            'window: %d -> %d messages, %d -> %d tokens (budget %d, %d units dropped)',
            len(messages),
            len(result),
            estimate.total,
            after,
            budget,
            len(selection.dropped_units),
        )
        if after > budget:
            self._warn_over_budget(context, after, budget)
        return result

    @staticmethod
    def _warn_over_budget(context: HistoryContext, tokens: int, budget: int) -> None:
        context.warn(
            'over_budget',
            f'the history is {tokens:,} tokens after the window, over its budget of {budget:,}: the preserved head '
            'and the current request alone do not fit',
            tokens=tokens,
            budget=budget,
        )


def _assemble(
    messages: Sequence[ModelMessage], units: Sequence[Unit], selection: WindowSelection, run_id: str | None
) -> list[ModelMessage]:
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
    return result


def window_note(dropped: Sequence[ModelMessage], run_id: str | None) -> ModelRequest:
    """The request that stands for dropped messages; it keeps their system prompt parts."""
    system_parts = [
        p for m in dropped if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, SystemPromptPart)
    ]
    real = [m for m in dropped if marker_kind(m) != 'window']
    text = (
        f'{TEXT_MARKERS["window"]} {len(real)} earlier messages were removed to fit the context window; '
        'the conversation continues below.'
    )
    return make_request(
        [*system_parts, UserPromptPart(content=text)],
        run_id=run_id,
        metadata={MARKER_KEY: {'kind': 'window', 'dropped_messages': len(real)}},
    )

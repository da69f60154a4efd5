"""The sliding window stage: drop the oldest units until the history fits the policy's budget.

On-demand capabilities the dropped units loaded are recorded again after the note (`stages/_loads.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage

from ...context._context import HistoryContext
from ...events import WindowApplied
from ...messages._marks import SEAL_TOKENS, marker_kind, separate_own_parts
from ...messages.units import split_units
from ...pipeline._stage_capability import StageCapability, history_processor_annotations
from .._loads import reload_reserve
from .._request_fit import fit_newest, newest_room
from .._spill import store_transcript
from ._draft import Draft, Layout, plain_if_it_fits
from ._select import WindowSelection, mandatory_cost, select_window

logger = logging.getLogger('pydantic_ai_history.window')

_NOTE_COST = 40 + SEAL_TOKENS
"""Tokens reserved for the note that replaces dropped messages (its text alone is about 30, plus its seal)."""
_REFERENCE_COST = 64
"""Tokens the note adds when it names the stored transcript (`read_artifact(...)`; its id is 28 at most)."""
_MAX_PASSES = 3


@dataclass(kw_only=True, eq=False)
class SlidingWindow(StageCapability):
    """Keep the longest run of recent units that fits; never skip a unit to keep older ones. No settings of
    its own: the budget is the context policy's, `pin` and `keep_first_user_message` the processor's."""

    id: str | None = 'pydantic_ai_history.window'
    """The capability's id when the window runs alone (stable: durable engines name its operations after
    it)."""
    name: str = 'window'
    """The stage's name in events and logs."""

    def unchanged_when_fits(self, messages: list[ModelMessage], context: HistoryContext) -> bool:
        """A history within its budget is left as it is (`HistoryStage`)."""
        return context.estimate(messages).total <= context.limits.budget

    async def apply_stage(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        budget = context.limits.budget
        estimate = context.estimate(messages)
        if estimate.total <= budget:
            return messages  # the idle path: no unit split, no copy
        given = messages
        # a run started on a saved history merges our earlier note into the user turn: split it back out
        messages = separate_own_parts(messages)
        if messages is not given:
            estimate = context.estimate(messages)
        rooms = newest_room(messages, estimate, context, floor=None)
        messages = await fit_newest(messages, rooms, context, stage=self.name)
        if messages[-1] is not given[-1]:
            estimate = context.estimate(messages)
            if estimate.total <= budget:
                return messages
        units = split_units(messages)
        layout = Layout(
            messages=messages, units=units, overhead=estimate.total - estimate.tokenizer, context=context
        )
        draft, candidate = self._choose(layout, estimate.per_message, budget)
        if draft is not None and draft.transcript is not None and draft.after > budget:
            draft = plain_if_it_fits(layout, draft, budget, estimate.total)
        if draft is None or draft.after >= estimate.total:
            # nothing to drop, or the note costs what it would replace: the input is the best there is
            _warn_over_budget(context, estimate.total, budget, layout, estimate.per_message, candidate)
            return messages if messages[-1] is not given[-1] else given
        draft = await _give_a_home(layout, draft)
        _report(context, len(messages), estimate.total, budget, draft)
        if draft.after > budget:
            _warn_over_budget(context, draft.after, budget, layout, estimate.per_message, candidate)
        return draft.result

    def _choose(
        self, layout: Layout, per_message: Sequence[int], budget: int
    ) -> tuple[Draft | None, WindowSelection | None]:
        """The history to return (None when nothing can be dropped), and the last selection considered. The
        note's real cost is known once the cut is (it carries the dropped system prompts and names their
        transcript): when the result overshoots, choose again with that cost."""
        spill = layout.context.store is not None
        note_cost = _NOTE_COST + (_REFERENCE_COST if spill else 0)
        # the loads the cut may unload are recorded again after the note: planned for like the note
        record = reload_reserve(layout.messages)
        reserve = layout.context.counter.count_message(record) if record is not None else 0
        draft: Draft | None = None
        candidate: WindowSelection | None = None
        for _ in range(_MAX_PASSES):
            candidate = select_window(
                layout.messages,
                layout.units,
                per_message,
                budget,
                keep_first_user_message=layout.context.keep_first_user_message,
                pin=layout.context.pin,
                fixed_cost=layout.overhead + note_cost + reserve,
                run_id=layout.context.run_id,
            )
            if not candidate.dropped_units or (
                draft is not None and candidate.dropped_units == draft.selection.dropped_units
            ):
                break
            draft = layout.draft(candidate, spill=spill)
            real_note_cost = layout.context.counter.count_message(draft.note)
            if draft.after <= budget or real_note_cost <= note_cost:
                break
            note_cost = real_note_cost
        return draft, candidate


def _warn_over_budget(
    context: HistoryContext,
    tokens: int,
    budget: int,
    layout: Layout,
    per_message: Sequence[int],
    selection: WindowSelection | None,
) -> None:
    units = layout.units
    mandatory = layout.overhead + mandatory_cost(per_message, units, selection)
    current = sum(per_message[units[-1].start : units[-1].end]) if units else 0
    if mandatory > budget:
        why = (
            f"the preserved head, the system prompt, the current run's question and the current request "
            f'({current:,} tokens) alone are {mandatory:,} tokens and do not fit'
        )
    else:
        why = (
            f"the preserved head, the current run's question and the current request ({mandatory:,} tokens) "
            'fit, but no cut at a unit boundary, with the note that stands for what it drops, does'
        )
    context.warn(
        'over_budget',
        f'the history is {tokens:,} tokens after the window, over its budget of {budget:,}: {why}',
        tokens=tokens,
        budget=budget,
        current_request_tokens=current,
        mandatory_tokens=mandatory,
        messages=len(layout.messages),
    )


def _report(
    context: HistoryContext, messages_before: int, tokens_before: int, budget: int, draft: Draft
) -> None:
    selection = draft.selection
    context.emit_event(
        WindowApplied(
            run_id=context.run_id,
            messages_before=messages_before,
            messages_after=len(draft.result),
            tokens_before=tokens_before,
            tokens_after=draft.after,
            budget=budget,
            units_dropped=len(selection.dropped_units),
            pinned_kept=selection.pinned_kept,
            reason=f'{tokens_before:,} tokens over the window budget of {budget:,}',
        )
    )
    logger.info(
        'window: %d -> %d messages, %d -> %d tokens (budget %d, %d units dropped, %d pinned kept)',
        messages_before,
        len(draft.result),
        tokens_before,
        draft.after,
        budget,
        len(selection.dropped_units),
        selection.pinned_kept,
    )


async def _give_a_home(layout: Layout, draft: Draft) -> Draft:
    """Store the transcript of what `draft` drops; when that fails, drop it anyway (the request must fit),
    with a note naming no transcript and `ContentLost` naming what went."""
    context = layout.context
    transcript = draft.transcript
    if transcript is not None and await store_transcript(
        transcript, context, source=f'transcript of {transcript.messages} messages the window removed'
    ):
        if not draft.named:
            # The app can still find the transcript by the id in this warning.
            context.warn(
                'window_reference_omitted',
                f'the note naming the stored transcript {transcript.artifact_id} does not fit the budget; '
                'the window wrote a note without it',
                artifact_id=transcript.artifact_id,
            )
        return draft
    if draft.named:
        draft = layout.plain(draft.selection, draft.dropped, None)
    lost = [m for m in draft.dropped if not marker_kind(m)]
    if lost:
        why = 'the store failed' if context.store is not None else 'there is no store'
        context.lost('window', 'window_dropped', f'{why}; the window note tells the model', lost)
    return draft


history_processor_annotations(SlidingWindow)

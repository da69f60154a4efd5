"""The compactor: above the trigger, replace the older part of the history with one structured summary.

Output: preserved head + one summary request + the current run's question (when the summary takes the steps
after it) + the newest units that fit the target verbatim (the last unit, the current request, always). Pinned
units are never summarized: their cost is reserved up front so they never push the cut (so is the question's);
those before it ride in the summary's pinned section. With a store, the evicted transcript is
stored before anything is removed (each names the one before it); if the store fails nothing is compacted
while the window allows, past that `ContentLost` names what only the summary stands for. On-demand
capabilities the evicted messages loaded are recorded again after the summary. `method='provider'|'auto'`
puts the serving model's compaction item in place of our summary where it can (layout in `_native`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic_ai.messages import ModelMessage

from ...context._context import HistoryContext
from ...events import CompactionReason, HistoryEvent
from ...messages.units import system_parts
from ...pipeline._settings_checks import coerce_settings
from ...pipeline._stage_capability import StageCapability, history_processor_annotations
from ...tokens import TokenEstimate
from ._ahead import BackgroundSummarizing
from ._background import BackgroundJob, BackgroundSummaries
from ._breaker import ScopedBreakers
from ._compaction import (
    Compaction,
    Cut,
    Kept,
    Outcome,
    Plan,
    Summary,
    announce,
    final_sections,
    keep_loads,
    summary_details,
)
from ._prefix_index import Origin, PrefixIndex
from ._recall import recall, recall_question
from ._settings import CompactionSettings
from ._stubs import Stub, apply_stubs, store_stubbed
from ._summary_message import build_summary_message, summary_text
from ._trail import TrailEntry, extract_trail, known_text, prune_trail

logger = logging.getLogger('pydantic_ai_history.compactor')


@dataclass(kw_only=True, eq=False)
class Compactor(BackgroundSummarizing, StageCapability):
    """Summarize the older part of the history when it passes `max_tokens`, down to `target_tokens`."""

    settings: CompactionSettings = field(default_factory=CompactionSettings, kw_only=False)
    """The compactor's settings (the one positional argument: `Compactor(CompactionSettings(...))`)."""
    id: str | None = 'pydantic_ai_history.compactor'
    """The capability's id when the compactor runs alone (stable: durable engines name its operations after
    it)."""
    name: str = 'compactor'
    """The stage's name in events and logs."""
    _breakers: ScopedBreakers = field(init=False, repr=False)
    _index: PrefixIndex = field(init=False, repr=False)
    _unsupported_warned: set[str] = field(init=False, repr=False, default_factory=set)
    """Why native compaction was unavailable, each said once (`method='provider'`)."""
    _refused: dict[str, str] = field(init=False, repr=False, default_factory=dict)
    """Model name -> why it refused `compact_messages` as unsupported: not asked again."""
    _background: BackgroundSummaries = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.settings = coerce_settings(CompactionSettings, self.settings, 'settings')
        self._breakers = ScopedBreakers(
            max_failures=self.settings.max_failures,
            cooldown=self.settings.cooldown_seconds,
            clock=self.settings.clock,
        )
        self._index = PrefixIndex(ttl=self.settings.cache_ttl)
        self._background = BackgroundSummaries(self.settings.max_background_summaries)
        super().__post_init__()

    async def apply_stage(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        result = await self._compact_when_due(messages, context)
        if self.settings.recall_chars:
            result = await recall(result, context, self.settings.recall_chars)
        return result

    async def _compact_when_due(
        self, messages: list[ModelMessage], context: HistoryContext
    ) -> list[ModelMessage]:
        self._count_request(context)
        estimate = context.estimate(messages)
        reason = self._reason(estimate.total, context)
        if reason is None:
            await self._anticipate(messages, context, estimate)
            return messages
        if reason == 'trigger' and (
            self._still_making(messages, estimate, context)
            or (
                await self._start_at_trigger(messages, context, estimate)
                and self._still_making(messages, estimate, context)
            )
        ):
            return messages
        focus = context.compaction_request.focus if reason == 'model' and context.compaction_request else None
        held = self._background.pop(context.run_id)
        with context.span(COMPACTION_SPAN, {'pydantic_ai_history.compaction.reason': reason}):
            try:
                return await self._compact(messages, context, estimate, reason=reason, focus=focus, held=held)
            finally:
                if held is not None and not held.used:
                    self._end(held, held.reason, context.emit_event)

    def unchanged_when_fits(self, messages: list[ModelMessage], context: HistoryContext) -> bool:
        """Nothing to do (`HistoryStage`): no compaction asked for nor due, no background summary held for the
        run (one its history no longer extends ends when the compactor runs) nor due to start, no question to
        recall passages for."""
        if context.compaction_request is not None or self._background.get(context.run_id) is not None:
            return False
        if self.settings.recall_chars and recall_question(messages) is not None:
            return False
        total, trigger = context.estimate(messages).total, context.limits.trigger
        start = self.settings.background_start
        return total <= trigger and (start is None or total <= trigger * start)

    def _still_making(
        self, messages: list[ModelMessage], estimate: TokenEstimate, context: HistoryContext
    ) -> bool:
        """Whether the request goes out as it is, past the trigger but within the budget, rather than wait
        for the run's background summary of this history (the trigger sits below the budget for this); not
        once another step would leave the summary's cut unusable (`BackgroundJob.room`)."""
        held = self._background.get(context.run_id)
        if (
            held is None
            or held.ready
            or estimate.total > context.limits.budget
            or not held.extended_by(messages)
            or not held.usable_after(estimate.per_message)
        ):
            return False
        held.deferred += 1
        logger.info(
            'compactor: %d tokens, over the trigger (%d) and within the budget (%d): the request goes out '
            'while the background summary is still being made',
            estimate.total,
            context.limits.trigger,
            context.limits.budget,
        )
        return True

    def _reason(self, tokens: int, context: HistoryContext) -> Literal['trigger', 'model'] | None:
        requested = context.compaction_request
        if requested is not None:
            floor = requested.min_tokens if requested.min_tokens is not None else context.limits.target
            if tokens >= floor:
                return 'model'
            logger.info(
                'compactor: the model asked for a compaction, but the history (%d tokens) is under the %d '
                'that make one worth its cost',
                tokens,
                floor,
            )
        return 'trigger' if tokens > context.limits.trigger else None

    async def compact_history(
        self, messages: Sequence[ModelMessage], context: HistoryContext, *, focus: str | None = None
    ) -> list[ModelMessage]:
        """Compact now, whatever the trigger says, to the target; `focus` says what the summary must keep.
        When everything already fits the target, all units but the last are summarized."""
        history = list(messages)
        held = self._background.pop(context.run_id)
        with context.span(COMPACTION_SPAN, {'pydantic_ai_history.compaction.reason': 'manual'}):
            try:
                return await self._compact(
                    history, context, context.estimate(history), reason='manual', focus=focus
                )
            finally:
                if held is not None:
                    self._end(held, 'inputs_changed', context.emit_event)

    def will_name_readback(self, messages: Sequence[ModelMessage], context: HistoryContext) -> bool:
        """Whether processing `messages` compacts, leaving stubs or a summary that name `read_artifact`:
        asked before tools are prepared, so the tool comes with the event that rewrites the prefix anyway."""
        return (
            context.store is not None
            and len(messages) > 2
            and context.estimate(messages).total > context.limits.trigger
        )

    # ---- the steps ------------------------------------------------------------------------------------

    async def _compact(
        self,
        messages: list[ModelMessage],
        context: HistoryContext,
        estimate: TokenEstimate,
        *,
        reason: CompactionReason,
        focus: str | None,
        held: BackgroundJob[Summary] | None = None,
    ) -> list[ModelMessage]:
        """Cheapest first: a cached prefix summary, the run's background summary (paid for already), stubs
        (at the trigger), the provider's compaction where asked, then our summary."""
        if held is not None and not held.extended_by(messages):
            self._end(held, 'history_changed', context.emit_event)
            held = None
        begun = await self._begin(messages, estimate, context, reason, focus)
        if begun is None:
            return messages
        event, plan, conversation = begun
        substituted, reloaded = keep_loads(event.messages, plan.messages, plan.head + 1, context.counter)
        total = event.overhead + sum(plan.per_message) + reloaded
        reused = self._reuse_prefix(plan, event, context, substituted, total) if reason == 'trigger' else None
        if reused is not None:
            return reused
        # a cached prefix summary that made the history smaller stands even when nothing more is compacted
        unchanged = substituted if total < event.tokens else event.messages
        cut = self._choose_cut(plan, event.reserved, reason, context, event.tokens)
        if cut is None:
            return unchanged
        adopted = self._held_cut(plan, event, cut, held, context) if held is not None else None
        if adopted is not None:
            held_cut, gap = adopted
            return await self._summarize(plan, held_cut, conversation, context, event, unchanged, held, gap)
        if held is not None:  # thrown away before this event summarizes: its call stops before it runs beside
            self._end(held, held.reason, context.emit_event)
        if reason != 'manual' and self.settings.stub_tool_results:
            stubbed = await self._stub(plan, cut, context, event)
            if stubbed is not None:
                return stubbed
        native = await self._compact_natively(context, event)
        if native is not None:
            return native
        return await self._summarize(plan, cut, conversation, context, event, unchanged)

    def _reuse_prefix(
        self,
        plan: Plan,
        event: Compaction,
        context: HistoryContext,
        substituted: list[ModelMessage],
        total: int,
    ) -> list[ModelMessage] | None:
        """The history with its cached prefix summary when that alone brings it under the trigger."""
        hit = plan.messages is not event.messages
        if not hit or plan.origin is None or total > context.limits.trigger or total >= event.tokens:
            return None
        evicted = plan.origin.length - plan.head
        announce(context, event, evicted)
        summary = Summary(summary_text(plan.messages[plan.head]) or '', 'cache', 0, '')
        return self._finish(context, event, Outcome(substituted, total, summary, evicted))

    async def _summarize(
        self,
        plan: Plan,
        cut: Cut,
        conversation: str,
        context: HistoryContext,
        event: Compaction,
        unchanged: list[ModelMessage],
        held: BackgroundJob[Summary] | None = None,
        gap: Sequence[Stub] = (),
    ) -> list[ModelMessage]:
        """Our summary (and its trail) in place of what is before the cut, once its transcript is stored;
        `gap`: stubs for tool outputs after the cut (those a background summary's history added)."""
        await cut.check_stored(context)
        evicted = self._evicted(plan, cut, context, event.focus)
        if evicted is None:
            return unchanged  # no summary can be smaller than what it would replace
        spilled = await self._spill(plan, cut, evicted.messages, context, event, evicted.rendered)
        if spilled is None:
            return unchanged
        summary = await self._summary_for(evicted, context, held)
        origin = None
        question = cut.question_messages(plan)
        # a reload that reused this summary would lose the question it moved: no prefix is recorded then
        if plan.origin is not None and evicted.chain is not None and not question:
            origin = Origin(plan.origin.length + len(evicted.messages), evicted.chain)
        stubs = list(gap) if gap and await store_stubbed(gap, context) else []
        head, cut_at, counter = plan.head, evicted.cut_at, context.counter
        kept = apply_stubs(plan.messages, stubs)[cut_at:] if stubs else plan.messages[cut_at:]
        trail: tuple[TrailEntry, ...] = ()
        if (trail_budget := self._trail_budget(context)) > 0:
            # the carried trail and what is summarized now that the kept messages do not already hold
            new = extract_trail(evicted.summarized, known=known_text(kept))
            trail = tuple(prune_trail(cut.earlier.trail, new, budget=trail_budget, counter=counter))
        final = final_sections(summary.text, cut.earlier, spilled, evicted.pins, trail, cut.gone_transcripts)
        # System prompts survive compaction as parts: those of evicted messages (window notes included, which
        # carry the ones the window dropped) and those the previous summary already carried.
        carriers = [plan.messages[plan.previous]] if plan.previous is not None else []
        message = build_summary_message(
            final,
            details=summary_details(summary.method, evicted.messages, evicted.pins, origin),
            system_parts=system_parts([*carriers, *evicted.messages]),
        )
        result, reloaded = keep_loads(
            event.messages, [*plan.messages[:head], message, *question, *kept], head + 1, counter
        )
        summary_cost = counter.count_message(message)
        kept_cost = counter.count_messages(kept) if stubs else sum(plan.per_message[cut_at:])
        moved = plan.units[q] if (q := cut.passed_question()) is not None else None
        verbatim = Kept(
            sum(plan.per_message[:head]),
            sum(plan.per_message[moved.start : moved.end]) if moved is not None else 0,
            kept_cost,
            event.overhead + reloaded,
        )
        after = verbatim.head + summary_cost + verbatim.question + verbatim.tail + verbatim.rest
        if after >= event.tokens:
            logger.info(
                'compactor: skipped, the summary would not shrink the history (%d -> %d tokens)',
                event.tokens,
                after,
            )
            return unchanged
        if origin is not None and context.cache is not None:
            await self._remember(context.cache, conversation, summary, final, origin)
        outcome = Outcome(
            result,
            after,
            dataclasses.replace(summary, text=final.text),
            len(evicted.messages),
            pinned=len(evicted.pins),
            stubbed=len(stubs),
            replacement=summary_cost,
            lost=evicted.summarized,
            kept=verbatim,
        )
        return self._conclude(context, event, outcome, spilled)

    # ---- provider-native compaction (`CompactionSettings.method`) ----------------------------------------

    # ---- background summaries (`CompactionSettings.background_start`) ------------------------------------

    def end_run(self, run_id: str, emit: Callable[[HistoryEvent], None]) -> None:
        """Cancel the run's background summary, never waiting (called from the processor's run hook); learn
        the run's length."""
        self._background.end_run(run_id)
        job = self._background.pop(run_id)
        if job is not None:
            self._end(job, 'run_ended', emit)


COMPACTION_SPAN = 'compact_messages'
"""The span around a compaction, named like pydantic-ai-harness's so trace views group them; the summarizer's
chat spans are its children."""
history_processor_annotations(Compactor)

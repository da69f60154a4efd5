"""Where a compaction cuts: the history as compacted (with a cached prefix summary), the cut within the target
around pinned units and the latest prompt, and the cheap tier that stubs tool outputs before the verbatim tail
when that alone is enough."""

from __future__ import annotations

import logging

from pydantic_ai.messages import ModelMessage

from ...context._context import HistoryContext
from ...events import CompactionReason
from ...messages._marks import SEAL_TOKENS, marker_kind, separate_own_parts
from ...messages.pinning import PinPredicate, is_pinned, is_user_prompt, question_unit
from ...messages.units import Unit, split_units
from ...tokens import TokenCounter, TokenEstimate
from .._loads import reload_reserve
from .._transcript import TranscriptUnit, render_units
from ._compaction import (
    PINNED_UNIT_FRAMING_TOKENS,
    SUMMARY_FRAMING_TOKENS,
    TRANSCRIPT_REFERENCE_TOKENS,
    Compaction,
    Cut,
    Outcome,
    Plan,
    Summary,
    announce,
    keep_loads,
    unit_step,
)
from ._depth import EventCosts, stubbed_growth, stubs_suffice
from ._native import preserved_head
from ._plan import CutPlan, plan_cut
from ._prefix_index import Origin
from ._stubs import Stub, apply_stubs, plan_stubs, store_stubbed
from ._summaries import Summaries
from ._summary_message import PINNED_HEADING, SummarySections, summary_sections, summary_text

logger = logging.getLogger('pydantic_ai_history.compactor')


class CutPlanning(Summaries):
    """Where a compaction cuts, and the stubs that may do instead: a part of `Compactor`."""

    async def _begin(
        self,
        messages: list[ModelMessage],
        estimate: TokenEstimate,
        context: HistoryContext,
        reason: CompactionReason,
        focus: str | None,
    ) -> tuple[Compaction, Plan, str] | None:
        """The event, and the history as compacted: with the longest cached prefix summary it starts with, and
        where the body after the head (and a previous summary) starts in the original (`Plan.origin`)."""
        # A new run on a saved history has pydantic-ai merge consecutive requests: our summary requests are
        # split out of the user requests they were merged into, found again, and updated, not summarized.
        separated = separate_own_parts(messages)
        if separated is not messages:
            messages, estimate = separated, context.estimate(separated)
        units = split_units(messages)
        if len(units) < 2:
            return None
        overhead = estimate.total - estimate.tokenizer
        reload = context.counter.count_message(record) if (record := reload_reserve(messages)) else 0
        event = Compaction(
            messages, units, estimate.per_message, estimate.total, overhead, overhead + reload, reason, focus
        )
        head = preserved_head(messages, units, keep_first_user_message=context.keep_first_user_message)
        previous = head if head < len(messages) and marker_kind(messages[head]) == 'summary' else None
        plan = Plan(messages, list(event.per_message), units, head, previous)
        cache = context.cache
        if cache is None:
            return event, plan, ''
        conversation = self._index.conversation_key(messages[:head])
        if previous is not None:
            text = summary_text(messages[previous]) or ''
            plan.origin = await self._index.origin(cache, conversation, text)
            return event, plan, conversation
        plan.origin = Origin(head, conversation)
        return event, await self._lookup(cache, conversation, plan, context) or plan, conversation

    def _plan_cut(
        self,
        plan: Plan,
        body_first: int,
        fixed_cost: int,
        pins: dict[int, TranscriptUnit],
        earlier: SummarySections,
        context: HistoryContext,
        reason: CompactionReason,
        shrink: int = 0,
        savings: dict[int, int] | None = None,
        later: bool = False,
    ) -> CutPlan:
        """`plan_cut` with this compactor's reserves. Except on `manual`, the verbatim tail is at most
        `keep_recent_tokens` less `shrink`: the event goes deep. `savings`: tokens stubs take off units.
        `later`: as an event will plan it once the run has gone on, the run's question reserved though it
        is the newest unit now."""
        counter, saved = context.counter, savings or {}
        return plan_cut(
            unit_costs=[
                sum(plan.per_message[u.start : u.end]) - saved.get(i, 0)
                for i, u in enumerate(plan.units[body_first:], body_first)
            ],
            body_first=body_first,
            target=context.limits.target,
            fixed_cost=fixed_cost,
            summary_reserve=self.settings.summary_max_tokens
            + SUMMARY_FRAMING_TOKENS
            + self._trail_budget(context),
            pinned={i: rendered.tokens + PINNED_UNIT_FRAMING_TOKENS for i, rendered in pins.items()},
            # room for the stored-transcript reference: this compaction's, or the earlier one carried on
            pinned_carried=counter.count_text(earlier.pinned)
            + (TRANSCRIPT_REFERENCE_TOKENS if context.store is not None or earlier.reference else 0),
            pinned_section_cost=counter.count_text(PINNED_HEADING) + PINNED_UNIT_FRAMING_TOKENS + SEAL_TOKENS,
            manual=reason != 'trigger',
            tail_cap=None if reason == 'manual' else max(self._recent_tokens(context) - shrink, 0),
            keep_from=latest_prompt_unit(plan, body_first),
            question=body_question(plan, body_first, pins, context.run_id, newest_too=later),
        )

    def _recent_tokens(self, context: HistoryContext) -> int:
        """The verbatim tail at the trigger, which the cheap tier leaves whole: `keep_recent_tokens`, else an
        eighth of the target."""
        keep_recent = self.settings.keep_recent_tokens
        return keep_recent if keep_recent is not None else context.limits.target // 8

    async def _stub(
        self,
        plan: Plan,
        cut: Cut,
        context: HistoryContext,
        event: Compaction,
    ) -> list[ModelMessage] | None:
        """The cheap tier: tool outputs and files before the verbatim tail stored and stubbed, when that alone
        reaches the target; None when the summary is needed."""
        stubs = self._planned_stubs(plan, cut, context, event)
        if stubs is None:
            return None
        if not await store_stubbed(stubs, context):
            return None  # the summary stores the whole transcript instead, or waits (`_spill`)
        counter = context.counter
        result, _ = keep_loads(event.messages, apply_stubs(plan.messages, stubs), plan.head + 1, counter)
        after = event.overhead + counter.count_messages(result)
        if after > context.limits.target:
            return None  # the planned costs were off: the summary decides (the stored originals do no harm)
        announce(context, event, 0)
        return self._finish(
            context, event, Outcome(result, after, Summary('', 'stubs', 0, ''), 0, stubbed=len(stubs))
        )

    def _planned_stubs(
        self, plan: Plan, cut: Cut, context: HistoryContext, event: Compaction, growth: int = 0
    ) -> list[Stub] | None:
        """Stubs when they alone end the event (within the target, cheaper by `_depth`); else None. `growth`:
        tokens the history adds before the event (a background summary plans ahead of it)."""
        if context.store is None:
            return None
        stubs = self._stubs_from(cut.body_first, plan, cut, context)
        if not stubs:
            return None
        body_start = plan.units[cut.body_first].start
        replaced = sum(plan.per_message[body_start : plan.units[cut.verbatim].start])
        saved = sum(s.tokens_before - s.tokens_after for s in stubs)
        step = unit_step(plan, cut.body_first)
        now = event.overhead + sum(plan.per_message)
        # the outputs added until the event are stubbed there too: counted whole, an event that will end with
        # stubs looks like one that needs a summary, and a background summary takes the cheap tier's place
        stubbed = now - saved + stubbed_growth(growth, step, replaced=replaced, saved=saved)
        if stubbed > context.limits.target:
            return None
        summary_tokens = self.settings.summary_max_tokens // 2
        # the same growth joins the span the summary replaces there, but for the newest step (as when stubbed)
        span = replaced + max(growth - step, 0)
        costs = EventCosts(
            stubbed=stubbed,
            summarized=now + growth - span + summary_tokens + self._trail_budget(context),
            trigger=context.limits.trigger,
            growth=step,
            view_tokens=min(span, self.settings.summarizer_view_tokens or span),
            summary_tokens=summary_tokens,
        )
        return stubs if stubs_suffice(costs, cached_input_ratio=self.settings.cached_input_ratio) else None

    def _stubs_from(self, first: int, plan: Plan, cut: Cut, context: HistoryContext) -> list[Stub]:
        units = plan.units
        spans = [
            (units[i].start, units[i].end)
            for i in range(first, cut.verbatim)
            if i not in cut.pins and i != cut.question
        ]
        return plan_stubs(
            plan.messages,
            spans,
            counter=context.counter,
            make_id=context.artifact_id,
            min_tokens=self.settings.stub_least(context.limits),
            head_chars=self.settings.stub_head_chars,
        )

    def _choose_cut(
        self,
        plan: Plan,
        reserved: int,
        reason: CompactionReason,
        context: HistoryContext,
        tokens: int,
        *,
        shrink: int = 0,
        quiet: bool = False,
    ) -> Cut | None:
        """None when nothing can be compacted (warned at the trigger unless `quiet`). `shrink`: room a
        background summary leaves for what the history adds until its trigger."""
        head = plan.head
        body_first = next(
            i for i, u in enumerate(plan.units) if u.start >= head + (plan.previous is not None)
        )
        found = summary_sections(plan.messages[plan.previous]) if plan.previous is not None else None
        fixed_cost = reserved + sum(plan.per_message[:head])
        cut = self._cut(plan, body_first, fixed_cost, found or SummarySections(''), context, reason, shrink)
        if cut is None and not quiet and reason == 'trigger':
            context.warn(
                'compaction_impossible',
                'the history is over the compaction trigger but every unit after the preserved head is '
                'needed to reach the target; nothing was compacted',
                tokens=tokens,
                trigger=context.limits.trigger,
            )
        return cut

    def _cut(
        self,
        plan: Plan,
        body_first: int,
        fixed_cost: int,
        earlier: SummarySections,
        context: HistoryContext,
        reason: CompactionReason,
        shrink: int = 0,
    ) -> Cut | None:
        """With a store, the previous transcript reference gives way to this one's (whose first line names
        the previous one)."""
        pins = pinned_units(plan, body_first, context.counter, context.pin)
        cut = self._plan_cut(plan, body_first, fixed_cost, pins, earlier, context, reason, shrink)
        if cut.unit is None:
            return None
        return Cut(
            unit=cut.unit,
            verbatim=cut.verbatim if cut.verbatim is not None else cut.unit,
            body_first=body_first,
            pins=pins,
            earlier=earlier,
            previous_transcripts=[earlier.transcript]
            if earlier.transcript and context.store is not None
            else [],
            question=body_question(plan, body_first, pins, context.run_id),
        )


def pinned_units(
    plan: Plan, body_first: int, counter: TokenCounter, pin: PinPredicate | None
) -> dict[int, TranscriptUnit]:
    """The pinned units after the head but the last (which stays verbatim anyway), rendered."""
    pins: dict[int, TranscriptUnit] = {}
    for index in range(body_first, len(plan.units) - 1):
        unit = plan.units[index]
        messages = plan.messages[unit.start : unit.end]
        if any(marker_kind(m) is not None for m in messages) or not is_pinned(messages, pin):
            continue
        rendered = render_units(
            messages,
            [Unit(0, len(messages), unit.starts_with_request)],
            counter,
            tool_result_max_tokens=None,
            system_prompts=False,
        )
        pins[index] = rendered[0] if rendered else TranscriptUnit('', 0, len(messages))
    return pins


def latest_prompt_unit(plan: Plan, body_first: int) -> int | None:
    """The latest user prompt: the instruction the agent is working on, left verbatim when it can be."""
    for index in range(len(plan.units) - 1, body_first - 1, -1):
        unit = plan.units[index]
        if any(is_user_prompt(m) for m in plan.messages[unit.start : unit.end]):
            return index
    return None


def body_question(
    plan: Plan,
    body_first: int,
    pins: dict[int, TranscriptUnit],
    run_id: str | None,
    *,
    newest_too: bool = False,
) -> int | None:
    """The unit of the current run's question when the summary could take it: in the body, before the last
    unit (or the last too, with `newest_too`), and not pinned (a pin is kept anyway); else None."""
    index = question_unit(plan.messages, plan.units, run_id)
    end = len(plan.units) if newest_too else len(plan.units) - 1
    if index is None or not body_first <= index < end or index in pins:
        return None
    return index

"""Background summaries (`CompactionSettings.background_start`): the next compaction's summary made ahead of
its event, used when the event cuts where it did, else thrown away (each said by an event and a span)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import use_span
from pydantic_ai.messages import ModelMessage
from pydantic_ai.usage import RunUsage

from ...context._context import HistoryContext
from ...context._llm import add_usage
from ...events import (
    BackgroundDiscardReason,
    BackgroundSummaryDiscarded,
    BackgroundSummaryStarted,
    BackgroundSummaryUsed,
    HistoryEvent,
)
from ...messages._clock import perf
from ...tokens import TokenEstimate
from ._background import BackgroundJob
from ._compaction import Compaction, Cut, Evicted, Plan, Summary, unit_savings, unit_step, unit_tokens
from ._cutting import body_question
from ._lead import Lead, plan_lead, step_growth
from ._plan import CutPlan
from ._provider import ProviderCompaction
from ._stubs import Stub

if TYPE_CHECKING:
    from opentelemetry.trace import Span


logger = logging.getLogger('pydantic_ai_history.compactor')

ROOM_SLACK = 0.05
"""The share of the verbatim tail's budget a background summary's room keeps aside. The room extrapolates what
stubs leave of the growth from the one stub of its tail, and stubs name ids that tokenize a few tokens either
way (102 to 115 tokens for outputs of one size in the chat of `benchmarks/bench_chat_background.py`): a room
planned to the token let requests go out until the one whose event fell just past the cut (the summary, paid
for, thrown away and made again in the request path; 2% left that in 1 chat of 10)."""


class BackgroundSummarizing(ProviderCompaction):
    """Summaries made ahead of their compaction, in the background: a part of `Compactor`."""

    async def _anticipate(
        self, messages: list[ModelMessage], context: HistoryContext, estimate: TokenEstimate
    ) -> None:
        start = self.settings.background_start
        run = context.run_id
        if start is None or run is None or not self._may_start(context):
            return
        held = self._background.get(run)
        if held is not None:
            if held.extended_by(messages):
                return
            self._background.pop(run)
            self._end(held, 'history_changed', context.emit_event)
        trigger = context.limits.trigger
        if estimate.total <= trigger * start or not self._has_room(run):
            return
        step = step_growth(messages, estimate.per_message)
        # the trigger is the earliest a summary can be needed (its cut holds that far): nothing to plan before
        early = self._lead(estimate.total, step, trigger, context)
        if not early.start:
            self._postpone(early, context)
            return
        started = await self._background_job(messages, context, estimate, step)
        if started is not None:
            self._register(*started, messages, estimate, context)

    async def _start_at_trigger(
        self, messages: list[ModelMessage], context: HistoryContext, estimate: TokenEstimate
    ) -> bool:
        """Past the trigger with no summary under way (the run crossed it sooner than its growth said, or in
        its first request: a chat's next turn), start the event's summary now, as a start ahead would have;
        whether it started. The request then goes out as it is while the summary is made, as the next ones do
        (`Compactor._still_making`), rather than wait for it in the request path."""
        run = context.run_id
        if (
            run is None
            or not self._may_start(context)
            or estimate.total > context.limits.budget
            or self._background.get(run) is not None
            or not self._has_room(run)
        ):
            return False
        step = step_growth(messages, estimate.per_message)
        started = await self._background_job(messages, context, estimate, step)
        if started is None:
            return False
        self._register(*started, messages, estimate, context)
        return True

    def _register(
        self,
        job: BackgroundJob[Summary],
        lead: Lead,
        messages: list[ModelMessage],
        estimate: TokenEstimate,
        context: HistoryContext,
    ) -> None:
        """Hold `job` for its run, and say it started (an event and a log line)."""
        run, trigger = context.run_id, context.limits.trigger
        replaced = self._background.add(job)
        if replaced is not None:  # a job started for the run while this one was planned
            self._end(replaced, 'history_changed', context.emit_event)
        context.emit_event(
            BackgroundSummaryStarted(
                run_id=run,
                snapshot_messages=len(messages),
                snapshot_tokens=estimate.total,
                trigger_tokens=trigger,
                evicted_messages=job.evicted,
                reason=lead.reason,
                tokens_per_step=lead.tokens_per_step,
                expected_requests=lead.expected_requests,
                needed_tokens=lead.needed_tokens,
                requests_left=lead.requests_left,
            )
        )
        logger.info(
            'compactor: the summary of %d messages started in the background at %d of %d tokens (%s: %d '
            'requests until it is needed at %d tokens, a summary takes %s)',
            job.evicted,
            estimate.total,
            trigger,
            lead.reason,
            lead.requests_left,
            lead.needed_tokens,
            lead.expected_requests if lead.expected_requests is not None else 'an unknown number of',
        )

    def _lead(
        self, tokens: int, step: int, needed: int, context: HistoryContext, request_tokens: int | None = None
    ) -> Lead:
        return plan_lead(
            tokens=tokens,
            step=step,
            trigger=context.limits.trigger,
            needed=needed,
            expected=self._background.pace.expected,
            run_left=self._run_left(context.run_id),
            request_tokens=request_tokens,
        )

    def _run_left(self, run: str | None) -> int | None:
        """The requests the run is expected to make still (the fewest the recent runs that got as far made
        after that); None when unknown."""
        made = self._background.step_of(run) if run is not None else None
        return self._background.lengths.fewest_left(made) if made is not None else None

    def _may_start(self, context: HistoryContext) -> bool:
        """Whether a background summary may start for this request's run at all."""
        return (
            self.settings.background_start is not None
            and context.background_allowed
            and self.settings.method == 'llm'
        )

    def _postpone(self, lead: Lead, context: HistoryContext) -> None:
        """Say why no summary starts at this request though the history is past `background_start`."""
        logger.debug(
            'compactor: no background summary yet: %d requests until one is needed at %d tokens (%d a step), '
            'a summary takes %s, the run is expected to make %s more',
            lead.requests_left,
            lead.needed_tokens,
            lead.tokens_per_step,
            lead.expected_requests if lead.expected_requests is not None else 'an unknown number of',
            lead.run_requests_left if lead.run_requests_left is not None else 'an unknown number of',
        )
        context.annotate_span(
            {
                'pydantic_ai_history.background.postponed': True,
                'pydantic_ai_history.background.requests_left': lead.requests_left,
                'pydantic_ai_history.background.needed_tokens': lead.needed_tokens,
                'pydantic_ai_history.background.run_ends_first': lead.run_ends_first,
            }
        )

    async def _background_job(
        self, snapshot: list[ModelMessage], context: HistoryContext, estimate: TokenEstimate, step: int
    ) -> tuple[BackgroundJob[Summary], Lead] | None:
        """The next event planned on `snapshot` as the trigger will plan it, its summary started in a task
        when it is time (`_lead`, with where its cut stops fitting); None when that event will not summarize,
        or not from this snapshot."""
        assert context.run_id is not None
        begun = await self._begin(snapshot, estimate, context, 'trigger', None)
        if begun is None:
            return None
        event, plan, _ = begun
        if plan.messages is not event.messages:
            return None
        # What the history adds until the trigger joins the verbatim tail: the cut leaves it that room.
        # Counted from the estimate the trigger is compared with (the event's, of the history with our own
        # parts split out, is counted afresh and may differ from it by hundreds of tokens).
        growth = max(context.limits.trigger - estimate.total, 0)
        trigger_cut = self._choose_cut(plan, event.reserved, 'trigger', context, event.tokens, quiet=True)
        if trigger_cut is None or (
            self.settings.stub_tool_results
            and self._planned_stubs(plan, trigger_cut, context, event, growth) is not None
        ):
            return None
        cut = self._choose_cut(
            plan, event.reserved, 'trigger', context, event.tokens, shrink=growth, quiet=True
        )
        evicted = self._evicted(plan, cut, context, None) if cut is not None else None
        if cut is None or evicted is None:
            return None
        room = self._room(plan, event, cut, evicted.cut_at, context)
        if room < growth:
            return None  # the event would cut later: its summary would be thrown away (started nearer it)
        # in the event's own count: counted from the trigger's estimate it measured dearer (RESULTS.md); the
        # trigger's crossing in the trigger's own
        needed = min(context.limits.budget, event.tokens + room)
        lead = self._lead(event.tokens, step, needed, context, request_tokens=estimate.total)
        if not lead.start:
            self._postpone(lead, context)
            return None
        if not self._has_room(context.run_id):  # the capacity filled while this was planned
            return None
        usage = RunUsage()
        # its own usage, added to the run's when done; the requests that use or discard it emit its events
        own = dataclasses.replace(context, usage=usage, emit_event=ignore_event, open_spans=None)
        span = background_span(context, len(evicted.messages), event.tokens)
        job = BackgroundJob[Summary].start(
            self._background_summary(evicted, own, context.usage, span),
            run_id=context.run_id,
            snapshot=list(snapshot),
            cut_at=evicted.cut_at,
            key=evicted.key,
            evicted=len(evicted.messages),
            usage=usage,
            span=span,
            room=room,
        )
        return job, lead

    def _count_request(self, context: HistoryContext) -> None:
        """One more request of the run: the first to see its background summary ready says what it took; the
        run's length is learned where a summary may start for it."""
        run = context.run_id
        step = getattr(context.run_context, 'run_step', None)
        if run is not None and isinstance(step, int) and self._may_start(context):
            self._background.note_step(run, step)
        held = self._background.get(run)
        if held is not None and (took := held.count_request()) is not None and held.usage.requests:
            self._background.pace.observe(took)

    def _stubbing(self, context: HistoryContext) -> bool:
        """Whether the event stubs the tool outputs the history adds after a background summary's snapshot."""
        return self.settings.stub_tool_results and context.store is not None

    def _has_room(self, run: str) -> bool:
        if self._background.has_room(run):
            return True
        logger.debug(
            'compactor: %d runs hold a background summary (max_background_summaries): run %s summarizes at '
            'its trigger',
            len(self._background),
            run,
        )
        return False

    def _room(self, plan: Plan, event: Compaction, cut: Cut, cut_at: int, context: HistoryContext) -> int:
        """How far the history may grow past the snapshot and an event still keep everything from `cut_at` on
        verbatim within the target (`_held_cut`'s test), one more step of it aside. What that event reserves
        outside its tail's budget (pinned units, and the run's question, however large) is left out of the
        tail and of the step. Where the event stubs the tool outputs added since (and those of the tail), a
        token of growth costs what stubs leave of one, measured on the tail, but for the newest ones the
        event keeps whole (its verbatim tail, `keep_recent_tokens`, the step included)."""
        fits = self._fit_with(plan, event, cut, context, later=True)
        # the reserves `_plan_cut` makes (`later`): the same units, the same question
        reserved = {*cut.pins, body_question(plan, cut.body_first, cut.pins, context.run_id, newest_too=True)}
        newest = len(plan.units) - 1
        step = max(0 if newest in reserved else unit_tokens(plan, newest), unit_step(plan, cut.body_first))
        left = fits.tail_budget - int(fits.tail_budget * ROOM_SLACK) - step
        tail = sum(plan.per_message[cut_at:]) - sum(
            unit_tokens(plan, i) for i in reserved if i is not None and plan.units[i].start >= cut_at
        )
        first = next((i for i, u in enumerate(plan.units) if u.start == cut_at), None)
        # the event keeps its newest units whole up to `keep_recent_tokens` (one at least: the step), in steps
        whole = min(max(self._recent_tokens(context) - step, 0) // max(step, 1) * step, left)
        if not self._stubbing(context) or first is None or left <= whole:
            return left - tail
        stubs = self._stubs_from(first, plan, dataclasses.replace(cut, verbatim=len(plan.units)), context)
        kept = tail - sum(s.tokens_before - s.tokens_after for s in stubs)
        if not 0 < kept < tail:
            return left - tail
        # the tail may reach `whole` tokens verbatim, and past them, what stubs leave of it
        return whole + (left - whole) * tail // kept - tail

    def _fit_with(
        self,
        plan: Plan,
        event: Compaction,
        cut: Cut,
        context: HistoryContext,
        savings: dict[int, int] | None = None,
        later: bool = False,
    ) -> CutPlan:
        """The cut this event's target allows from `cut`'s body on (`_plan_cut` as `compact()` plans it;
        `later`: as a later event will)."""
        head = event.reserved + sum(plan.per_message[: plan.head])
        return self._plan_cut(
            plan, cut.body_first, head, cut.pins, cut.earlier, context, 'manual', savings=savings, later=later
        )

    async def _background_summary(
        self, request: Evicted, context: HistoryContext, run_usage: object, span: Span | None
    ) -> Summary:
        try:
            with use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
                return await self._summary(request, context)
        finally:
            add_usage(run_usage, context.usage)

    def _held_cut(
        self, plan: Plan, event: Compaction, cut: Cut, held: BackgroundJob[Summary], context: HistoryContext
    ) -> tuple[Cut, list[Stub]] | None:
        """The background summary's cut when this event can use it (a unit boundary, and what it leaves, stubs
        of the outputs added since included, fits the target), with those stubs; else None and `held.reason`
        says why."""
        if plan.messages is not event.messages:
            held.reason = 'inputs_changed'  # a cached prefix summary stands in for part of it
            return None
        unit = next((i for i, u in enumerate(plan.units) if u.start == held.cut_at), None)
        if unit is None or unit <= cut.body_first:
            held.reason = 'cut_no_longer_fits'
            return None
        gap = self._stubs_from(unit, plan, cut, context) if self._stubbing(context) else []
        fits = self._fit_with(plan, event, cut, context, savings=unit_savings(plan, gap))
        if unit < (fits.verbatim if fits.verbatim is not None else cut.body_first):
            held.reason = 'cut_no_longer_fits'
            return None
        return dataclasses.replace(cut, unit=unit, verbatim=unit), gap

    async def _summary_for(
        self, request: Evicted, context: HistoryContext, held: BackgroundJob[Summary] | None
    ) -> Summary:
        """The background summary when it has this event's key (waited for), else a new one."""
        if held is None or held.key != request.key:
            if held is not None:
                self._end(held, 'inputs_changed', context.emit_event)
            return await self._summary(request, context)
        ready, asked = held.ready, perf()
        try:
            summary = await held.result()
        except Exception:
            held.reason = 'failed'
            logger.warning('compactor: the background summary failed; summarizing now', exc_info=True)
            return await self._summary(request, context)
        held.used = True
        cost = held.usage
        if held.ready_after is None:  # first seen ready here, or waited for at this request
            held.ready_after = held.requests + (not ready)
            if cost.requests:
                self._background.pace.observe(held.ready_after)
        used = BackgroundSummaryUsed(
            run_id=held.run_id,
            evicted_messages=held.evicted,
            method=summary.method,
            ready=ready,
            waited_ms=0.0 if ready else (perf() - asked) * 1000,
            deferred_requests=held.deferred,
            lead_ms=(asked - held.started) * 1000,
            summarizer_calls=cost.requests,
            input_tokens=cost.input_tokens,
            output_tokens=cost.output_tokens,
        )
        held.close_span({'pydantic_ai_history.background.outcome': 'used'})
        context.emit_event(used)
        context.annotate_span(
            {
                'pydantic_ai_history.background.used': True,
                'pydantic_ai_history.background.waited_ms': used.waited_ms,
            }
        )
        return dataclasses.replace(summary, background=True)

    def _end(
        self, job: BackgroundJob[Any], reason: BackgroundDiscardReason, emit: Callable[[HistoryEvent], None]
    ) -> None:
        if job.ended:
            return
        job.ended = True
        finished = job.ready
        if not finished:
            self._background.pace.exceeded(job.requests)
        self._background.cancel(job)
        cost = job.usage
        job.close_span(
            {
                'pydantic_ai_history.background.outcome': 'discarded',
                'pydantic_ai_history.background.reason': reason,
            }
        )
        logger.info(
            'compactor: a background summary was thrown away (%s; %s, %d summarizer call(s))',
            reason,
            'finished' if finished else 'cancelled',
            cost.requests,
        )
        emit(
            BackgroundSummaryDiscarded(
                run_id=job.run_id,
                reason=reason,
                finished=finished,
                summarizer_calls=cost.requests,
                input_tokens=cost.input_tokens,
                output_tokens=cost.output_tokens,
            )
        )


BACKGROUND_SPAN = 'background_compaction'
"""The span of a summary made ahead of its event, from its start until it is used or thrown away (its
attributes say which, and why); the summarizer's chat spans are its children. Named like harness's."""


def background_span(context: HistoryContext, evicted: int, tokens: int) -> Span | None:
    if context.tracer is None:
        return None
    return context.tracer.start_span(
        BACKGROUND_SPAN,
        attributes={
            'pydantic_ai_history.compaction.evicted_messages': evicted,
            'pydantic_ai_history.tokens_before': tokens,
        },
    )


def ignore_event(event: HistoryEvent) -> None:
    """The events of a background job's own context: the compactor says what became of the job."""

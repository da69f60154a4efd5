"""The guard every stage runs under: a stage that raises or adds an invariant violation is skipped, an output
that newly passes the budget is replaced by its input, and what a request rewrote of the cached prefix is
counted (`RequestProcessed`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage, ModelResponse

from ..budget.notice import NearLimitNotice
from ..context._context import FAR_BELOW, HistoryContext, HistoryStage
from ..events import HistoryEvent, RequestProcessed, StageFailed
from ..messages._clock import perf, wall
from ._agent_checks import tool_name
from ._runs import Runs, RunState
from ._settings_checks import CONFIG_ERRORS
from ._spans import DeferredSpans, request_attributes

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from ..budget._policy import ContextLimits
    from ._validity import InputCheck, Validity

logger = logging.getLogger('pydantic_ai_history')

PROCESSED: ContextVar[tuple[RequestProcessed, ContextLimits] | None] = ContextVar(
    'pydantic_ai_history_processed', default=None
)
"""The `RequestProcessed` of the latest `process` call in this context and the limits it was processed for:
the request hook reads them after the call (the planned budget, the near-limit notice) without changing what
`process`, which apps override, returns."""


def sent_before(messages: Sequence[ModelMessage]) -> int:
    """How many leading messages an earlier request already sent: every one before the newest response."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], ModelResponse):
            return index
    return 0


def first_change(before: Sequence[ModelMessage], after: Sequence[ModelMessage]) -> int:
    """The first index where `after` no longer holds `before`'s message (the same object)."""
    for index, (old, new) in enumerate(zip(before, after, strict=False)):
        if old is not new:
            return index
    return min(len(before), len(after))


def _starts(stages: Sequence[HistoryStage], notice: NearLimitNotice | None) -> list[float]:
    """The fractions of the limit where something starts before the trigger: the near-limit notice, a stage's
    background summary."""
    starts = [notice.start] if notice is not None else []
    for stage in stages:
        start = getattr(getattr(stage, 'settings', None), 'background_start', None)
        if isinstance(start, float):
            starts.append(start)
    return starts


class GuardedStages:
    """The stages of one request run under the guard, mixed into `HistoryCapability`."""

    if TYPE_CHECKING:
        readback_tool_name: str
        _stages: list[HistoryStage]
        _runs: Runs
        _notice: NearLimitNotice | None

        def _emit(self, event: HistoryEvent) -> None: ...

    _below: tuple[list[HistoryStage], NearLimitNotice | None, float] | None = None

    def _far_below(self) -> float:
        """How far below its limit a bound must prove a history for no stage to look at it: `FAR_BELOW`, or
        lower where a notice or a background summary starts lower (found once for these stages and notice:
        their settings are frozen)."""
        known = self._below
        if known is None or known[0] is not self._stages or known[1] is not self._notice:
            below = min([FAR_BELOW, *_starts(self._stages, self._notice)])
            known = self._below = (self._stages, self._notice, below)
        return known[2]

    async def _process(
        self,
        messages: list[ModelMessage],
        context: HistoryContext,
        started: float,
        tracer_of: Callable[[], Tracer | None],
    ) -> list[ModelMessage]:
        # far below its limit: bounded by bytes, not counted, and the stages with nothing to do are skipped
        proved = context.compaction_request is None and await context.prove_fits_off_loop(
            messages, below=self._far_below()
        )
        if not proved:  # a large new message is tokenized off the event loop
            await context.count_newest(messages)
        before = context.estimate(messages)
        run = self._runs[context.run_id]
        check = run.input_check
        validity = await checked_input(check, messages, context)
        new_violations = check.unreported(validity)
        if new_violations:
            errors = sum(v.severity == 'error' for v in validity.violations)
            context.warn(
                'invalid_input',
                f'the history has {errors} invariant violation(s) before processing; '
                'no stage may add to them',
                violations=[str(v) for v in new_violations[:20]],
            )
        # far below its limit, the stages that say they would return the history as it is are skipped
        unchanged = _unchanged_when_fits(self._stages, messages, context) if proved else ()
        # the run's tracer is looked for only when a stage runs: an idle request leaves no span
        runs_stages = len(unchanged) < len(self._stages)
        spans = _spans(context, tracer_of, started) if runs_stages else None
        sent = sent_before(messages)
        try:
            current, rewriter = messages, None
            if runs_stages:
                current, validity, rewriter = await self._run_stages(
                    messages, context, before.total, validity, unchanged, sent, spans
                )
            check.adopt(validity)
            # the idle path: nothing changed, so the estimate of the input stands
            after = before if current is messages else context.estimate(current)
            if not after.bounded:  # a history far below its limit is not counted, nor anchored on
                context.counter.mark_sent(current, tool_definitions=context.tool_definitions or None)
            rewrite = self._rewrite(messages, current, sent, rewriter, context, run)
            event = RequestProcessed(
                run_id=context.run_id,
                messages_before=len(messages),
                messages_after=len(current),
                tokens_before=before.total,
                tokens_after=after.total,
                tokenizer_tokens_after=after.tokenizer,
                context_window=context.context_window,
                duration_ms=(perf() - started) * 1000,
                anchored=after.anchor_verified,
                rewritten_messages=rewrite[0],
                rewritten_tokens=rewrite[1],
                rewritten_by=rewrite[2],
            )
            if spans is not None:  # an idle request leaves no span (see `DeferredSpans`)
                spans.finish(current is not messages, request_attributes(event, context))
        finally:
            if spans is not None:
                spans.close()
        self._emit(event)
        PROCESSED.set((event, context.limits))
        return current

    async def _run_stages(
        self,
        messages: list[ModelMessage],
        context: HistoryContext,
        before: int,
        validity: Validity,
        unchanged: Collection[int],
        sent: int,
        spans: DeferredSpans | None,
    ) -> tuple[list[ModelMessage], Validity, str | None]:
        """The stages not `unchanged` run in turn, each under the guard; the output, its check, and the first
        stage that rewrote one of the `sent` messages an earlier request sent (the input of `before` tokens
        and its check if the output newly passes the budget)."""
        current = messages
        given: Validity | None = None  # the input's check, kept once a stage changes the history
        rewriter: str | None = None
        for index, stage in enumerate(self._stages):
            if current is messages and index in unchanged:
                continue
            stage_input = current
            if given is None:
                given = validity.copy()
            current = await self._run_stage(stage.name, stage, current, context, validity, spans)
            if rewriter is None and current is not stage_input and first_change(messages, current) < sent:
                rewriter = stage.name
        if given is not None and self._over_budget(current, messages, before, context, 'processor'):
            return messages, given, None
        return current, validity, rewriter

    async def _run_stage(
        self,
        name: str,
        stage: Callable[[list[ModelMessage], HistoryContext], Awaitable[list[ModelMessage]]],
        messages: list[ModelMessage],
        context: HistoryContext,
        validity: Validity,
        spans: DeferredSpans | None = None,
    ) -> list[ModelMessage]:
        result = messages
        try:
            if spans is not None:
                spans.stage_started(name)
            result = await stage(messages, context)
        except CONFIG_ERRORS:
            raise
        except Exception as exc:
            logger.exception('stage %r failed; continuing with its input', name)
            self._emit(StageFailed(run_id=context.run_id, stage=name, error=f'{type(exc).__name__}: {exc}'))
            return messages
        finally:
            if spans is not None:
                spans.stage_finished(changed=result is not messages)
        if result is messages:
            return result
        problem = worse(result, validity)
        if problem is not None:
            logger.error('stage %r made the history worse (%s); output discarded', name, problem)
            self._emit(StageFailed(run_id=context.run_id, stage=name, error=problem))
            return messages
        return result

    def _over_budget(
        self,
        result: list[ModelMessage],
        messages: list[ModelMessage],
        before: int,
        context: HistoryContext,
        stage: str,
    ) -> bool:
        """Whether `result` newly passes the budget (`messages` had `before` tokens): `stage`'s failure.
        Checked on the whole pipeline's output: a later stage may bring a grown history back within budget."""
        budget = context.limits.budget
        after = before if result is messages else context.estimate(result).total
        if after <= before or after <= budget:
            return False
        fitted = 'fitted' if before <= budget else 'was already over'
        problem = (
            f'the output is {after:,} tokens, the input {before:,}, which {fitted} the budget of {budget:,}'
        )
        logger.error('%s made the history worse (%s); its input kept', stage, problem)
        self._emit(StageFailed(run_id=context.run_id, stage=stage, error=problem))
        return True

    def _rewrite(
        self,
        messages: list[ModelMessage],
        result: list[ModelMessage],
        sent: int,
        rewriter: str | None,
        context: HistoryContext,
        run: RunState,
    ) -> tuple[int, int, str | None]:
        """The prefix rewrite this request causes: sent messages that changed, tokens cached again from the
        first of them, and what changed them (a stage, or the read-back tool appearing: tools come first)."""
        offered = self._readback_offered(context, run)
        first = first_change(messages, result) if rewriter is not None else sent
        if offered:
            first, rewriter = 0, self.readback_tool_name
        if first >= sent or rewriter is None:
            return 0, 0, None
        new = len(messages) - sent  # the newest response and the current request were never sent
        counts = context.counter
        tokens = sum(counts.count_message(m) for m in result[first : max(len(result) - new, first)])
        logger.info(
            'prefix rewrite by %s: %d sent message(s) changed, ~%d tokens cached again',
            rewriter,
            sent - first,
            tokens,
        )
        return sent - first, tokens, rewriter

    def _readback_offered(self, context: HistoryContext, run: RunState) -> bool:
        """Whether this request is the first of its run to offer `read_artifact` (known from the request's
        tool definitions, which the capability passes; never on the run's first request: none is cached)."""
        if not context.tool_definitions:
            return False
        offered = self.readback_tool_name in map(tool_name, context.tool_definitions)
        before, run.offered_readback = run.offered_readback, offered
        return offered and before is False

    def _input_check(self, run_id: str | None) -> InputCheck:
        """The run's incremental input check: each run continues its own previous input."""
        return self._runs[run_id].input_check


async def checked_input(check: InputCheck, messages: list[ModelMessage], context: HistoryContext) -> Validity:
    """The input check of `messages`: a long unread stretch (a reloaded chat's first request) is read off the
    event loop."""
    if check.long(messages):
        return await context.off_loop(check.check, messages)
    return check.check(messages)


def _spans(
    context: HistoryContext, tracer_of: Callable[[], Tracer | None], started: float
) -> DeferredSpans | None:
    """The request's deferred spans on the run's tracer (begun when the request did), handed to the stages
    through `context`; None when nothing records them."""
    tracer = tracer_of()
    if tracer is None:
        return None
    spans = DeferredSpans(tracer, started_ns=int((wall() - (perf() - started)) * 1e9))
    context.tracer, context.open_spans = tracer, spans.open
    return spans


def _unchanged_when_fits(
    stages: Sequence[HistoryStage], messages: list[ModelMessage], context: HistoryContext
) -> set[int]:
    """The positions of the stages that say they return `messages`, proved far below their limit, as they
    are (see `HistoryStage`); a stage that does not say, or fails to, runs."""
    unchanged: set[int] = set()
    for index, stage in enumerate(stages):
        says = getattr(stage, 'unchanged_when_fits', None)
        try:
            if says is not None and says(messages, context) is True:
                unchanged.add(index)
        except Exception:  # a shortcut only: the stage runs under the guard, which reports what fails
            logger.debug('stage %r could not say if it changes a fitting history', stage.name, exc_info=True)
    return unchanged


def worse(result: list[ModelMessage], validity: Validity) -> str | None:
    """Why a stage's output is worse than its input (empty, or a violation the input, whose check `validity`
    holds, had not), or None; a better output becomes what `validity` checks the next stage's against."""
    if not result:
        return 'invalid output: the history is empty'
    from ..messages.validate import StructureCheck  # a stage changed the history: checked as a whole

    structure = StructureCheck()
    structure.extend(result)
    violations = structure.violations(result)
    added = validity.added(violations, result)
    if added:
        return 'invalid output: ' + '; '.join(str(v) for v in added[:5])
    validity.accept(result, structure, violations)
    return None

"""Composes the stages; keeps per-run stats; turns every decision into an event, a log line and a span.

`HistoryProcessor` is the one object users hand to pydantic-ai: `history_processors=[processor]` on 1.x,
`capabilities=[processor.capability()]` (or `ProcessHistory(processor)`) on versions with capabilities.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext

from ._compat import HAS_CAPABILITIES, ModelMessage, run_id_of
from ._context import HistoryContext, HistoryStage, ScopeKey, default_scope
from .cache import MemoryCache, SummaryCache
from .events import (
    ArtifactProcessed,
    CompactionResult,
    HistoryEvent,
    HistoryWarning,
    RequestProcessed,
    StageFailed,
    WindowApplied,
)
from .store import ArtifactStore, MemoryStore
from .tokens import TokenCounter, TokenizerProfile
from .validate import PAIRING_CODES, StructureCheck, Violation
from .windows import ContextWindowUnknownError, model_info, model_name_of

__all__ = ('HistoryProcessor', 'HistoryStats', 'RunStats')

logger = logging.getLogger('pydantic_ai_history')

EventHandler = Callable[[HistoryEvent], None]


@dataclass
class RunStats:
    """Running totals for one agent run (or, in `HistoryStats.overall`, for all runs)."""

    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    peak_tokens_out: int = 0
    window_applications: int = 0
    compactions: int = 0
    summarizer_calls: int = 0
    compaction_methods: Counter[str] = field(default_factory=Counter)
    artifacts_by_strategy: Counter[str] = field(default_factory=Counter)
    artifact_cache_hits: int = 0
    """Artifacts whose conversion or summary came from the shared cache."""
    warnings: int = 0
    stage_failures: int = 0
    last_utilization: float | None = None
    """Tokens sent over the context window for the latest request (None when the window is unknown)."""
    peak_utilization: float | None = None

    @property
    def reduction_percent(self) -> float:
        """How much smaller the processed histories were than their inputs, over all requests."""
        return 100.0 * (1 - self.tokens_out / self.tokens_in) if self.tokens_in else 0.0

    def copy(self) -> RunStats:
        """A snapshot that later requests do not change."""
        return dataclasses.replace(
            self,
            compaction_methods=Counter(self.compaction_methods),
            artifacts_by_strategy=Counter(self.artifacts_by_strategy),
        )


@dataclass
class HistoryStats:
    """`processor.stats()`: a snapshot of the totals overall and per run, and the shared cache's hit counts.

    `runs` is keyed by the pydantic-ai run id (a stable per-run key on 1.0, which has no run ids); requests
    processed without a `RunContext` count only in `overall`. At most `max_tracked_runs` runs are kept, the
    least recently active dropped first.
    """

    overall: RunStats
    runs: dict[str, RunStats]
    cache_hits: int
    cache_misses: int

    @property
    def cache_hit_rate(self) -> float:
        total = self.cache_hits + self.cache_misses
        return self.cache_hits / total if total else 0.0


def _tracer() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer('pydantic_ai_history')


class HistoryProcessor:
    """Runs the stages in order over each model request's history.

    A stage that raises, or returns a worse history than it was given, is skipped for that request (a
    `StageFailed` event says why); the run goes on with the stage's input. Worse means: a tool call and its
    return that were paired no longer are, or any other invariant violation where the input had none. And
    the processed history is never bigger than the hard budget allows (the window's budget, else the context
    window): when a history that fitted no longer does, or one already over grew, the input is returned.
    Only a configuration error (`ContextWindowUnknownError`) is raised.
    """

    def __init__(
        self,
        stages: Sequence[HistoryStage],
        *,
        model: Any = None,
        context_window: int | None = None,
        context_utilization: float = 1.0,
        token_profile: TokenizerProfile | None = None,
        cache: SummaryCache | None = None,
        store: ArtifactStore | None = None,
        on_event: EventHandler | None = None,
        max_tracked_runs: int = 1_024,
        scope: ScopeKey | None = None,
    ) -> None:
        if not 0 < context_utilization <= 1:
            raise ValueError('context_utilization must be in (0, 1]')
        self.stages = list(stages)
        self.model = model
        self.context_window = context_window
        self.context_utilization = context_utilization
        self.token_profile = token_profile
        self.cache: SummaryCache = cache if cache is not None else MemoryCache()
        self.store: ArtifactStore = store if store is not None else MemoryStore()
        self.on_event = on_event
        self.scope = scope
        self._counters: dict[str | None, TokenCounter] = {}
        self._overall = RunStats()
        self._runs: OrderedDict[str, RunStats] = OrderedDict()
        self._max_tracked_runs = max_tracked_runs
        self._legacy_runs: dict[int, tuple[weakref.ReferenceType[Any], str]] = {}
        self._legacy_seq = 0
        self._tracer = _tracer()
        self._input_checks: OrderedDict[str | None, _InputCheck] = OrderedDict()

    # ---- pydantic-ai entry points -------------------------------------------------------------------

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history processor pydantic-ai calls before every model request."""
        return await self.process(messages, ctx=ctx)

    def capability(self) -> Any:
        """A capability for `Agent(capabilities=[...])` with the read-back tool (versions that have them)."""
        if not HAS_CAPABILITIES:
            raise RuntimeError(
                'this pydantic-ai version has no capabilities: use Agent(history_processors=[processor])'
            )
        from .capability import HistoryCapability

        return HistoryCapability(self)

    def readback_toolset(self) -> Any:
        """A toolset with `read_artifact` for what the artifact stage reduced (for `Agent(toolsets=...)`)."""
        from .readback import readback_toolset

        return readback_toolset(self.store, scope=self.scope_of)

    def scope_of(self, ctx: RunContext[Any] | None) -> str:
        """The scope a run's artifacts live in: the `scope` callable's answer, else `default_scope(ctx)`."""
        if ctx is None or self.scope is None:
            return default_scope(ctx)
        try:
            return str(self.scope(ctx))
        except Exception:
            # Never let a broken scope key widen access: the run gets a scope of its own.
            logger.exception('the scope callable raised; this run reads back only what it stored itself')
            return f'unscoped-run:{self._run_key(ctx) or id(ctx)}'

    # ---- processing -----------------------------------------------------------------------------------

    def counter_for(self, model: Any) -> TokenCounter:
        """The shared token counter for a model (memoization is per model family)."""
        name = model_name_of(model)
        counter = self._counters.get(name)
        if counter is None:
            counter = TokenCounter(name, profile=self.token_profile)
            self._counters[name] = counter
        return counter

    def make_context(
        self, *, ctx: Any = None, model: Any = None, tool_definitions: Sequence[Any] = ()
    ) -> HistoryContext:
        """The per-call context the stages receive."""
        model = (
            model
            if model is not None
            else (self.model if self.model is not None else getattr(ctx, 'model', None))
        )
        info = model_info(model, context_window=self.context_window)
        window = info.context_window
        if window is not None and self.context_utilization < 1:
            # every stage sees the used part of the window only: trigger, target and budgets all follow it
            window = int(window * self.context_utilization)
        run_key = self._run_key(ctx)
        return HistoryContext(
            counter=self.counter_for(model),
            context_window=window,
            model=model,
            run_context=ctx,
            run_id=run_key,
            cache=self.cache,
            store=self.store,
            emit_event=self._emit,
            usage=getattr(ctx, 'usage', None),
            tool_definitions=tuple(tool_definitions),
            scope=self.scope_of(ctx),
        )

    async def compact(
        self,
        messages: Sequence[ModelMessage],
        *,
        focus: str | None = None,
        ctx: Any = None,
        model: Any = None,
    ) -> list[ModelMessage]:
        """Compact now, whatever the trigger says; `focus` tells the summarizer what matters most.

        Guarded like every stage: if it raises or breaks the history, the history comes back unchanged and a
        `StageFailed` event says why. Raises `RuntimeError` when the processor has no compaction stage.
        """
        for stage in self.stages:
            compact = getattr(stage, 'compact', None)
            if compact is not None:
                history = list(messages)
                await self.store.prepare()
                context = self.make_context(ctx=ctx, model=model)
                check = self._input_check(context.run_id)
                validity = check.check(history)
                result = await self._run_stage(
                    _OnDemand(stage.name, compact, focus), history, context, validity
                )
                if result is not history:
                    problem = self._over_budget(result, context.estimate(history).total, context)
                    if problem is not None:
                        self._emit(StageFailed(run_id=context.run_id, stage=stage.name, error=problem))
                        return history
                check.adopt(validity)
                return result
        raise RuntimeError(
            'this processor has no compaction stage (create_history_processor(compaction=False)?)'
        )

    async def process(
        self,
        messages: Sequence[ModelMessage],
        *,
        ctx: Any = None,
        model: Any = None,
        tool_definitions: Sequence[Any] = (),
    ) -> list[ModelMessage]:
        """Run every stage over `messages` and return the new history (the input list is never changed).

        `tool_definitions` (the request's `ToolDefinition`s, which the capability passes) are counted in the
        estimate until the provider's usage has shown what instructions and tools really cost.
        """
        started = time.perf_counter()
        await self.store.prepare()  # a persisted id secret is loaded before the first id is made
        context = self.make_context(ctx=ctx, model=model, tool_definitions=tool_definitions)
        current = list(messages)
        if not current:
            context.warn('empty_history', 'the processor was given an empty history; returned unchanged')
            return current
        try:
            if self._tracer is None:
                return await self._process(current, context, started)
            with self._tracer.start_as_current_span('pydantic_ai_history.process') as span:
                return await self._process(current, context, started, span)
        except ContextWindowUnknownError:
            raise
        except Exception as exc:  # outside any stage, e.g. counting content of a kind nobody foresaw
            logger.exception('processing failed; the history is passed on unchanged')
            self._emit(
                StageFailed(run_id=context.run_id, stage='processor', error=f'{type(exc).__name__}: {exc}')
            )
            return current

    async def _process(
        self, messages: list[ModelMessage], context: HistoryContext, started: float, span: Any = None
    ) -> list[ModelMessage]:
        before = context.estimate(messages)
        current = messages
        check = self._input_check(context.run_id)
        validity = check.check(messages)
        errors = [v for v in validity.violations if v.severity == 'error']
        new_violations = check.unreported(errors)
        if new_violations:
            context.warn(
                'invalid_input',
                f'the history has {len(errors)} invariant violation(s) before processing; '
                'no stage may add to them',
                violations=[str(v) for v in new_violations[:20]],
            )
        given = _Validity(messages, validity.structure, validity.violations)
        for stage in self.stages:
            current = await self._run_stage(stage, current, context, validity)
        if current is not messages:
            problem = self._over_budget(current, before.total, context)
            if problem is not None:
                logger.error('the processed history was worse than the input (%s); input kept', problem)
                self._emit(StageFailed(run_id=context.run_id, stage='processor', error=problem))
                current, validity = messages, given
        check.adopt(validity)
        context.counter.mark_sent(current)
        # the idle path: nothing changed, so the estimate of the input stands
        after = before if current is messages else context.estimate(current)
        event = RequestProcessed(
            run_id=context.run_id,
            messages_before=len(messages),
            messages_after=len(current),
            tokens_before=before.total,
            tokens_after=after.total,
            tokenizer_tokens_after=after.tokenizer,
            context_window=context.context_window,
            duration_ms=(time.perf_counter() - started) * 1000,
            anchored=after.anchor_verified,
        )
        if span is not None and span.is_recording():
            span.set_attributes(_span_attributes(event, context))
        self._emit(event)
        return current

    async def _run_stage(
        self, stage: HistoryStage, messages: list[ModelMessage], context: HistoryContext, validity: _Validity
    ) -> list[ModelMessage]:
        try:
            result = await stage(messages, context)
        except ContextWindowUnknownError:
            raise
        except Exception as exc:
            logger.exception('stage %r failed; continuing with its input', stage.name)
            self._emit(
                StageFailed(run_id=context.run_id, stage=stage.name, error=f'{type(exc).__name__}: {exc}')
            )
            return messages
        if result is messages:
            return result
        problem = self._worse(result, messages, context, validity)
        if problem is not None:
            logger.error('stage %r made the history worse (%s); output discarded', stage.name, problem)
            self._emit(StageFailed(run_id=context.run_id, stage=stage.name, error=problem))
            return messages
        return result

    def _worse(
        self,
        result: list[ModelMessage],
        messages: list[ModelMessage],
        context: HistoryContext,
        validity: _Validity,
    ) -> str | None:
        """Why a stage's output is worse than its input, or None when it may replace it.

        Worse: empty; a tool call and its return that were paired are no longer (or any other violation where
        the input had none).
        """
        if not result:
            return 'invalid output: the history is empty'
        structure = StructureCheck()
        structure.extend(result)
        violations = structure.violations(result)
        added = validity.added(violations, result)
        if added:
            return 'invalid output: ' + '; '.join(str(v) for v in added[:5])
        validity.accept(result, structure, violations)
        return None

    def _over_budget(self, result: list[ModelMessage], before: int, context: HistoryContext) -> str | None:
        """Why the processed history is bigger than the hard budget allows, or None.

        Checked on the whole pipeline's output, not per stage: a stage may grow the history (a file converted
        for a model that cannot read it) when a later one brings it back within the budget.
        """
        budget = self._hard_budget(context)
        if budget is None:
            return None
        after = context.estimate(result).total
        if after <= before or after <= budget:
            return None
        fitted = 'fitted' if before <= budget else 'was already over'
        return (
            f'the output is {after:,} tokens, the input {before:,}, which {fitted} the budget of {budget:,}'
        )

    def _hard_budget(self, context: HistoryContext) -> int | None:
        """The limit no output may newly pass: the smallest stage budget (the window's), else the window."""
        budgets: list[int] = []
        for stage in self.stages:
            hard_budget = getattr(stage, 'hard_budget', None)
            value = hard_budget(context) if callable(hard_budget) else None
            if isinstance(value, int):
                budgets.append(value)
        return min(budgets) if budgets else context.context_window

    def _input_check(self, run_id: str | None) -> _InputCheck:
        """The run's incremental input check: each run continues its own previous input."""
        check = self._input_checks.pop(run_id, None) or _InputCheck()
        self._input_checks[run_id] = check
        while len(self._input_checks) > self._max_tracked_runs:
            self._input_checks.popitem(last=False)
        return check

    # ---- events and stats ---------------------------------------------------------------------------

    def _run_key(self, ctx: Any) -> str | None:
        if ctx is None:
            return None
        run_id = run_id_of(ctx)
        if run_id is not None:
            return run_id
        # pydantic-ai 1.0 has no run id, and replaces its message list with each processor output; the
        # run's `RunUsage` is the one object that lives exactly as long as the run (unless the app shares
        # one usage between runs on purpose, when they count as one).
        usage = getattr(ctx, 'usage', None)
        if usage is None:
            return None
        key = id(usage)
        entry = self._legacy_runs.get(key)
        if entry is not None and entry[0]() is usage:
            return entry[1]
        self._legacy_seq += 1
        name = f'run-{self._legacy_seq}'
        runs = self._legacy_runs

        def forget(_: object, key: int = key) -> None:
            runs.pop(key, None)

        try:
            ref = weakref.ref(usage, forget)
        except TypeError:  # not weak-referenceable: fall back to the object id
            return f'run-{key:x}'
        runs[key] = (ref, name)
        return name

    def _run_stats(self, run_id: str | None) -> RunStats | None:
        if run_id is None:
            return None
        stats = self._runs.get(run_id)
        if stats is None:
            stats = self._runs[run_id] = RunStats()
            while len(self._runs) > self._max_tracked_runs:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(run_id)
        return stats

    def _emit(self, event: HistoryEvent) -> None:
        for stats in (self._overall, self._run_stats(event.run_id)):
            if stats is not None:
                _record(stats, event)
        if isinstance(event, (HistoryWarning, StageFailed)):
            pass  # already logged at warning/error level where raised
        else:
            logger.debug('%s', event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                logger.exception('on_event callback raised; ignored')

    def stats(self) -> HistoryStats:
        """Running totals per run and overall, plus the shared cache's hits and misses."""
        return HistoryStats(
            overall=self._overall.copy(),
            runs={run_id: stats.copy() for run_id, stats in self._runs.items()},
            cache_hits=self.cache.stats.hits,
            cache_misses=self.cache.stats.misses,
        )


def _record(stats: RunStats, event: HistoryEvent) -> None:
    if isinstance(event, RequestProcessed):
        stats.requests += 1
        stats.tokens_in += event.tokens_before
        stats.tokens_out += event.tokens_after
        stats.peak_tokens_out = max(stats.peak_tokens_out, event.tokens_after)
        utilization = event.utilization
        stats.last_utilization = utilization
        if utilization is not None:
            stats.peak_utilization = max(stats.peak_utilization or 0.0, utilization)
    elif isinstance(event, WindowApplied):
        stats.window_applications += 1
    elif isinstance(event, CompactionResult):
        stats.compactions += 1
        stats.summarizer_calls += event.summarizer_calls
        stats.compaction_methods[event.method] += 1
    elif isinstance(event, ArtifactProcessed):
        stats.artifacts_by_strategy[event.strategy] += 1
        if event.cache_hit:
            stats.artifact_cache_hits += 1
    elif isinstance(event, HistoryWarning):
        stats.warnings += 1
    elif isinstance(event, StageFailed):
        stats.stage_failures += 1


_HISTORY_CODES = frozenset(
    {'empty', 'starts_with_response', 'starts_with_tool_return', 'not_ending_with_request'}
)
"""Violations about the history's ends: where they are is the history itself, whichever message is there."""

_Key = tuple[str, object]


class _Validity:
    """What the next stage receives, and what was already wrong with it: no stage may add to that.

    A violation is the same one when it has the same code and the same place: for pairing, the tool call id
    (so a call and its return that were paired must stay paired, however messages move); for the ends, the
    history; otherwise the message, by identity with the input (a message a stage wrote has no old place).
    """

    def __init__(
        self, messages: list[ModelMessage], structure: StructureCheck, violations: list[Violation]
    ) -> None:
        self.messages = messages
        self.structure = structure
        self.violations = violations
        self._keys: Counter[_Key] | None = None

    def added(self, violations: Sequence[Violation], result: Sequence[ModelMessage]) -> list[Violation]:
        """The violations of `result` (a stage's output) that its input did not have."""
        if self._keys is None:
            self._keys = Counter(_key(v, self.messages, None) for v in self.violations)
        places = {id(m): i for i, m in enumerate(self.messages)}
        remaining = Counter(self._keys)
        added: list[Violation] = []
        for violation in violations:
            key = _key(violation, result, places)
            if remaining[key] > 0:
                remaining[key] -= 1
            else:
                added.append(violation)
        return added

    def accept(
        self, messages: list[ModelMessage], structure: StructureCheck, violations: list[Violation]
    ) -> None:
        """A stage's output becomes the next stage's input."""
        self.messages, self.structure, self.violations, self._keys = messages, structure, violations, None


def _key(violation: Violation, messages: Sequence[ModelMessage], places: dict[int, int] | None) -> _Key:
    if violation.code in PAIRING_CODES:
        return violation.code, violation.tool_call_id
    if violation.code in _HISTORY_CODES or violation.index < 0:
        return violation.code, None
    if places is None:
        return violation.code, violation.index
    return violation.code, places.get(id(messages[violation.index]), ('new', violation.index))


class _InputCheck:
    """Validates each input history, incrementally.

    Within a run every input is the previous output plus a response and a request (the same objects). The
    checks are not all local (a return may answer a call many messages back), so the check keeps the
    pairing state of the history it last saw and, when the new input extends it, only feeds the new
    messages: the idle path stays cheap on long histories while broken input is still reported on every
    request that brings it. Any other input is checked from scratch.
    """

    def __init__(self) -> None:
        self._last: Sequence[ModelMessage] = ()
        self._structure = StructureCheck()
        self._reported: frozenset[str] = frozenset()

    def unreported(self, violations: Sequence[Violation]) -> list[Violation]:
        """Violations not reported before: a broken old message warns once, not on every request."""
        new = [v for v in violations if str(v) not in self._reported]
        self._reported = frozenset(str(v) for v in violations)
        return new

    def check(self, messages: list[ModelMessage]) -> _Validity:
        """The validity of `messages`, from the state of the last history seen when it is a prefix."""
        last = self._last
        extends = (
            0 < len(last) <= len(messages)
            and self._structure.length == len(last)
            and all(map(operator.is_, last, messages))
        )
        if not extends:
            self._structure = StructureCheck()
            last = ()
        self._structure.extend(messages[len(last) :])
        self._last = tuple(messages)  # our own copy: the caller may change the list it gets back
        return _Validity(messages, self._structure, self._structure.violations(messages))

    def adopt(self, validity: _Validity) -> None:
        """Continue from the history the stages returned: the next input extends it."""
        self._last, self._structure = tuple(validity.messages), validity.structure


@dataclasses.dataclass
class _OnDemand:
    """A stage's `compact(messages, context, focus=...)` run as a stage, with the usual guard and check."""

    name: str
    compact: Any
    focus: str | None

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        result: list[ModelMessage] = await self.compact(messages, context, focus=self.focus)
        return result


def _span_attributes(event: RequestProcessed, context: HistoryContext) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        'pydantic_ai_history.messages_before': event.messages_before,
        'pydantic_ai_history.messages_after': event.messages_after,
        'pydantic_ai_history.tokens_before': event.tokens_before,
        'pydantic_ai_history.tokens_after': event.tokens_after,
        'pydantic_ai_history.anchored': event.anchored,
        'pydantic_ai_history.duration_ms': event.duration_ms,
    }
    if context.context_window is not None:
        attributes['pydantic_ai_history.context_window'] = context.context_window
    if context.run_id is not None:
        attributes['pydantic_ai_history.run_id'] = context.run_id
    if context.counter.model_name:
        attributes['pydantic_ai_history.model'] = context.counter.model_name
    return attributes


# pydantic-ai 1.0 decides whether to pass `ctx` from the callable's own `__annotations__`, which an instance
# only has through its class; later versions read `__call__`'s signature. Expose `__call__`'s to both.
HistoryProcessor.__annotations__ = dict(HistoryProcessor.__call__.__annotations__)

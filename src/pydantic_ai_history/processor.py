"""Composes the stages; keeps per-run stats; turns every decision into an event, a log line and a span.

`HistoryProcessor` is the one object users hand to pydantic-ai: `history_processors=[processor]` on 1.x,
`capabilities=[processor.capability()]` (or `ProcessHistory(processor)`) on versions with capabilities.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext

from ._compat import HAS_CAPABILITIES, ModelMessage, run_id_of
from ._context import HistoryContext, HistoryStage
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
from .validate import validate_history
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
    warnings: int = 0
    stage_failures: int = 0
    last_utilization: float | None = None

    @property
    def reduction_percent(self) -> float:
        return 100.0 * (1 - self.tokens_out / self.tokens_in) if self.tokens_in else 0.0


@dataclass
class HistoryStats:
    """`processor.stats()`: totals overall and per run, and the shared cache's hit counts."""

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

    A stage that raises, or returns a history with more invariant violations than it was given, is skipped
    for that request (a `StageFailed` event says why); the run goes on with the stage's input. Only a
    configuration error (`ContextWindowUnknownError`) is raised.
    """

    def __init__(
        self,
        stages: Sequence[HistoryStage],
        *,
        model: Any = None,
        context_window: int | None = None,
        token_profile: TokenizerProfile | None = None,
        cache: SummaryCache | None = None,
        store: ArtifactStore | None = None,
        on_event: EventHandler | None = None,
        max_tracked_runs: int = 1_024,
    ) -> None:
        self.stages = list(stages)
        self.model = model
        self.context_window = context_window
        self.token_profile = token_profile
        self.cache: SummaryCache = cache if cache is not None else MemoryCache()
        self.store: ArtifactStore = store if store is not None else MemoryStore()
        self.on_event = on_event
        self._counters: dict[str | None, TokenCounter] = {}
        self._overall = RunStats()
        self._runs: OrderedDict[str, RunStats] = OrderedDict()
        self._max_tracked_runs = max_tracked_runs
        self._tracer = _tracer()

    # ---- pydantic-ai entry points -------------------------------------------------------------------

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history processor pydantic-ai calls before every model request."""
        return await self.process(messages, ctx=ctx)

    def capability(self) -> Any:
        """A capability for `Agent(capabilities=[...])`, with the read-back tool; needs a version with capabilities."""
        if not HAS_CAPABILITIES:
            raise RuntimeError(
                'this pydantic-ai version has no capabilities: use Agent(history_processors=[processor])'
            )
        from .capability import HistoryCapability

        return HistoryCapability(self)

    def readback_toolset(self) -> Any:
        """A toolset offering `read_artifact` for content the artifact stage reduced (`Agent(toolsets=[...])` on 1.x)."""
        from .readback import readback_toolset

        return readback_toolset(self.store)

    # ---- processing -----------------------------------------------------------------------------------

    def counter_for(self, model: Any) -> TokenCounter:
        """The shared token counter for a model (memoization is per model family)."""
        name = model_name_of(model)
        counter = self._counters.get(name)
        if counter is None:
            counter = TokenCounter(name, profile=self.token_profile)
            self._counters[name] = counter
        return counter

    def make_context(self, *, ctx: Any = None, model: Any = None) -> HistoryContext:
        """The per-call context the stages receive."""
        model = model if model is not None else (self.model if self.model is not None else getattr(ctx, 'model', None))
        info = model_info(model, context_window=self.context_window)
        run_key = self._run_key(ctx)
        return HistoryContext(
            counter=self.counter_for(model),
            context_window=info.context_window,
            model=model,
            run_context=ctx,
            run_id=run_key,
            cache=self.cache,
            store=self.store,
            emit_event=self._emit,
            usage=getattr(ctx, 'usage', None),
        )

    async def process(
        self, messages: Sequence[ModelMessage], *, ctx: Any = None, model: Any = None
    ) -> list[ModelMessage]:
        """Run every stage over `messages` and return the new history (the input list is never changed)."""
        started = time.perf_counter()
        context = self.make_context(ctx=ctx, model=model)
        current = list(messages)
        if not current:
            context.warn('empty_history', 'the processor was given an empty history; returned unchanged')
            return current
        before = context.estimate(current)
        baseline = _Baseline(current, context)
        span = self._tracer.start_as_current_span('pydantic_ai_history.process') if self._tracer else None
        with span if span is not None else _nullcontext():
            for stage in self.stages:
                current = await self._run_stage(stage, current, context, baseline)
        context.counter.mark_sent(current)
        after = context.estimate(current)
        self._emit(
            RequestProcessed(
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
        )
        return current

    async def _run_stage(
        self, stage: HistoryStage, messages: list[ModelMessage], context: HistoryContext, baseline: _Baseline
    ) -> list[ModelMessage]:
        try:
            result = await stage(messages, context)
        except ContextWindowUnknownError:
            raise
        except Exception as exc:
            logger.exception('stage %r failed; continuing with its input', stage.name)
            self._emit(StageFailed(run_id=context.run_id, stage=stage.name, error=f'{type(exc).__name__}: {exc}'))
            return messages
        if result is messages:
            return result
        if _error_count(result) > baseline.errors:
            violations = [str(v) for v in validate_history(result) if v.severity == 'error'][:5]
            logger.error('stage %r produced an invalid history (%s); its output was discarded', stage.name, violations)
            self._emit(StageFailed(run_id=context.run_id, stage=stage.name, error='invalid output: ' + '; '.join(violations)))
            return messages
        return result

    # ---- events and stats ---------------------------------------------------------------------------

    def _run_key(self, ctx: Any) -> str | None:
        if ctx is None:
            return None
        run_id = run_id_of(ctx)
        if run_id is not None:
            return run_id
        # pydantic-ai 1.0 has no run id; the message list object lives exactly as long as the run.
        history = getattr(ctx, 'messages', None)
        return f'run-{id(history):x}' if history is not None else None

    def _run_stats(self, run_id: str | None) -> RunStats | None:
        if run_id is None:
            return None
        stats = self._runs.get(run_id)
        if stats is None:
            stats = self._runs[run_id] = RunStats()
            while len(self._runs) > self._max_tracked_runs:
                self._runs.popitem(last=False)
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
            overall=self._overall,
            runs=dict(self._runs),
            cache_hits=self.cache.stats.hits,
            cache_misses=self.cache.stats.misses,
        )


def _record(stats: RunStats, event: HistoryEvent) -> None:
    if isinstance(event, RequestProcessed):
        stats.requests += 1
        stats.tokens_in += event.tokens_before
        stats.tokens_out += event.tokens_after
        stats.peak_tokens_out = max(stats.peak_tokens_out, event.tokens_after)
        stats.last_utilization = event.utilization
    elif isinstance(event, WindowApplied):
        stats.window_applications += 1
    elif isinstance(event, CompactionResult):
        stats.compactions += 1
        stats.summarizer_calls += event.summarizer_calls
        stats.compaction_methods[event.method] += 1
    elif isinstance(event, ArtifactProcessed):
        stats.artifacts_by_strategy[event.strategy] += 1
    elif isinstance(event, HistoryWarning):
        stats.warnings += 1
    elif isinstance(event, StageFailed):
        stats.stage_failures += 1


class _Baseline:
    """The input's own violations, computed only once a stage has changed something (the idle path skips it)."""

    def __init__(self, messages: Sequence[ModelMessage], context: HistoryContext) -> None:
        self._messages = messages
        self._context = context
        self._errors: int | None = None

    @property
    def errors(self) -> int:
        if self._errors is None:
            violations = [v for v in validate_history(self._messages) if v.severity == 'error']
            self._errors = len(violations)
            if violations:
                self._context.warn(
                    'invalid_input',
                    f'the history had {len(violations)} invariant violation(s) before processing; '
                    'no stage may add to them',
                    violations=[str(v) for v in violations[:20]],
                )
        return self._errors


def _error_count(messages: Sequence[ModelMessage]) -> int:
    return sum(1 for v in validate_history(messages) if v.severity == 'error')


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


# pydantic-ai 1.0 decides whether to pass `ctx` from the callable's own `__annotations__`, which an instance
# only has through its class; later versions read `__call__`'s signature. Expose `__call__`'s to both.
HistoryProcessor.__annotations__ = dict(HistoryProcessor.__call__.__annotations__)

"""One request through the capability: the context the stages receive (counter, limits, scope, operations),
the store and marks it runs with, the local servers asked for their window, the tracer, and the entry points
that run the stages (`process`, `compact`)."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from opentelemetry.trace import NoOpTracer
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage

from .._compat import attempt_models, bound_durable_operation, instrumentation_of
from ..budget._policy import ContextLimits
from ..budget.model_info import model_name_of, serving_candidates
from ..cache import SummaryCache, scoped
from ..context._context import CompactionRequest, HistoryContext, ScopeKey, default_scope
from ..context._summarizer_settings import ModelRef
from ..events import HistoryWarning, StageFailed
from ..messages._clock import message_time, perf, replay_safe
from ..messages._marks import MarksScope
from ..store import ArtifactStore, StoreError
from ..store._unavailable import UnavailableStore
from ._compaction_tool import CompactionTool, requested_compaction
from ._guard import GuardedStages, checked_input
from ._limits import ModelLimits
from ._operations import HistoryOperations, JournaledCache, JournaledStore, RunOperations
from ._settings_checks import CONFIG_ERRORS, compaction_stage

if TYPE_CHECKING:
    from pydantic_ai.models import Model
    from pydantic_ai.tools import ToolDefinition

    from ..messages.pinning import PinPredicate
    from ..tokens import TokenCounter


logger = logging.getLogger('pydantic_ai_history')


class RequestPath(GuardedStages, HistoryOperations):
    """The entry points that run the stages, and what a request runs with: a part of `HistoryCapability`."""

    if TYPE_CHECKING:
        id: str | None
        pin: PinPredicate | None
        keep_first_user_message: bool
        scope: ScopeKey | None
        _counters: dict[str | None, TokenCounter]
        _last_counting: tuple[ModelRef | None, TokenCounter] | None
        _last_scoped: tuple[SummaryCache | None, str, SummaryCache | None] | None
        _model_limits: ModelLimits
        _tracer: Any
        _tool: CompactionTool | None

    async def _ask_local_servers(
        self, model: ModelRef | None, ctx: RunContext[Any] | None, journaled: bool | None = None
    ) -> None:
        """Ask each local server that may serve the request (or an attempt the run's `ModelFallback` moves)
        for its window, once per server and process; under durable execution (`journaled`, found when not
        given) on every run's first step (a replay must make the same calls)."""
        if journaled is None:
            journaled = self.journaled(ctx)
        if journaled and getattr(ctx, 'run_step', 1) > 1:
            return
        also = self._attempt_models(ctx)
        for candidate, server in self._model_limits.servers_to_ask(model, also, again=journaled):
            if journaled and ctx is not None:
                window = await self.ask_server_window(ctx, server.base_url, server.model_name)
            else:
                window = await self.probe_server_window(
                    ctx, server.base_url, server.model_name, model=candidate
                )
            self._model_limits.learn_window(server, window)

    async def compact(
        self,
        messages: Sequence[ModelMessage],
        *,
        focus: str | None = None,
        ctx: Any = None,
        model: Any = None,
    ) -> list[ModelMessage]:
        """Compact now, whatever the trigger says; `focus` tells the summarizer what matters most. Guarded
        like every stage (on failure the history comes back unchanged, with `StageFailed`); raises
        `RuntimeError` when the processor has no compaction stage."""
        stage = compaction_stage(self._stages)
        if stage is None:
            raise RuntimeError(
                'this processor has no compaction stage (create_history_processor(compaction=False)?)'
            )
        history = list(messages)
        journaled = self.journaled(ctx)
        store, scope = await self._request_scope(ctx, history, journaled)
        with scope:
            context = self.make_context(ctx=ctx, model=model, store=store, journaled=journaled)
            check = self._input_check(context.run_id)
            validity = await checked_input(check, history, context)
            on_demand = functools.partial(stage.compact_history, focus=focus)
            result = await self._run_stage(stage.name, on_demand, history, context, validity)
            if self._over_budget(result, history, context.estimate(history).total, context, stage.name):
                return history
            check.adopt(validity)
            return result

    async def process(
        self,
        messages: Sequence[ModelMessage],
        *,
        ctx: Any = None,
        model: Any = None,
        tool_definitions: Sequence[Any] = (),
        serving_model: Model | None = None,
    ) -> list[ModelMessage]:
        """Run every stage over `messages` and return the history to send; the input list is never changed,
        and comes back itself when it needs no change. `tool_definitions` are counted until the provider's
        usage shows what they cost; `serving_model` is the model that will send this request."""
        if not isinstance(messages, list):
            messages = list(messages)
        if model is None:
            model = self._serving(ctx, serving_model)
        journaled = self.journaled(ctx)  # asked once per request: every step below needs it
        await self._ask_local_servers(model, ctx, journaled)
        # the model's compaction request (its call answered in the newest request), from a run step's history
        tool = self._tool if ctx is not None else None
        requested = requested_compaction(messages, tool) if tool is not None else None
        store, scope = await self._request_scope(ctx, messages, journaled)
        with scope:
            started = perf()
            context = self.make_context(
                ctx=ctx,
                model=model,
                tool_definitions=tool_definitions,
                serving_model=serving_model,
                store=store,
                compaction_request=requested,
                journaled=journaled,
            )
            if not messages:
                context.warn('empty_history', 'the processor was given an empty history; returned unchanged')
                return messages
            run_id = context.run_id
            try:
                return await self._process(messages, context, started, lambda: self._tracer_for(ctx, run_id))
            except CONFIG_ERRORS:
                raise
            except Exception as exc:  # outside any stage, e.g. counting content of a kind nobody foresaw
                logger.exception('processing failed; the history is passed on unchanged')
                error = f'{type(exc).__name__}: {exc}'
                self._emit(StageFailed(run_id=context.run_id, stage='processor', error=error))
                return messages

    async def _request_scope(
        self, ctx: Any, messages: Sequence[ModelMessage], journaled: bool
    ) -> tuple[ArtifactStore, contextlib.AbstractContextManager[None]]:
        """The store one request writes to, and the block its work runs in. Workflow code (`journaled`): no
        I/O, clocks pinned to the newest model response, seals keyed by the store's explicit secret
        (`for_agent` checks it). Elsewhere the store's persisted secret is loaded before the first id or mark
        is made."""
        if journaled:
            return self.store, self._workflow_scope(messages)
        store = await self._prepared_store(ctx)
        return store, self._marks_scope(store)

    @contextlib.contextmanager
    def _workflow_scope(self, messages: Sequence[ModelMessage]) -> Iterator[None]:
        with replay_safe(message_time(messages)), self.marks():
            yield

    async def _prepared_store(self, ctx: Any) -> ArtifactStore:
        """The store with its secret loaded (a no-op once loaded); while it cannot be, a stand-in that refuses
        every write, said at error level (`store_unavailable`) on every request."""
        try:
            await self.store.prepare()
        except StoreError as exc:
            message = (
                f'the artifact store cannot give its secret ({exc}): nothing is stored and no id or mark is '
                'made with a secret of this process; the request is processed as with a store that refuses '
                'every write'
            )
            logger.error('store_unavailable: %s', message)
            self._emit(HistoryWarning(run_id=self._runs.key(ctx), code='store_unavailable', message=message))
            return UnavailableStore(self.store, str(exc))
        return self.store

    def _marks_scope(self, store: ArtifactStore | None = None) -> MarksScope:
        """Seals made and verified with the key of the store's secret: the one secret, kept where the data is,
        so every process sharing the store recognises the package's notes (no environment variable)."""
        store = self.store if store is None else store
        # a store that cannot say (an `UnavailableStore` stands for it, or, in a prediction before the first
        # request, it has not said yet): the process's own key, whose marks no other process reads as ours
        unkeyed = store is not self.store or not store.secret_ready
        return MarksScope(self.readback_tool_name, None if unkeyed else store._id_secret())

    @contextlib.contextmanager
    def marks(self) -> Iterator[None]:
        """Read (and write) the package's marks as this processor does, outside a run: seals (the only mark
        on pydantic-ai 1.0, and on user-prompt text) are keyed by the store's secret. A `RedisStore` must have
        loaded its secret first (`await processor.store.prepare()`), else this raises `StoreError`."""
        with MarksScope(self.readback_tool_name, self.store._id_secret()):
            yield

    def _tracer_for(self, ctx: object, run_id: str | None) -> Any:
        """The tracer of run `run_id` (its instrumentation settings' provider, replay-safe under durable
        engines); None for a run that is not instrumented; OpenTelemetry's global one outside a run."""
        tracer = getattr(ctx, 'tracer', None)
        if isinstance(tracer, NoOpTracer):
            # late 1.x runs history processors with a no-op tracer on the context even when the run is
            # instrumented by its `Instrumentation` capability; otherwise nothing records: no span at all
            state = self._runs[run_id]
            try:  # found once per run: its capabilities stay as they are
                capabilities = getattr(ctx, 'capabilities', None)
            except Exception:  # a durable engine's run context raises for what it did not carry
                capabilities = None
            if state.tracer is None or state.tracer[0] is not capabilities or capabilities is None:
                settings = instrumentation_of(ctx)
                state.tracer = (capabilities, settings.tracer if settings is not None else None)
            return state.tracer[1]
        return tracer if tracer is not None else self._tracer

    def scope_of(self, ctx: RunContext[Any] | None) -> str:
        """The scope a run's artifacts live in: the `scope` callable's answer, else `default_scope(ctx)`."""
        if ctx is None or self.scope is None:
            return default_scope(ctx)
        try:
            return str(self.scope(ctx))
        except Exception:
            # Never let a broken scope key widen access: the run gets a scope of its own.
            logger.exception('the scope callable raised; this run reads back only what it stored itself')
            return f'unscoped-run:{self._runs.key(ctx) or id(ctx)}'

    def counter_for(self, model: ModelRef | None) -> TokenCounter:
        """The shared token counter for a model (memoization is per model family)."""
        name = model_name_of(model)
        if name not in self._counters:
            from ..tokens import TokenCounter  # the counter loads with the first request

            self._counters[name] = TokenCounter(name, profile=self.token_profile)
        return self._counters[name]

    def _counting(self, model: ModelRef | None) -> TokenCounter:
        """The shared counter for a request to `model` (asked on every request: the last answer is kept)."""
        last = self._last_counting
        if last is not None and last[0] is model:
            return last[1]
        counter = self.counter_for(_counted(model))
        self._last_counting = (model, counter)
        return counter

    def _workflow_counter(self, ctx: RunContext[Any] | None, model: ModelRef | None) -> TokenCounter:
        """Workflow code counts with the run's own counter, begun afresh at its first step: estimates decide
        what a request journals, and the shared one may have learned from later requests before a replay."""
        state = self._runs[self._runs.key(ctx)]
        name = model_name_of(_counted(model))
        counter = state.workflow_counter
        if counter is None or counter.model_name != name or getattr(ctx, 'run_step', 1) <= 1:
            from ..tokens import TokenCounter

            counter = state.workflow_counter = TokenCounter(name, profile=self.token_profile)
        return counter

    def limits_for(self, model: ModelRef | None) -> ContextLimits:
        """The context policy resolved for `model` (once per model); a `FallbackModel` gets the limits of
        its smallest known window. An unknown window falls back to `ContextPolicy.fallback_context_window`
        with one `context_window_fallback` warning; an impossible setting raises `ContextPolicyError`, a
        clamped one warns once (`setting_clamped`)."""
        return self._model_limits.limits_for(model)

    def _serving_limits(self, ctx: RunContext[Any] | None, model: ModelRef | None) -> ContextLimits:
        """The limits a request to `model` is planned against: the model's own, or with the run's
        `ModelFallback` (2.x), which may move an attempt to another model after the request was processed,
        those of the smallest known window among them all (as for a `FallbackModel`), so every attempt fits
        the model serving it. The processor's own `model` is planned for alone."""
        return self._model_limits.limits_for(model, self._attempt_models(ctx))

    def _attempt_models(self, ctx: RunContext[Any] | None) -> tuple[Any, ...]:
        """The models the run's `ModelFallback` may move an attempt to (none when the processor's own `model`
        is set: it is planned for alone)."""
        return () if self.model is not None else attempt_models(ctx)

    def _serving(self, ctx: RunContext[Any] | None, serving_model: Model | None) -> ModelRef | None:
        """The model whose limits apply: the processor's `model`, else the one pydantic-ai hands the request
        hook, else the run's."""
        if self.model is not None:
            return self.model
        if serving_model is not None:
            return serving_model
        return ctx.model if ctx is not None else None

    def make_context(
        self,
        *,
        ctx: RunContext[Any] | None = None,
        model: ModelRef | None = None,
        tool_definitions: Sequence[ToolDefinition] = (),
        serving_model: Model | None = None,
        store: ArtifactStore | None = None,
        compaction_request: CompactionRequest | None = None,
        journaled: bool | None = None,
    ) -> HistoryContext:
        """The per-call context the stages receive, with the limits resolved for the serving model;
        `journaled` (found when not given) says whether the run is under durable execution."""
        store = self.store if store is None else store
        if model is None:
            model = self._serving(ctx, serving_model)
        if journaled is None:
            journaled = self.journaled(ctx)
        # Under durable execution every side effect is a journaled operation; elsewhere it runs in place.
        operations = RunOperations(self, ctx) if ctx is not None and journaled else None
        scope = self.scope_of(ctx)
        run_id = self._runs.key(ctx)
        return HistoryContext(
            counter=self._counting(model) if operations is None else self._workflow_counter(ctx, model),
            limits=self._serving_limits(ctx, model),
            summarizer=self.summarizer,
            pin=self.pin,
            keep_first_user_message=self.keep_first_user_message,
            model=model,
            run_context=ctx,
            run_id=run_id,
            # every key a stage uses carries the run's scope: nothing one tenant's run cached reaches another
            cache=self._cache_for(scope, operations),
            store=JournaledStore(operations, store) if operations is not None else store,
            operations=operations,
            emit_event=self._emit,
            usage=ctx.usage if ctx is not None else None,
            tool_definitions=tuple(tool_definitions),
            serving_model=serving_model,
            scope=scope,
            background_allowed=operations is None and self._runs.is_open(run_id),
            compaction_request=compaction_request,
        )

    def _cache_for(self, scope: str, operations: RunOperations | None) -> SummaryCache | None:
        """The cache as `scope` sees it: the shared one (the last wrapper made is kept: it has no state), or
        under durable execution its journaled operations."""
        if operations is not None:
            return scoped(JournaledCache(operations), scope)
        last = self._last_scoped
        if last is None or last[0] is not self.cache or last[1] != scope:
            last = self._last_scoped = (self.cache, scope, scoped(self.cache, scope))
        return last[2]

    def journaled(self, ctx: object) -> bool:
        """Whether this run journals the processor's operations: a durability capability bound them."""
        return bound_durable_operation(ctx, self.id, 'store_write')


def _counted(model: ModelRef | None) -> ModelRef | None:
    """The model whose tokenizer counts a request to `model`: a wrapper over several counts like the first it
    tries."""
    return cast('ModelRef | None', serving_candidates(model)[0])

"""`HistoryCapability`: pydantic-ai's hooks around a pipeline of stages, run under one guard (a stage that
raises or makes the history worse is skipped; the output never newly passes the budget) against the context
policy resolved once per request; every decision an event, a log line and a span."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import math
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast, overload

from opentelemetry.trace import NoOpTracer, get_tracer
from pydantic_ai import RunContext

from .._compat import (
    HAS_CAPABILITIES,
    REQUEST_SCOPED_PROMPTS,
    TOOLS_HAVE_METADATA,
    CapabilityBase,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    bound_durable_operation,
    durability_base,
    instrumentation_of,
    request_scoped_prompt,
)
from ..budget._policy import ContextLimits, ContextPolicy, ContextPolicyError
from ..budget._room import read_room_tokens
from ..budget.model_info import (
    ContextWindowUnknownError,
    model_info,
    model_name_of,
    serving_candidates,
)
from ..budget.notice import NearLimitNotice, notice_text
from ..cache import MemoryCache, SummaryCache, scoped
from ..context._artifact_settings import ArtifactSettings
from ..context._context import (
    MARKER_KEY,
    CompactionRequest,
    HistoryContext,
    HistoryStage,
    ScopeKey,
    default_scope,
)
from ..context._summarizer_settings import ModelRef, SummarizerSettings, check_model_ref
from ..events import (
    HistoryEvent,
    HistoryWarning,
    NearLimitNoticeSent,
    RequestProcessed,
    StageFailed,
    gather,
    gathering,
    publish,
)
from ..messages._clock import message_time, perf, replay_safe
from ..messages._marks import READ_ARTIFACT_TOOL, readback_tool_scope, seal_key_scope
from ..messages.pinning import PinPredicate
from ..messages.validate import StructureCheck
from ..readback import READBACK_TOOL_METADATA, ReadbackGate, ReadRoom, readback_toolset_id
from ..store import ArtifactStore, MemoryStore, StoreError
from ..store._unavailable import UnavailableStore
from ..tokens import TokenCounter, TokenizerProfile
from ._agent_checks import (
    TOOL_NAME,
    agent_capabilities,
    claim_step,
    clash_error,
    duplicate_error,
    durable_store_problem,
    history_processor_in,
    is_ours,
    tool_owner,
    user_error,
)
from ._compaction_tool import (
    COMPACTION_TOOL_METADATA,
    CompactionTool,
    compaction_toolset,
    compaction_toolset_id,
    requested_compaction,
)
from ._limits import ModelLimits
from ._operations import HistoryOperations, JournaledCache, JournaledStore, RunOperations
from ._runs import Runs
from ._spans import DeferredSpans, request_attributes
from ._stats import HistoryStats, RunStats, record_event
from ._validity import InputCheck, Validity

if TYPE_CHECKING:
    from pydantic_ai.models import Model, ModelRequestContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset

__all__ = (
    'DEFAULT_ID',
    'SERIALIZATION_NAME',
    'EventHandler',
    'HistoryCapability',
    'StageCapability',
    'exempting_readback',
)

_SettingsT = TypeVar('_SettingsT')

logger = logging.getLogger('pydantic_ai_history')

_PROCESSED: ContextVar[RequestProcessed | None] = ContextVar('pydantic_ai_history_processed', default=None)
"""The `RequestProcessed` of the latest `process` call in this context: the request hook reads it after the
call (for the near-limit notice) without changing what `process`, which apps override, returns."""

EventHandler = Callable[[HistoryEvent], None]


DEFAULT_ID = 'pydantic_ai_history'
"""The capability's default `id`: stable, so durable engines and message history can name it."""

SERIALIZATION_NAME = 'PydanticAIHistory'
"""The name an agent spec builds the processor by (`Agent.from_spec(..., custom_capability_types=...)`)."""


FIELD_TYPES: tuple[tuple[str, type[Any] | tuple[type[Any], ...], str], ...] = (
    ('id', (str, type(None)), 'a string or None'),
    ('keep_first_user_message', bool, 'True or False'),
    ('token_profile', (TokenizerProfile, type(None)), 'a TokenizerProfile or None'),
    ('cache', SummaryCache, 'a SummaryCache, e.g. MemoryCache() or SQLiteCache(path)'),
    ('store', ArtifactStore, "an ArtifactStore, e.g. DirectoryStore('artifacts/') or MemoryStore()"),
    ('max_tracked_runs', int, 'a whole number'),
)
"""Each field of `HistoryCapability` whose type is checked at construction, its types, and what to say
instead."""


@dataclass(kw_only=True, eq=False)
class HistoryCapability(CapabilityBase[Any], HistoryOperations):
    """pydantic-ai's hooks around a pipeline of stages, with the settings every stage shares.

    `Agent(capabilities=[...])` where pydantic-ai has capabilities, `Agent(history_processors=[...])` on
    early 1.x. A stage that raises or adds an invariant violation is skipped for that request (`StageFailed`
    says why), and an output that newly passes the budget is replaced by the input. Only configuration errors
    are raised (`ContextWindowUnknownError` under `ContextPolicy(strict=True)`).
    """

    id: str | None = DEFAULT_ID
    """The capability's id, stable across runs and processes (durable execution names its operations after
    it); the read-back toolset's id is derived from it. An agent holds one history processor."""
    model: ModelRef | None = None
    """The serving model (name or `Model`) when it is not the run's: decides token counting and the limits.
    Default: the run's model, read on every request."""
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    """Window, utilization, reserve, budget, compaction trigger and target: resolved once per request and
    shared by every stage."""
    summarizer: SummarizerSettings = field(default_factory=SummarizerSettings)
    """The model and limits of every LLM call the stages make (compaction and artifact summaries, plans)."""
    pin: PinPredicate | None = None
    """Units with a message this accepts are kept by the compactor and the window (e.g. `pin_tool_errors`);
    `pin()` markers are honoured regardless."""
    keep_first_user_message: bool = True
    """Keep the first user turn (the original task) verbatim through compactions and windowing."""
    token_profile: TokenizerProfile | None = None
    """Overrides how tokens are counted (encoding, correction, image formula). Default: by model family."""
    cache: SummaryCache = field(default_factory=MemoryCache)
    """The cache for summaries, conversions and prefix records. Default: an in-memory LRU. Shared by every
    run; each run's entries are keyed by its scope (`scope`), so no tenant is ever served another's."""
    store: ArtifactStore = field(default_factory=MemoryStore)
    """Where originals of reduced artifacts and evicted transcripts are kept for `read_artifact`. Default: in
    memory, bounded; a history persisted between processes needs `DirectoryStore` or `RedisStore`."""
    scope: ScopeKey | None = None
    """`ctx -> str`: the tenant or conversation whose artifacts a run may store and read back, e.g.
    `lambda ctx: ctx.deps.tenant_id`. Default: pydantic-ai's conversation id (1.0: one shared scope)."""
    readback_tool_name: str = READ_ARTIFACT_TOOL
    """The name of the read-back tool every note, stub and summary tells the model to call. Rename it when the
    app has a tool of its own called `read_artifact` (a clash fails, naming both)."""
    compaction_tool: CompactionTool | bool = False
    """Give the model a `compact_context(focus=...)` tool to ask for a compaction at a natural break (True
    for the defaults; needs a compaction stage; on pydantic-ai 1.0 add `processor.compaction_toolset()`)."""
    near_limit_notice: NearLimitNotice | bool = False
    """Tell the model, in a cache-safe system prompt for that request only, when its history nears its limit
    (`NearLimitNotice`; True for the defaults). Needs the processor as a capability (not pydantic-ai 1.0)."""
    on_history_event: EventHandler | None = None
    """Receives every `HistoryEvent` (they are also logged). The field has its own name because `on_event` is
    pydantic-ai's hook for the run's stream events; `HistoryProcessor(on_event=...)` is accepted for it."""
    max_tracked_runs: int = 1_024
    """Per-run stats and incremental checks are kept for this many runs, least recently active dropped."""

    _field_types: ClassVar[tuple[tuple[str, type[Any] | tuple[type[Any], ...], str], ...]] = FIELD_TYPES
    """The fields checked at construction (`FIELD_TYPES`, and a subclass's own)."""

    # pydantic-ai compares capabilities by identity; the processor's state makes it one of a kind.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __post_init__(self) -> None:
        self.policy = coerce_settings(ContextPolicy, self.policy, 'policy')
        self.summarizer = coerce_settings(SummarizerSettings, self.summarizer, 'summarizer')
        self.compaction_tool = coerce_switch(CompactionTool, self.compaction_tool, 'compaction_tool')
        self.near_limit_notice = coerce_switch(NearLimitNotice, self.near_limit_notice, 'near_limit_notice')
        _check_fields(self)
        if self.max_tracked_runs < 1:
            raise ValueError(f'max_tracked_runs must be positive, got {self.max_tracked_runs!r}')
        _check_tool_name('readback_tool_name', self.readback_tool_name)
        self._stages: list[HistoryStage] = self._pipeline()
        self._counters: dict[str | None, TokenCounter] = {}
        self._model_limits = ModelLimits(self.policy, self._emit)
        self._overall = RunStats()
        self._runs = Runs(self.max_tracked_runs)
        self._tracer = get_tracer('pydantic_ai_history')
        self.readback_gate = ReadbackGate(
            run_key=self._runs.key, predict=self._will_name_readback, offered_always=self.journaled
        )
        """Decides when `read_artifact` is offered: once a run's history holds something to read."""
        self._tool = _enabled(CompactionTool, self.compaction_tool)
        self._notice = _enabled(NearLimitNotice, self.near_limit_notice)
        if self._tool is not None:
            _check_compaction_tool(self._tool, self._stages, self.readback_tool_name)
        self._open_runs: set[str] = set()
        """Runs inside `wrap_run` (bounded by the runs going on): their end is told to the stages, so work a
        stage starts for one in the background (a summary ahead of its event) ends with it."""
        if self.model is not None and (self.policy.strict or model_info(self.model).context_window):
            # settings that cannot work with a known window (or an unknown one under strict) fail here
            self.limits_for(self.model)

    def _pipeline(self) -> list[HistoryStage]:
        """The stages to run, in order."""
        raise NotImplementedError

    def _artifact_settings(self) -> ArtifactSettings:
        """The artifact settings the effects read."""
        return ArtifactSettings()

    # ---- pydantic-ai entry points -------------------------------------------------------------------

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history processor pydantic-ai calls before every model request (`history_processors=`)."""
        claim_step(self, ctx, 'history processor')
        processed = await self.process(messages, ctx=ctx)
        self.readback_gate.observe(ctx, messages, processed)
        return processed

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """The capability hook: process the history once per request step, and persist the result."""
        claim_step(self, ctx, 'capability')
        self._check_tool_names(_tools_of(request_context))
        before = request_context.messages
        with gathering() as stream_events:
            token = _PROCESSED.set(None)
            try:
                messages = await self._process_request(ctx, request_context)
                processed = _PROCESSED.get()
            finally:  # the step's event stays with the step, not in the run's context
                _PROCESSED.reset(token)
            if messages is not before:  # the idle path leaves pydantic-ai's lists as they are
                self.readback_gate.observe(ctx, before, messages)
                request_context.messages = messages.copy()
                ctx.messages[:] = messages
            limits = self.limits_for(self._serving(ctx, request_context.model))
            self._runs[self._runs.key(ctx)].planned_budget = limits.budget
            if self._notice is not None and processed is not None:
                self._send_notice(ctx, request_context, processed, limits)
        await publish(ctx, stream_events)
        return request_context

    if not REQUEST_SCOPED_PROMPTS:  # late 1.x: no request-scoped prompts, and no request-only message list

        async def wrap_model_request(
            self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: Any
        ) -> Any:
            """The near-limit notice on the outgoing copy of the request only, at its end (late 1.x)."""
            state = self._runs.peek(self._runs.key(ctx))
            if state is not None and state.notice is not None:
                request_context.messages = _with_last_request_part(request_context.messages, state.notice)
                state.notice = None
            return await handler(request_context)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        """The run's lifetime: work a stage started for the run in the background (a summary made ahead of its
        compaction event; never in durable workflow code) ends when the run does, however it ends."""
        run_key = self._runs.key(ctx)
        if run_key is None:
            return await handler()
        if not self.journaled(ctx):
            self._open_runs.add(run_key)
        try:
            return await handler()
        finally:
            self._open_runs.discard(run_key)
            self._end_run(run_key)

    def _end_run(self, run_key: str) -> None:
        state = self._runs.peek(run_key)
        if state is not None:  # its near-limit state and its counter (which memoizes texts) go with it
            state.notice = state.notice_band = state.workflow_counter = None
        for stage in self._stages:
            end_run = getattr(stage, 'end_run', None)
            if end_run is not None:
                try:
                    end_run(run_key, self._emit)
                except Exception:  # cleanup only: the run's own outcome stands
                    logger.exception('stage %r failed to end the run', getattr(stage, 'name', stage))

    def _check_tool_names(self, tools: Sequence[ToolDefinition]) -> None:
        """A tool of the run named like one of ours fails the run, naming both (our tools carry a mark)."""
        owner = "one of this run's toolsets"
        name = self.readback_tool_name
        if any(t.name == name and not is_ours(t, READBACK_TOOL_METADATA) for t in tools):
            raise clash_error(name, owner)
        if self._tool is not None and TOOLS_HAVE_METADATA:
            name = self._tool.name
            if any(t.name == name and not is_ours(t, COMPACTION_TOOL_METADATA) for t in tools):
                raise clash_error(name, owner, compaction=True)

    def _send_notice(
        self,
        ctx: RunContext[Any],
        request_context: ModelRequestContext,
        processed: RequestProcessed,
        limits: ContextLimits,
    ) -> None:
        """The near-limit notice, when the history entered a new band past its start: a request-scoped system
        prompt (2.x), else at the end of this request's outgoing copy only."""
        assert self._notice is not None
        compacts = _compaction_stage(self._stages) is not None
        limit = limits.trigger if compacts else limits.budget
        band = self._notice.band(processed.tokens_after, limit)
        state = self._runs[processed.run_id]
        if band is None:  # under its start (again, after a compaction): the next crossing is told
            state.notice_band = None
            return
        if state.notice_band is not None and band <= state.notice_band:
            return
        state.notice_band = band
        tool = self._tool.name if self._tool is not None else None
        text = notice_text(processed.tokens_after, limit, compacts=compacts, tool=tool)
        part = request_scoped_prompt(text, {MARKER_KEY: {'kind': 'near_limit_notice'}})
        if REQUEST_SCOPED_PROMPTS:
            ctx.enqueue(part)
        else:  # here the hook's messages become the history: the wire copy gets it (`wrap_model_request`)
            state.notice = part
        self._emit(
            NearLimitNoticeSent(
                run_id=processed.run_id,
                context_tokens=processed.tokens_after,
                limit_tokens=limit,
                notice=text,
            )
        )

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Each attempt (2.x): fit its copy of the history (not the stored one) to a model with a smaller
        window than the step was processed for (`ModelFallback` moved on to a smaller model)."""
        if self.model is not None:
            return request_context
        state = self._runs.peek(self._runs.key(ctx))
        planned = state.planned_budget if state is not None else None
        if planned is None or self.limits_for(request_context.model).budget >= planned:
            return request_context
        with gathering() as stream_events:
            messages = await self._process_request(ctx, request_context)
        request_context.messages = messages.copy()
        await publish(ctx, stream_events)
        return request_context

    async def _process_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> list[ModelMessage]:
        return await self.process(
            request_context.messages,
            ctx=ctx,
            tool_definitions=_tools_of(request_context),
            serving_model=request_context.model,
        )

    def get_toolset(self) -> AbstractToolset[Any] | None:
        """`read_artifact`, offered only once the run's history holds a note that names it; and, when
        `compaction_tool` is on, `compact_context`."""
        readback = self.readback_toolset()
        if self._tool is None:
            return readback
        from pydantic_ai.toolsets import CombinedToolset

        return CombinedToolset([readback, self.compaction_toolset()])

    def compaction_toolset(self) -> AbstractToolset[Any]:
        """The `compact_context` tool (`compaction_tool`) for `Agent(toolsets=...)` on pydantic-ai 1.0 (a
        capability offers it itself); its id is derived from the processor's `id`."""
        if self._tool is None:
            raise ValueError(
                'compaction_toolset() needs HistoryProcessor(compaction_tool=True) (or a CompactionTool): '
                'without it the model could ask for a compaction that nothing would run'
            )
        return compaction_toolset(self._tool, toolset_id=compaction_toolset_id(self.id))

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None

    @classmethod
    def combine(cls, capabilities: Sequence[Any]) -> Any:
        """Two history processors under one id on one agent: refused, since each keeps its own state."""
        raise duplicate_error(capabilities)

    def for_agent(self, agent: Any) -> Any:
        """Checked when the agent is built: one history processor per agent (however added), tool names of its
        own, and under a durability capability a store that every worker sees."""
        capabilities = agent_capabilities(agent)
        found = [
            p for p in (history_processor_in(c, HistoryCapability) for c in capabilities) if p is not None
        ]
        if len(found) > 1:
            raise duplicate_error(found)
        owner = tool_owner(agent, self.readback_tool_name)
        if owner is not None:
            raise clash_error(self.readback_tool_name, owner)
        owner = tool_owner(agent, self._tool.name) if self._tool is not None else None
        if owner is not None and self._tool is not None:
            raise clash_error(self._tool.name, owner, compaction=True)
        durability = durability_base()
        if durability is not None and any(isinstance(c, durability) for c in capabilities):
            problem = durable_store_problem(self.store)
            if problem is not None:
                raise user_error(problem)
        return self

    def capability(self) -> HistoryCapability:
        """The processor itself, a capability (kept for 0.1.0 code: `capabilities=[p.capability()]`)."""
        if not HAS_CAPABILITIES:
            raise RuntimeError(
                'this pydantic-ai version has no capabilities: use Agent(history_processors=[processor])'
            )
        return self

    def readback_toolset(self) -> AbstractToolset[Any]:
        """A toolset with `read_artifact` (for `Agent(toolsets=...)` on 1.x), offered only once the run's
        history holds a note that names it (see `ReadbackGate`)."""
        from ..readback import readback_toolset

        return readback_toolset(
            self.store,
            scope=self.scope_of,
            gate=self.readback_gate,
            toolset_id=readback_toolset_id(self.id),
            room=self.read_room,
            tool_name=self.readback_tool_name,
        )

    def read_room(self, ctx: RunContext[Any]) -> ReadRoom | None:
        """What one `read_artifact` call may return: the room of the request that will carry it, shared by
        the reads the model made in parallel (None when it cannot be worked out: the read's `limit` alone)."""
        try:
            model = self.model if self.model is not None else ctx.model
            counter = self.counter_for(model)
            limits = self.limits_for(model)
            tokens = read_room_tokens(
                ctx.messages,
                counter=counter,
                limits=limits,
                floor=self._artifact_settings().resolve_budget(limits),
                tool_name=self.readback_tool_name,
                keep_first_user_message=self.keep_first_user_message,
            )
        except Exception:  # a bound only: the read still answers within its limit
            logger.debug('could not work out the room of a read-back', exc_info=True)
            return None
        if tokens is None:
            return None
        correction = counter.tokenizer_profile.correction
        return ReadRoom(
            max_tokens=tokens, count_tokens=lambda text: math.ceil(counter.count_text(text) * correction)
        )

    @property
    def history_stages(self) -> list[HistoryStage]:
        """The stages in the order they run."""
        return self._stages

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

    async def _will_name_readback(self, ctx: Any, messages: Sequence[ModelMessage]) -> bool:
        """Whether a stage will certainly write a note naming `read_artifact` into this history."""
        stages = [s for s in self._stages if hasattr(s, 'will_name_readback')]
        if not stages or not messages:
            return False
        try:
            context = self.make_context(ctx=ctx)
            with self._marks_scope():
                for stage in stages:
                    verdict = stage.will_name_readback(messages, context)  # type: ignore[attr-defined]
                    if await verdict if inspect.isawaitable(verdict) else verdict:
                        return True
        except Exception:  # a prediction only: the tool then comes with the next request
            logger.debug('could not predict a read-back note', exc_info=True)
        return False

    # ---- processing -----------------------------------------------------------------------------------

    def counter_for(self, model: ModelRef | None) -> TokenCounter:
        """The shared token counter for a model (memoization is per model family)."""
        name = model_name_of(model)
        if name not in self._counters:
            self._counters[name] = TokenCounter(name, profile=self.token_profile)
        return self._counters[name]

    def _workflow_counter(self, ctx: RunContext[Any] | None, model: ModelRef | None) -> TokenCounter:
        """Workflow code counts with the run's own counter, begun afresh at its first step: estimates decide
        what a request journals, and the shared one may have learned from later requests before a replay."""
        state = self._runs[self._runs.key(ctx)]
        name = model_name_of(model)
        counter = state.workflow_counter
        if counter is None or counter.model_name != name or getattr(ctx, 'run_step', 1) <= 1:
            counter = state.workflow_counter = TokenCounter(name, profile=self.token_profile)
        return counter

    def limits_for(self, model: ModelRef | None) -> ContextLimits:
        """The context policy resolved for `model` (once per model); a `FallbackModel` gets the limits of
        its smallest known window. An unknown window falls back to `ContextPolicy.fallback_context_window`
        with one `context_window_fallback` warning; an impossible setting raises `ContextPolicyError`, a
        clamped one warns once (`setting_clamped`)."""
        return self._model_limits.limits_for(model)

    async def _ask_local_servers(self, model: ModelRef | None, ctx: RunContext[Any] | None) -> None:
        """Ask each local server that may serve the request for its window, once per server and process;
        under durable execution on every run's first step (a replay must make the same calls)."""
        journaled = ctx is not None and self.journaled(ctx)
        if journaled and getattr(ctx, 'run_step', 1) > 1:
            return
        for candidate, server in self._model_limits.servers_to_ask(model, again=journaled):
            if journaled and ctx is not None:
                window = await self.ask_server_window(ctx, server.base_url, server.model_name)
            else:
                window = await self.probe_server_window(
                    ctx, server.base_url, server.model_name, model=candidate
                )
            self._model_limits.learn_window(server, window)

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
    ) -> HistoryContext:
        """The per-call context the stages receive, with the limits resolved for the serving model."""
        store = self.store if store is None else store
        if model is None:
            model = self._serving(ctx, serving_model)
        # Under durable execution every side effect is a journaled operation; elsewhere it runs in place.
        operations = RunOperations(self, ctx) if ctx is not None and self.journaled(ctx) else None
        scope = self.scope_of(ctx)
        run_id = self._runs.key(ctx)
        # a wrapper over several models counts like the first it tries
        counted = cast('ModelRef | None', serving_candidates(model)[0])
        return HistoryContext(
            counter=self.counter_for(counted) if operations is None else self._workflow_counter(ctx, counted),
            limits=self.limits_for(model),
            summarizer=self.summarizer,
            pin=self.pin,
            keep_first_user_message=self.keep_first_user_message,
            model=model,
            run_context=ctx,
            run_id=run_id,
            # every key a stage uses carries the run's scope: nothing one tenant's run cached reaches another
            cache=scoped(JournaledCache(operations) if operations is not None else self.cache, scope),
            store=JournaledStore(operations, store) if operations is not None else store,
            operations=operations,
            emit_event=self._emit,
            usage=ctx.usage if ctx is not None else None,
            tool_definitions=tuple(tool_definitions),
            serving_model=serving_model,
            scope=scope,
            background_allowed=operations is None and run_id in self._open_runs,
            compaction_request=compaction_request,
        )

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
        stage = _compaction_stage(self._stages)
        if stage is None:
            raise RuntimeError(
                'this processor has no compaction stage (create_history_processor(compaction=False)?)'
            )
        history = list(messages)
        async with self._request_scope(ctx, history) as store:
            context = self.make_context(ctx=ctx, model=model, store=store)
            check = self._input_check(context.run_id)
            validity = check.check(history)
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
        await self._ask_local_servers(model if model is not None else self._serving(ctx, serving_model), ctx)
        # the model's compaction request (its call answered in the newest request), from a run step's history
        tool = self._tool if ctx is not None else None
        requested = requested_compaction(messages, tool) if tool is not None else None
        async with self._request_scope(ctx, messages) as store:
            started = perf()
            context = self.make_context(
                ctx=ctx,
                model=model,
                tool_definitions=tool_definitions,
                serving_model=serving_model,
                store=store,
                compaction_request=requested,
            )
            if not messages:
                context.warn('empty_history', 'the processor was given an empty history; returned unchanged')
                return messages
            tracer = self._tracer_for(ctx)
            spans = DeferredSpans(tracer) if tracer is not None else None
            if spans is not None:
                context.tracer, context.open_spans = tracer, spans.open
            try:
                return await self._process(messages, context, started, spans)
            except _CONFIG_ERRORS:
                raise
            except Exception as exc:  # outside any stage, e.g. counting content of a kind nobody foresaw
                logger.exception('processing failed; the history is passed on unchanged')
                error = f'{type(exc).__name__}: {exc}'
                self._emit(StageFailed(run_id=context.run_id, stage='processor', error=error))
                return messages
            finally:
                if spans is not None:
                    spans.close()

    @contextlib.asynccontextmanager
    async def _request_scope(
        self, ctx: Any, messages: Sequence[ModelMessage]
    ) -> AsyncIterator[ArtifactStore]:
        """Where one request's work runs, and the store it writes to. Workflow code: no I/O, clocks pinned to
        the newest model response, seals keyed by the store's explicit secret (`for_agent` checks it).
        Elsewhere the store's persisted secret is loaded before the first id or mark is made."""
        if self.journaled(ctx):
            with replay_safe(message_time(messages)), self.marks():
                yield self.store
            return
        store = await self._prepared_store(ctx)
        with self._marks_scope(store):
            yield store

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

    @contextlib.contextmanager
    def _marks_scope(self, store: ArtifactStore | None = None) -> Iterator[None]:
        """Seals made and verified with the key of the store's secret: the one secret, kept where the data is,
        so every process sharing the store recognises the package's notes (no environment variable)."""
        store = self.store if store is None else store
        # a store that cannot say (or, in a prediction before the first request, has not said yet): the
        # process's own key, whose marks no other process reads as ours
        unkeyed = isinstance(store, UnavailableStore) or not store.secret_ready
        keyed = contextlib.nullcontext() if unkeyed else seal_key_scope(store._id_secret())
        with readback_tool_scope(self.readback_tool_name), keyed:
            yield

    @contextlib.contextmanager
    def marks(self) -> Iterator[None]:
        """Read (and write) the package's marks as this processor does, outside a run: seals (the only mark
        on pydantic-ai 1.0, and on user-prompt text) are keyed by the store's secret. A `RedisStore` must have
        loaded its secret first (`await processor.store.prepare()`), else this raises `StoreError`."""
        with seal_key_scope(self.store._id_secret()), readback_tool_scope(self.readback_tool_name):
            yield

    def journaled(self, ctx: object) -> bool:
        """Whether this run journals the processor's operations: a durability capability bound them."""
        return bound_durable_operation(ctx, self.id, 'store_write')

    def _tracer_for(self, ctx: object) -> Any:
        """The run's own tracer (its instrumentation settings' provider, replay-safe under durable engines);
        None for a run that is not instrumented; OpenTelemetry's global one outside a run."""
        tracer = getattr(ctx, 'tracer', None)
        if isinstance(tracer, NoOpTracer):
            # late 1.x runs history processors with a no-op tracer on the context even when the run is
            # instrumented by its `Instrumentation` capability; otherwise nothing records: no span at all
            settings = instrumentation_of(ctx)
            return settings.tracer if settings is not None else None
        return tracer if tracer is not None else self._tracer

    async def _process(
        self,
        messages: list[ModelMessage],
        context: HistoryContext,
        started: float,
        spans: DeferredSpans | None = None,
    ) -> list[ModelMessage]:
        await context.count_newest(messages)  # a large new message is tokenized off the event loop
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
        given = Validity(messages, validity.structure, validity.violations)
        sent = _sent_before(messages)
        rewriter: str | None = None
        for stage in self._stages:
            stage_input = current
            current = await self._run_stage(stage.name, stage, current, context, validity, spans)
            if rewriter is None and current is not stage_input and _first_change(messages, current) < sent:
                rewriter = stage.name
        if self._over_budget(current, messages, before.total, context, 'processor'):
            current, validity, rewriter = messages, given, None
        check.adopt(validity)
        context.counter.mark_sent(current, tool_definitions=context.tool_definitions or None)
        # the idle path: nothing changed, so the estimate of the input stands
        after = before if current is messages else context.estimate(current)
        rewrite = self._rewrite(messages, current, sent, rewriter, context)
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
        self._emit(event)
        _PROCESSED.set(event)
        return current

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
        except _CONFIG_ERRORS:
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
        problem = self._worse(result, messages, context, validity)
        if problem is not None:
            logger.error('stage %r made the history worse (%s); output discarded', name, problem)
            self._emit(StageFailed(run_id=context.run_id, stage=name, error=problem))
            return messages
        return result

    def _worse(
        self,
        result: list[ModelMessage],
        messages: list[ModelMessage],
        context: HistoryContext,
        validity: Validity,
    ) -> str | None:
        """Why a stage's output is worse than its input (empty, or a violation the input had not), or None."""
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
    ) -> tuple[int, int, str | None]:
        """The prefix rewrite this request causes: sent messages that changed, tokens cached again from the
        first of them, and what changed them (a stage, or the read-back tool appearing: tools come first)."""
        offered = self._readback_offered(context)
        first = _first_change(messages, result) if rewriter is not None else sent
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

    def _readback_offered(self, context: HistoryContext) -> bool:
        """Whether this request is the first of its run to offer `read_artifact` (known from the request's
        tool definitions, which the capability passes; never on the run's first request: none is cached)."""
        if not context.tool_definitions:
            return False
        offered = any(t.name == self.readback_tool_name for t in context.tool_definitions)
        state = self._runs[context.run_id]
        before, state.offered_readback = state.offered_readback, offered
        return offered and before is False

    def _input_check(self, run_id: str | None) -> InputCheck:
        """The run's incremental input check: each run continues its own previous input."""
        return self._runs[run_id].input_check

    # ---- events and stats ---------------------------------------------------------------------------

    def _emit(self, event: HistoryEvent) -> None:
        record_event(self._overall, event)
        if event.run_id is not None:
            record_event(self._runs[event.run_id].stats, event)
        if not isinstance(event, (HistoryWarning, StageFailed)):  # those are logged where raised
            logger.debug('%s', event)
        if self.on_history_event is not None:
            try:
                self.on_history_event(event)
            except Exception:
                logger.exception('on_event callback raised; ignored')
        gather(event)

    def stats(self) -> HistoryStats:
        """Running totals per run and overall, plus the shared cache's hits and misses."""
        return HistoryStats(
            overall=self._overall.copy(),
            runs={run_id: stats.copy() for run_id, stats in self._runs.stats()},
            cache_hits=self.cache.stats.hits,
            cache_misses=self.cache.stats.misses,
        )


def _tools_of(request_context: ModelRequestContext) -> list[ToolDefinition]:
    parameters = request_context.model_request_parameters
    return [*parameters.function_tools, *parameters.output_tools]


def _sent_before(messages: Sequence[ModelMessage]) -> int:
    """How many leading messages an earlier request already sent: every one before the newest response."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], ModelResponse):
            return index
    return 0


def _first_change(before: Sequence[ModelMessage], after: Sequence[ModelMessage]) -> int:
    """The first index where `after` no longer holds `before`'s message (the same object)."""
    for index, (old, new) in enumerate(zip(before, after, strict=False)):
        if old is not new:
            return index
    return min(len(before), len(after))


def coerce_settings(kind: type[_SettingsT], value: object, name: str) -> _SettingsT:
    """A settings object from itself or from a mapping of its fields (an agent spec's YAML or JSON)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, dict):
        return kind(**value)
    raise TypeError(
        f'{name} must be a {kind.__name__} or a mapping of its fields, got {type(value).__name__}'
    )


def coerce_switch(kind: type[_SettingsT], value: object, name: str) -> _SettingsT | bool:
    """An optional feature's setting: True or False, else as `coerce_settings`."""
    return value if isinstance(value, bool) else coerce_settings(kind, value, name)


def _check_fields(processor: HistoryCapability) -> None:
    """Every field's type, at construction and with its name (a path given as the store, a YAML string given
    as a flag), rather than an `AttributeError` at the first request."""
    for name, kinds, expected in processor._field_types:
        value = getattr(processor, name)
        if not isinstance(value, kinds) or (kinds is int and isinstance(value, bool)):
            got = f'{type(value).__name__} {value!r}'
            raise TypeError(f'{type(processor).__name__}.{name} must be {expected}, got {got}')
    for name in ('pin', 'scope', 'on_history_event'):
        value = getattr(processor, name)
        if value is not None and not callable(value):
            kind = type(processor).__name__
            raise TypeError(f'{kind}.{name} must be callable or None, got {type(value).__name__}')
    check_model_ref(processor.model, f'{type(processor).__name__}.model')


_CONFIG_ERRORS = (ContextWindowUnknownError, ContextPolicyError)
"""Configuration errors: raised out of the run (everything else is caught, logged and the history kept)."""


def exempting_readback(settings: ArtifactSettings, tool_name: str) -> ArtifactSettings:
    """The artifact settings with the read-back tool, under its configured name, exempt from planning."""
    if tool_name == READ_ARTIFACT_TOOL or READ_ARTIFACT_TOOL not in settings.exempt_tools:
        return settings
    exempt = (settings.exempt_tools - {READ_ARTIFACT_TOOL}) | {tool_name}
    return dataclasses.replace(settings, exempt_tools=frozenset(exempt))


def _enabled(kind: type[_SettingsT], value: _SettingsT | bool) -> _SettingsT | None:
    """The settings of an optional feature: its own, its defaults for True, None when it is off."""
    if value is True:
        return kind()
    return None if value is False else value


def _compaction_stage(stages: Sequence[HistoryStage]) -> Any:
    """The stage that compacts on demand (`compact_history`), or None."""
    return next((stage for stage in stages if hasattr(stage, 'compact_history')), None)


def _check_compaction_tool(tool: CompactionTool, stages: Sequence[HistoryStage], readback_name: str) -> None:
    """A compaction tool needs a stage that compacts, and a name of its own (settings that cannot work fail
    here, naming the field)."""
    if _compaction_stage(stages) is None:
        raise ValueError(
            'compaction_tool needs a compaction stage, but this capability has none '
            '(compaction=False, or stages= without a Compactor): the model could ask for a compaction that '
            'nothing would run'
        )
    _check_tool_name('CompactionTool.name', tool.name, also=readback_name)


def _check_tool_name(field: str, name: object, also: str | None = None) -> None:
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name) or name == also:
        differ = ' and differ from the read-back tool' if also is not None else ''
        raise ValueError(
            f'{field} must be a tool name providers accept (letters, digits, _ and -, at most 64, starting '
            f'with a letter or _){differ}, got {name!r}'
        )


def _with_last_request_part(messages: Sequence[ModelMessage], part: ModelRequestPart) -> list[ModelMessage]:
    """A copy of `messages` whose last request (the one being sent) has `part` at its end."""
    result = list(messages)
    for index in range(len(result) - 1, -1, -1):
        message = result[index]
        if isinstance(message, ModelRequest):
            result[index] = dataclasses.replace(message, parts=[*message.parts, part])
            break
    return result


@dataclass(kw_only=True, eq=False)
class StageCapability(HistoryCapability):
    """A stage that is a capability of its own: alone on an agent its pipeline is itself, with the shared
    settings its fields give; in a `HistoryProcessor` those are the processor's. Called with a `RunContext` it
    is a history processor; with a `HistoryContext`, a `HistoryStage` (`apply_stage`)."""

    name: str = 'stage'
    """The stage's name in events and logs."""

    def _pipeline(self) -> list[HistoryStage]:
        return [self]

    async def apply_stage(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        """The stage's work on one request's history (the pipeline's guard checks what it returns)."""
        raise NotImplementedError

    @overload
    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage], /) -> list[ModelMessage]: ...

    @overload
    async def __call__(
        self, messages: list[ModelMessage], context: HistoryContext, /
    ) -> list[ModelMessage]: ...

    async def __call__(  # type: ignore[misc]  # pydantic-ai reads the first annotation: RunContext
        self, ctx: RunContext[Any], messages: list[ModelMessage] | HistoryContext, /
    ) -> list[ModelMessage]:
        if isinstance(messages, HistoryContext):  # a pipeline's call: (messages, context)
            return await self.apply_stage(cast('list[ModelMessage]', ctx), messages)
        return await super().__call__(ctx, messages)


def history_processor_annotations(cls: type[Any]) -> None:
    """pydantic-ai 1.0 passes `ctx` to a history processor by the callable's own `__annotations__` (an
    instance's are its class's), not `__call__`'s signature: there `__call__`'s stand in for the fields'."""
    if not HAS_CAPABILITIES:  # resolved here, where the names of `__call__`'s annotations are imported
        cls.__annotations__ = typing.get_type_hints(cls.__call__)

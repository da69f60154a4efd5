"""`HistoryCapability`: pydantic-ai's hooks around a pipeline of stages, run under one guard (a stage that
raises or makes the history worse is skipped; the output never newly passes the budget) against the context
policy resolved once per request; every decision an event, a log line and a span."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from opentelemetry.trace import get_tracer
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart

from .._compat import (
    HAS_CAPABILITIES,
    REQUEST_SCOPED_PROMPTS,
    CapabilityBase,
    is_durability_capability,
    request_scoped_prompt,
)
from ..budget._policy import ContextLimits, ContextPolicy
from ..budget.model_info import model_info
from ..budget.notice import NearLimitNotice, notice_text
from ..cache import MemoryCache, SummaryCache
from ..context._context import (
    HistoryStage,
    ScopeKey,
)
from ..context._summarizer_settings import ModelRef, SummarizerSettings
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
from ..messages._marks import MARKER_KEY, READ_ARTIFACT_TOOL
from ..store import ArtifactStore, MemoryStore
from ._agent_checks import (
    agent_capabilities,
    claim_step,
    clash_error,
    duplicate_error,
    durable_store_problem,
    given_toolsets,
    history_processor_in,
    tool_owner,
    toolsets_twice_error,
    user_error,
)
from ._compaction_tool import CompactionTool, compaction_toolset_id
from ._guard import PROCESSED
from ._limits import ModelLimits
from ._runs import Runs
from ._settings_checks import (
    FIELD_TYPES,
    FieldTypes,
    check_compaction_tool,
    check_fields,
    check_tool_name,
    coerce_settings,
    coerce_switch,
    compaction_stage,
    enabled_settings,
)
from ._stats import HistoryStats, RunStats, record_event
from ._toolsets import Toolsets

if TYPE_CHECKING:
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset

    from ..context._artifact_settings import ArtifactSettings
    from ..messages.pinning import PinPredicate
    from ..readback import ReadbackGate
    from ..tokens import TokenCounter, TokenizerProfile


logger = logging.getLogger('pydantic_ai_history')

EventHandler = Callable[[HistoryEvent], None]


DEFAULT_ID = 'pydantic_ai_history'
"""The capability's default `id`: stable, so durable engines and message history can name it."""

SERIALIZATION_NAME = 'PydanticAIHistory'
"""The name an agent spec builds the processor by (`Agent.from_spec(..., custom_capability_types=...)`)."""


@dataclass(kw_only=True, eq=False)
class HistoryCapability(Toolsets, CapabilityBase[Any]):
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

    _field_types: ClassVar[tuple[tuple[str, FieldTypes, str], ...]] = FIELD_TYPES
    """The fields checked at construction (`FIELD_TYPES`, and a subclass's own)."""

    # pydantic-ai compares capabilities by identity; the processor's state makes it one of a kind.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __post_init__(self) -> None:
        self.policy = coerce_settings(ContextPolicy, self.policy, 'policy')
        self.summarizer = coerce_settings(SummarizerSettings, self.summarizer, 'summarizer')
        self.compaction_tool = coerce_switch(CompactionTool, self.compaction_tool, 'compaction_tool')
        self.near_limit_notice = coerce_switch(NearLimitNotice, self.near_limit_notice, 'near_limit_notice')
        check_fields(self)
        if self.max_tracked_runs < 1:
            raise ValueError(f'max_tracked_runs must be positive, got {self.max_tracked_runs!r}')
        check_tool_name('readback_tool_name', self.readback_tool_name)
        self._stages: list[HistoryStage] = self._pipeline()
        self._counters: dict[str | None, TokenCounter] = {}
        self._last_counting: tuple[ModelRef | None, TokenCounter] | None = None
        self._last_scoped: tuple[SummaryCache | None, str, SummaryCache | None] | None = None
        self._model_limits = ModelLimits(self.policy, self._emit)
        self._overall = RunStats()
        self._runs = Runs(self.max_tracked_runs)
        self._tracer = get_tracer('pydantic_ai_history')
        from ..readback import ReadbackGate  # the read-back tool loads with the first processor

        self.readback_gate: ReadbackGate = ReadbackGate(
            run_key=self._runs.key, predict=self._will_name_readback, offered_always=self.journaled
        )
        """Decides when `read_artifact` is offered: once a run's history holds something to read."""
        self._tool = enabled_settings(CompactionTool, self.compaction_tool)
        self._notice = enabled_settings(NearLimitNotice, self.near_limit_notice)
        if self._tool is not None:
            check_compaction_tool(self._tool, self._stages, self.readback_tool_name)
        self._built_toolsets: dict[str, tuple[tuple[object, ...], AbstractToolset[Any]]] = {}
        """The tools this processor offers, built once (`Toolsets._built`): every agent shares them."""
        if self.model is not None and (self.policy.strict or model_info(self.model).context_window):
            # settings that cannot work with a known window (or an unknown one under strict) fail here
            self.limits_for(self.model)

    def _pipeline(self) -> list[HistoryStage]:
        """The stages to run, in order."""
        raise NotImplementedError

    def _artifact_settings(self) -> ArtifactSettings:
        """The artifact settings the effects read."""
        from ..context._artifact_settings import ArtifactSettings

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
        tools = _tools_of(request_context)
        self._check_tool_names(tools)
        before = request_context.messages
        with gathering() as stream_events:
            token = PROCESSED.set(None)
            try:
                messages = await self._process_request(ctx, request_context, tools)
                processed = PROCESSED.get()
            finally:  # the step's event stays with the step, not in the run's context
                PROCESSED.reset(token)
            if messages is not before:  # the idle path leaves pydantic-ai's lists as they are
                self.readback_gate.observe(ctx, before, messages)
                request_context.messages = messages.copy()
                ctx.messages[:] = messages
            if processed is not None and self._notice is not None:
                self._send_notice(ctx, *processed)
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
        if not self.journaled(ctx):  # `_runs` bounds the runs going on
            self._runs.begin(run_key)
        try:
            return await handler()
        finally:
            self._runs.end(run_key)
            self._end_run(run_key)

    def _end_run(self, run_key: str) -> None:
        state = self._runs.peek(run_key)
        if state is not None:
            state.end()
        for counter in self._counters.values():  # the ended run's history: held weakly from now on
            counter.release(keep=self._runs.open_count)
        for stage in self._stages:
            end_run = getattr(stage, 'end_run', None)
            if end_run is not None:
                try:
                    end_run(run_key, self._emit)
                except Exception:  # cleanup only: the run's own outcome stands
                    logger.exception('stage %r failed to end the run', getattr(stage, 'name', stage))

    def _send_notice(self, ctx: RunContext[Any], processed: RequestProcessed, limits: ContextLimits) -> None:
        """The near-limit notice, when the history entered a new band past its start: a request-scoped system
        prompt (2.x), else at the end of this request's outgoing copy only."""
        assert self._notice is not None
        tokens, run_id = processed.tokens_after, processed.run_id
        compacts = compaction_stage(self._stages) is not None
        limit = limits.trigger if compacts else limits.budget
        band = self._notice.band(tokens, limit)
        state = self._runs[run_id]
        if band is None:  # under its start (again, after a compaction): the next crossing is told
            state.notice_band = None
            return
        if state.notice_band is not None and band <= state.notice_band:
            return
        state.notice_band = band
        tool = self._tool.name if self._tool is not None else None
        text = notice_text(tokens, limit, compacts=compacts, tool=tool)
        part = request_scoped_prompt(text, {MARKER_KEY: {'kind': 'near_limit_notice'}})
        if REQUEST_SCOPED_PROMPTS:
            ctx.enqueue(part)
        else:  # here the hook's messages become the history: the wire copy gets it (`wrap_model_request`)
            state.notice = part
        self._emit(NearLimitNoticeSent(run_id=run_id, context_tokens=tokens, limit_tokens=limit, notice=text))

    async def _process_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext, tools: list[ToolDefinition]
    ) -> list[ModelMessage]:
        return await self.process(
            request_context.messages,
            ctx=ctx,
            tool_definitions=tools,
            serving_model=request_context.model,
        )

    def get_toolset(self) -> AbstractToolset[Any] | None:
        """`read_artifact`, offered only once the run's history holds a note that names it; and, when
        `compaction_tool` is on, `compact_context`."""
        readback = self.readback_toolset()
        if self._tool is None:
            return readback
        compaction = self.compaction_toolset()
        from pydantic_ai.toolsets import CombinedToolset

        return self._built(
            'combined', (readback, compaction), lambda: CombinedToolset([readback, compaction])
        )

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
        from ..readback import readback_toolset_id

        twice = given_toolsets(agent, (readback_toolset_id(self.id), compaction_toolset_id(self.id)))
        if twice:
            raise toolsets_twice_error(twice)
        owner = tool_owner(agent, self.readback_tool_name)
        if owner is not None:
            raise clash_error(self.readback_tool_name, owner)
        owner = tool_owner(agent, self._tool.name) if self._tool is not None else None
        if owner is not None and self._tool is not None:
            raise clash_error(self._tool.name, owner, compaction=True)
        if any(is_durability_capability(c) for c in capabilities):
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

    @property
    def history_stages(self) -> list[HistoryStage]:
        """The stages in the order they run."""
        return self._stages

    # ---- events and stats ---------------------------------------------------------------------------

    def _emit(self, event: HistoryEvent) -> None:
        record_event(self._overall, event)
        if event.run_id is not None:
            record_event(self._runs[event.run_id].stats, event)
        # those are logged where raised; `isEnabledFor` first: one call fewer on every request
        if not isinstance(event, (HistoryWarning, StageFailed)) and logger.isEnabledFor(logging.DEBUG):
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


def _with_last_request_part(messages: Sequence[ModelMessage], part: ModelRequestPart) -> list[ModelMessage]:
    """A copy of `messages` whose last request (the one being sent) has `part` at its end."""
    result = list(messages)
    for index in range(len(result) - 1, -1, -1):
        message = result[index]
        if isinstance(message, ModelRequest):
            result[index] = dataclasses.replace(message, parts=[*message.parts, part])
            break
    return result

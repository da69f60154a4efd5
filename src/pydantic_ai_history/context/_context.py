"""What a stage receives for one processing call, and the interface every stage implements."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic_ai.messages import ModelMessage

from .._compat import run_id_of
from ..budget._policy import ContextLimits, ContextPolicy
from ..budget._room import hard_limit
from ..budget.model_info import ModelInfo
from ..events import ContentLost, HistoryEvent, HistoryWarning, WarningKind
from ._offload import LONG_HISTORY, large_content
from ._summarizer_settings import ModelRef, SummarizerSettings, Timeout

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue
    from pydantic_ai import RunContext
    from pydantic_ai.models import Model
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RunUsage

    from ..cache import SummaryCache
    from ..files import FileResult, FileSettings
    from ..messages.pinning import PinPredicate
    from ..store import ArtifactStore
    from ..tokens import TokenCounter, TokenEstimate
    from ._artifact_models import ArtifactPlan
    from ._summarizer_settings import TextPurpose


logger = logging.getLogger('pydantic_ai_history')

_T = TypeVar('_T')

FAR_BELOW = 0.5
"""A history whose byte-length bound is at most this share of its hard limit (the budget, at most the
compaction trigger) is not counted: every stage leaves it as it is, and a near-limit notice (from 85% by
default) is far away."""

ScopeKey = Callable[['RunContext[Any]'], str]
"""Maps a run's `RunContext` to the scope its artifacts are stored and read back in (a tenant, a user)."""


def default_scope(ctx: RunContext[Any] | None) -> str:
    """The conversation id where pydantic-ai has one, else the oldest `run_id` on the history's messages
    (which names the chain of runs that continued it); on pydantic-ai 1.0, which has neither, `''`."""
    if ctx is None:
        return ''
    conversation = getattr(ctx, 'conversation_id', None)
    if isinstance(conversation, str) and conversation:
        return f'conversation:{conversation}'
    for message in getattr(ctx, 'messages', None) or ():
        run_id = getattr(message, 'run_id', None)
        if isinstance(run_id, str) and run_id:
            return f'run:{run_id}'
    run_id = run_id_of(ctx)
    return f'run:{run_id}' if run_id else ''


ARTIFACT_MARKER = '[pydantic-ai-history: artifact'
"""Opening of every text the artifact stage writes in place of an artifact, by which the read-back gate sees
something to read (a spoofed one only offers the tool, which reads nothing outside the run's scope).
Processed content itself is recognised by identity only (`_marks`), never by this text."""


@dataclass(frozen=True)
class CompactionRequest:
    """A compaction the model asked for (`HistoryProcessor.compaction_tool`)."""

    focus: str | None = None
    """What the model said the summary must keep."""
    min_tokens: int | None = None
    """Below this many tokens the request is declined (None: the policy's target)."""


def _unknown_model_limits() -> ContextLimits:
    return ContextPolicy().resolve(ModelInfo(None, None, 'unknown'))


@dataclass(kw_only=True)
class HistoryContext:
    """What every stage receives for one request (the processor builds it): the resolved limits, counting,
    cache, store, events (see docs/settings.md, "A custom stage")."""

    counter: TokenCounter
    """Counts tokens the way the serving model does (anchored on the provider's reported usage)."""
    limits: ContextLimits = field(default_factory=_unknown_model_limits)
    """The context policy resolved for the serving model (budget, trigger, target), which every stage plans
    against. Default: an unknown model's (the fallback window)."""
    summarizer: SummarizerSettings = field(default_factory=SummarizerSettings)
    """The model and limits of every LLM call a stage makes."""
    pin: PinPredicate | None = None
    """Units with a message this accepts (or a `pin()` marker) are kept by the compactor and the window."""
    keep_first_user_message: bool = True
    """Keep the first user turn (the original task) verbatim, ahead of everything the stages drop."""
    model: ModelRef | None = None
    """The run's model, used when `summarizer.model` is not set."""
    run_context: RunContext[Any] | None = None
    """The `RunContext` of the request (None outside a run), for custom stages that need the run's deps."""
    run_id: str | None = None
    """The run's id (a stable per-run key on pydantic-ai 1.0); None outside a run."""
    cache: SummaryCache | None = None
    """The shared cache for summaries, conversions and prefix records."""
    store: ArtifactStore | None = None
    """Where originals and transcripts are kept for `read_artifact`."""
    emit_event: Callable[[HistoryEvent], None] = field(default=lambda event: None)
    """Receives every event a stage emits (the processor records, logs and forwards them)."""
    usage: RunUsage | None = None
    """The run's `RunUsage`, to which LLM calls made by stages add their own usage."""
    serving_model: Model | None = None
    """The model serving this request (the hook's `request_context.model`, under a durability capability the
    durable one, which journals `compact_messages`); None: the run context's model."""
    tool_definitions: tuple[ToolDefinition, ...] = ()
    """The request's tool definitions, where known (the capability passes them); counted in estimates."""
    scope: str = ''
    """The scope (conversation or tenant) this run's artifacts are stored and read back in."""
    operations: StageOperations | None = None
    """Where LLM calls and file conversions run: the processor's durable operations within a run; None runs
    them in place (a stage used on its own)."""
    tracer: Tracer | None = None
    """The run's tracer, for the stages' own spans (`span`); None when nothing records them."""
    open_spans: Callable[[], None] | None = None
    """Opens the processor's and the running stage's spans before a stage opens its own (`DeferredSpans`)."""
    background_allowed: bool = False
    """Whether a stage may start work that outlives this request (a summary ahead of its compaction event):
    outside durable workflow code, when the run hook will tell the stages the run ended (`end_run`)."""
    compaction_request: CompactionRequest | None = None
    """The model's `compact_context` call answered in this request: the compactor compacts now (when the
    history is worth it), with the focus the model gave."""

    @property
    def context_window(self) -> int:
        """The usable context window (`limits.context_window`)."""
        return self.limits.context_window

    @property
    def summarizer_model(self) -> ModelRef | None:
        """The model every LLM call of the stages goes to: `summarizer.model`, else the run's."""
        return self.summarizer.model if self.summarizer.model is not None else self.model

    _last_estimate: tuple[Sequence[ModelMessage], int, TokenEstimate] | None = field(
        default=None, init=False, repr=False
    )

    def _known(self, messages: Sequence[ModelMessage]) -> TokenEstimate | None:
        """The estimate last made of this list, while it is as long as it was then."""
        last = self._last_estimate
        return last[2] if last is not None and last[0] is messages and last[1] == len(messages) else None

    def estimate(self, messages: Sequence[ModelMessage]) -> TokenEstimate:
        """The anchored estimate of `messages`, computed once per list while stages pass it on unchanged."""
        last = self._last_estimate  # `_known`, inline: every stage asks on every request
        if last is not None and last[0] is messages and last[1] == len(messages):
            return last[2]
        estimate = self.counter.estimate(messages, tool_definitions=self.tool_definitions)
        self._last_estimate = (messages, len(messages), estimate)
        return estimate

    def fits_proved(self, messages: Sequence[ModelMessage]) -> bool:
        """Whether `prove_fits` proved this list (as long as it is now) far below its limit: then a stage that
        acts only on a history near its limit has nothing to do (see `HistoryStage`)."""
        known = self._known(messages)
        return known is not None and known.bounded

    def prove_fits(self, messages: Sequence[ModelMessage], *, below: float = FAR_BELOW) -> bool:
        """Whether the byte-length bound of the request's history (`TokenCounter.upper_bound`) proves it far
        below its limit: at most `below` of the budget or the compaction trigger, whichever is lower. Then
        no stage acts on it, and `estimate(messages)` (this list only: a stage's pieces are counted) is that
        bound: nothing is counted and the tokenizer is not loaded."""
        known = self._known(messages)
        if known is not None:
            return known.bounded
        bound = self.counter.upper_bound(messages, tool_definitions=self.tool_definitions)
        if bound is None or bound.total > hard_limit(self.limits) * below:
            return False
        self._last_estimate = (messages, len(messages), bound)
        return True

    def artifact_id(self, data: bytes) -> str:
        """The id `data` is stored under in this run's scope: keyed by the store, unguessable from content."""
        if self.store is None:
            from ..store import artifact_id

            return artifact_id(data)
        return self.store.artifact_id(data, scope=self.scope)

    async def store_original(
        self,
        artifact_id: str,
        data: bytes,
        *,
        media_type: str,
        source: str,
        metadata: Mapping[str, str] | None = None,
        code: WarningKind = 'artifact_store_failed',
        consequence: str = '',
    ) -> bool:
        """Store one original in the run's scope before anything stands in for it: the one path every stage
        stores by. False when there is no store, or it refuses or fails (then a `code` warning names the
        original, the error and the `consequence`): the caller must not say the original is stored."""
        if self.store is None:
            return False
        try:
            await self.store.put(
                artifact_id, data, media_type=media_type, source=source, metadata=metadata, scope=self.scope
            )
        except Exception as exc:  # StoreError, a quota, or a backend that raises something else
            self.warn(
                code,
                f'could not store {source} as {artifact_id[:16]} ({type(exc).__name__}: {exc}){consequence}',
                artifact_id=artifact_id,
            )
            return False
        return True

    async def off_loop(self, function: Callable[..., _T], *args: Any) -> _T:
        """`function(*args)` in a worker thread, so work proportional to content size never blocks the event
        loop; in place in durable workflow code, which may start no threads."""
        if self.operations is not None:
            return function(*args)
        import anyio.to_thread

        return await anyio.to_thread.run_sync(functools.partial(function, *args))

    async def prove_fits_off_loop(
        self, messages: Sequence[ModelMessage], *, below: float = FAR_BELOW
    ) -> bool:
        """`prove_fits`, with a long history never seen before (a reloaded chat) counted by bytes in a thread
        first, so that the bound finds its messages memoized instead of counting them on the event loop."""
        await self._count_unread(messages, self.counter.bound_counted, self.counter.bound_messages)
        return self.prove_fits(messages, below=below)

    async def count_newest(self, messages: Sequence[ModelMessage]) -> None:
        """Count a large newest message, or a long history never counted (a reloaded chat), and load the
        tokenizer, in a thread, so later estimates find them memoized instead of tokenizing on the event
        loop."""
        if self.fits_proved(messages):  # bounded by bytes: nothing is counted
            return
        if not self.counter.loaded:
            await self.off_loop(self.counter.load)
        counted = await self._count_unread(messages, self.counter.counted, self.counter.count_messages)
        if not counted and messages and large_content(messages[-1:]):
            await self.off_loop(self.counter.count_message, messages[-1])

    async def _count_unread(
        self,
        messages: Sequence[ModelMessage],
        counted: Callable[[ModelMessage], bool],
        count: Callable[[Sequence[ModelMessage]], object],
    ) -> bool:
        """`count(messages)` in a thread when they are a long stretch never counted (a reloaded chat: its
        first message unknown to `counted`); whether it ran. The bound and the tokenizer memoize apart."""
        if messages and not counted(messages[0]) and _long(messages):
            await self.off_loop(count, messages)
            return True
        return False

    @contextlib.contextmanager
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None
    ) -> Iterator[Span | None]:
        """A child span of the processor's (current inside), or None when spans are not recorded."""
        if self.tracer is None:
            yield None
            return
        if self.open_spans is not None:
            self.open_spans()
        with self.tracer.start_as_current_span(name, attributes=attributes) as span:
            yield span

    def annotate_span(self, attributes: Mapping[str, AttributeValue]) -> None:
        """Add `attributes` to the innermost span a stage opened with `span` (nothing when none records)."""
        if self.tracer is not None:
            from opentelemetry.trace import get_current_span

            get_current_span().set_attributes(attributes)

    def warn(self, code: WarningKind, message: str, **details: Any) -> None:
        logger.warning('%s: %s', code, message)
        self.emit_event(HistoryWarning(run_id=self.run_id, code=code, message=message, details=details))

    def lost(
        self,
        stage: str,
        code: WarningKind,
        reason: str,
        messages: Sequence[ModelMessage],
        *,
        what: str | None = None,
    ) -> None:
        """Say at error level (log and `ContentLost` event) that `messages` left the history with no home
        (`what` left, when it is the content of their parts rather than the messages)."""
        calls, prompts = _contents(messages)
        shown = ', '.join(calls[:20]) + (f' and {len(calls) - 20} more' if len(calls) > 20 else '')
        gone = what if what is not None else f'{len(messages)} message(s) removed'
        message = (
            f'{stage}: {gone} with no copy in the history or the store ({reason}); '
            f'{prompts} user prompt(s), tool calls: {shown or "none"}'
        )
        logger.error('%s: %s', code, message)
        self.emit_event(
            ContentLost(
                run_id=self.run_id,
                code=code,
                message=message,
                stage=stage,
                messages=len(messages),
                tool_calls=tuple(calls),
                user_prompts=prompts,
            )
        )


def _contents(messages: Sequence[ModelMessage]) -> tuple[list[str], int]:
    """The tool calls (`name#id`, each once, in order) and the number of user prompts among `messages`."""
    calls: dict[str, None] = {}
    prompts = 0
    for message in messages:
        for part in message.parts:
            call_id = getattr(part, 'tool_call_id', None)
            name = getattr(part, 'tool_name', None)
            if isinstance(call_id, str) and isinstance(name, str):
                calls[f'{name}#{call_id}'] = None
            elif getattr(part, 'part_kind', '') == 'user-prompt':
                prompts += 1
    return list(calls), prompts


class StageOperations(Protocol):
    """The side effects a stage asks for, which the processor runs as durable operations within a run;
    `model` is resolved again, from the same settings, on the side that runs them."""

    async def request_text(
        self,
        purpose: TextPurpose,
        prompt: str,
        *,
        model: ModelRef,
        instructions: str,
        timeout: Timeout,
        max_tokens: int | None = None,
    ) -> str:
        """A text answer; `max_tokens`: the request's (`answer_max_tokens` of the answer's cap)."""
        ...

    async def request_plan(
        self, prompt: str, *, model: ModelRef, instructions: str, timeout: float
    ) -> ArtifactPlan: ...

    async def convert_file(
        self,
        data: bytes,
        *,
        media_type: str,
        name: str | None,
        model_name: str | None,
        settings: FileSettings,
    ) -> FileResult: ...


class HistoryStage(Protocol):
    """One step of the flow: messages in, messages out. Never mutates its input.

    A stage may also define `unchanged_when_fits(messages, context) -> bool`, asked only when
    `context.fits_proved(messages)`: True when it would return `messages` themselves, so the processor skips
    it for that request (the built-in stages do; without it a stage always runs)."""

    name: str

    async def __call__(
        self, messages: list[ModelMessage], context: HistoryContext, /
    ) -> list[ModelMessage]: ...


def _long(messages: Sequence[ModelMessage]) -> bool:
    """Whether tokenizing all of `messages` belongs off the event loop: many messages, or much content."""
    return len(messages) > LONG_HISTORY or large_content(messages)

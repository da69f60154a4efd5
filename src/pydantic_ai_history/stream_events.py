"""The processor's decisions as pydantic-ai `CapabilityEvent`s in the run's own event stream.

Where pydantic-ai has capability events (2.x), the capability emits these from its request hook, so
`run_stream_events()`, `agent.iter()`, an `event_stream_handler` and the UI adapters (Vercel AI's
`data-pydantic_ai_history.<name>` chunks, AG-UI custom events) show them next to the model's own events.
Each is the stream's view of a `HistoryEvent` that `on_event` also receives; `stream_event_for` is the
mapping. Every kind is `pydantic_ai_history.<name>`, e.g. `pydantic_ai_history.context_usage`.

pydantic-ai's UI adapters do not forward capability events to a frontend (they are the agent's own signals);
an app that wants them there adds `ui_forwarding()` to its agent, which re-emits each as the application
event `pydantic_ai_history` (Vercel AI: a `data-pydantic_ai_history` chunk).

On versions without capability events the classes exist (so imports work everywhere) but are never emitted.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._compat import HAS_CAPABILITY_EVENTS, CapabilityEventBase

if TYPE_CHECKING:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import AgentStreamEvent

from .events import (
    ArtifactProcessed,
    BackgroundDiscardReason,
    BackgroundSummaryDiscarded,
    BackgroundSummaryStarted,
    BackgroundSummaryUsed,
    CompactionReason,
    CompactionResult,
    CompactionStarted,
    ContentLost,
    HistoryEvent,
    HistoryWarning,
    NearLimitNoticeSent,
    RequestProcessed,
    StageFailed,
    WindowApplied,
)

__all__ = (
    'ArtifactProcessedEvent',
    'BackgroundSummaryDiscardedEvent',
    'BackgroundSummaryStartedEvent',
    'BackgroundSummaryUsedEvent',
    'CompactionFinishedEvent',
    'CompactionStartedEvent',
    'ContextUsageEvent',
    'HistoryStreamEvent',
    'HistoryWarningEvent',
    'NearLimitNoticeEvent',
    'WindowAppliedEvent',
    'stream_event_for',
    'ui_forwarding',
)

NAMESPACE = 'pydantic_ai_history'
"""The namespace of every kind this package emits."""

logger = logging.getLogger('pydantic_ai_history')


@dataclass(repr=False, kw_only=True)
class HistoryStreamEvent(CapabilityEventBase, namespace=NAMESPACE, abstract=True):
    """Base of the package's stream events: which run they belong to."""

    run_id: str | None = None
    """The pydantic-ai run the request belongs to."""


_ENVELOPE = frozenset(f.name for f in fields(HistoryStreamEvent)) - {'run_id'}
"""The fields pydantic-ai's capability event puts around every event (its kind, the capability's id, ...)."""


@dataclass(repr=False, kw_only=True)
class ContextUsageEvent(HistoryStreamEvent, name='context_usage'):
    """One per model request: how full the context is after processing (a `RequestProcessed`)."""

    tokens: int
    """Estimated tokens of the history sent, instructions and tools included."""
    context_window: int | None
    """The usable context window; None when unknown."""
    utilization: float | None
    """`tokens / context_window`; None when the window is unknown."""
    messages: int
    """Messages sent."""
    tokens_before: int
    """Estimated tokens of the history before processing."""
    messages_before: int
    """Messages before processing."""
    anchored: bool
    """Whether the estimate is anchored to usage the provider reported."""
    rewritten_messages: int = 0
    """Messages already sent that this request changes: the provider's cached prefix is written again from the
    first of them (0: the request only appends)."""
    rewritten_tokens: int = 0
    """Estimated tokens written to the provider's cache again because of it."""
    rewritten_by: str | None = None
    """The stage that changed the sent prefix, or `read_artifact` when the read-back tool first appears."""


@dataclass(repr=False, kw_only=True)
class CompactionStartedEvent(HistoryStreamEvent, name='compaction_started'):
    """A compaction is under way (a `CompactionStarted`); a `CompactionFinishedEvent` follows."""

    tokens_before: int
    """Estimated tokens before."""
    messages_before: int
    """Messages before."""
    evicted_messages: int
    """Messages the summary will replace."""
    target_tokens: int
    """The size the compaction aims for."""
    reason: CompactionReason
    """`trigger`: the history passed the trigger; `manual`: `compact()` was called; `model`: the model called
    the `compact_context` tool."""


@dataclass(repr=False, kw_only=True)
class CompactionFinishedEvent(HistoryStreamEvent, name='compaction_finished'):
    """A compaction is done (a `CompactionResult`)."""

    tokens_before: int
    """Estimated tokens before."""
    tokens_after: int
    """Estimated tokens after."""
    messages_before: int
    """Messages before."""
    messages_after: int
    """Messages after, the summary included."""
    evicted_messages: int
    """Messages the summary replaced."""
    method: str
    """How the summary was made: `llm`, `cache`, a deterministic fallback (`digest`, `truncate`), the provider
    (`provider`), or `stubs` (old tool outputs stored and stubbed, nothing summarized)."""
    summarizer_calls: int
    """LLM calls made."""
    summary: str
    """The summary that now stands for the evicted messages."""
    error: str | None = None
    """The summarizer failure behind a fallback method; None otherwise."""
    stubbed_parts: int = 0
    """Tool outputs and files stored and replaced by stubs."""
    background: bool = False
    """Whether the summary was made in the background, ahead of the trigger."""


@dataclass(repr=False, kw_only=True)
class BackgroundSummaryStartedEvent(HistoryStreamEvent, name='background_summary_started'):
    """The next event's summary started in the background (a `BackgroundSummaryStarted`)."""

    snapshot_messages: int
    """Messages of the snapshot it summarizes from."""
    snapshot_tokens: int
    """Estimated tokens of the snapshot."""
    trigger_tokens: int
    """The compaction trigger the history is nearing."""
    evicted_messages: int
    """Messages the summary will replace."""


@dataclass(repr=False, kw_only=True)
class BackgroundSummaryUsedEvent(HistoryStreamEvent, name='background_summary_used'):
    """A compaction event used the summary made in the background (a `BackgroundSummaryUsed`)."""

    evicted_messages: int
    """Messages the summary replaced."""
    method: str
    """How it was made: `llm`, `cache`, or a deterministic fallback (`digest`, `truncate`)."""
    ready: bool
    """Whether it was finished when the event needed it."""
    waited_ms: float
    """How long the event's request waited for it, in milliseconds."""
    deferred_requests: int = 0
    """Requests past the trigger that went out uncompacted, within the budget, while it was being made."""
    lead_ms: float
    """How long before the event it started, in milliseconds."""
    summarizer_calls: int
    """Summarizer calls it made."""
    input_tokens: int
    """Input tokens of those calls."""
    output_tokens: int
    """Output tokens of those calls."""


@dataclass(repr=False, kw_only=True)
class BackgroundSummaryDiscardedEvent(HistoryStreamEvent, name='background_summary_discarded'):
    """A summary started in the background was thrown away (a `BackgroundSummaryDiscarded`)."""

    reason: BackgroundDiscardReason
    """Why (see `BackgroundDiscardReason`)."""
    finished: bool
    """Whether it had finished (its calls were paid) or was cancelled."""
    summarizer_calls: int
    """Summarizer calls it completed."""
    input_tokens: int
    """Input tokens of those calls."""
    output_tokens: int
    """Output tokens of those calls."""


@dataclass(repr=False, kw_only=True)
class NearLimitNoticeEvent(HistoryStreamEvent, name='near_limit_notice'):
    """The model was told, for this request only, that the history nears its limit (a
    `NearLimitNoticeSent`)."""

    context_tokens: int
    """Estimated tokens of the history sent."""
    limit_tokens: int
    """The limit it nears: the compaction trigger, or the budget when nothing compacts."""
    notice: str
    """The text the model was sent."""


@dataclass(repr=False, kw_only=True)
class ArtifactProcessedEvent(HistoryStreamEvent, name='artifact_processed'):
    """A large tool return or attached file was handled (an `ArtifactProcessed`)."""

    artifact_id: str
    """The id the original is (or would be) stored under, for `read_artifact`."""
    source: str
    """The tool return or attachment it was in."""
    strategy: str
    """What was done with it (kept, extracted, summarized, stored)."""
    tokens_before: int
    """Estimated tokens of the content as it was."""
    tokens_after: int
    """Estimated tokens of what now stands in the history."""


@dataclass(repr=False, kw_only=True)
class WindowAppliedEvent(HistoryStreamEvent, name='window_applied'):
    """The sliding window dropped older messages to fit the budget (a `WindowApplied`)."""

    tokens_before: int
    """Estimated tokens before."""
    tokens_after: int
    """Estimated tokens after."""
    messages_before: int
    """Messages before."""
    messages_after: int
    """Messages after, the window's note included."""
    budget: int
    """The budget the window fitted to."""


@dataclass(repr=False, kw_only=True)
class HistoryWarningEvent(HistoryStreamEvent, name='warning'):
    """Something the user should know (a `HistoryWarning`, `ContentLost` or `StageFailed`)."""

    code: str
    """A `WarningKind` value, or `stage_failed` when a stage was skipped for this request."""
    message: str
    """The same, for a human."""
    level: Literal['warning', 'error']
    """`error` when content left the history with no copy in the store (`ContentLost`)."""
    details: dict[str, Any] = field(default_factory=dict)
    """The figures behind the message."""


def stream_event_for(event: HistoryEvent) -> HistoryStreamEvent | None:
    """The stream event that shows `event`, or None for a kind the stream does not carry."""
    if isinstance(event, RequestProcessed):
        return _copied(ContextUsageEvent, event, tokens=event.tokens_after, messages=event.messages_after)
    if isinstance(event, CompactionStarted):
        return _copied(CompactionStartedEvent, event)
    if isinstance(event, CompactionResult):
        return _copied(CompactionFinishedEvent, event)
    if isinstance(event, ArtifactProcessed):
        return _copied(ArtifactProcessedEvent, event)
    if isinstance(event, WindowApplied):
        return _copied(WindowAppliedEvent, event)
    streamed = _STREAMED.get(type(event))
    if streamed is not None:
        return _copied(streamed, event)
    return _warning_event(event)


_E = TypeVar('_E', bound='HistoryStreamEvent')

_STREAMED: dict[type[HistoryEvent], type[HistoryStreamEvent]] = {
    BackgroundSummaryStarted: BackgroundSummaryStartedEvent,
    BackgroundSummaryUsed: BackgroundSummaryUsedEvent,
    BackgroundSummaryDiscarded: BackgroundSummaryDiscardedEvent,
    NearLimitNoticeSent: NearLimitNoticeEvent,
}
"""The events whose stream form copies every field of the same name."""


def _copied(cls: type[_E], event: HistoryEvent, **renamed: Any) -> _E:
    """A `cls` whose fields are `event`'s fields of the same names (the stream events mirror the
    `on_event` ones), but for the `renamed` ones."""
    names = (f.name for f in fields(cls) if f.name not in _ENVELOPE and f.name not in renamed)
    return cls(**{name: getattr(event, name) for name in names}, **renamed)


def _warning_event(event: HistoryEvent) -> HistoryStreamEvent | None:
    if isinstance(event, ContentLost):
        lost = {'stage': event.stage, 'messages': event.messages, 'tool_calls': list(event.tool_calls)}
        return HistoryWarningEvent(
            run_id=event.run_id, code=event.code, message=event.message, level='error', details=lost
        )
    if isinstance(event, HistoryWarning):
        return HistoryWarningEvent(
            run_id=event.run_id,
            code=event.code,
            message=event.message,
            level='warning',
            details=dict(event.details),
        )
    if isinstance(event, StageFailed):
        return HistoryWarningEvent(
            run_id=event.run_id,
            code='stage_failed',
            message=f'the {event.stage} stage was skipped for this request: {event.error}',
            level='warning',
            details={'stage': event.stage},
        )
    return None


_PENDING: ContextVar[list[HistoryStreamEvent] | None] = ContextVar('pydantic_ai_history_stream', default=None)
"""The stream events of the request being processed, gathered for the hook to emit once it is done."""


@contextlib.contextmanager
def gathering() -> Iterator[list[HistoryStreamEvent]]:
    """Gather the stream events of what runs inside (see `gather`) into the list it yields."""
    pending: list[HistoryStreamEvent] = []
    if not HAS_CAPABILITY_EVENTS:
        yield pending
        return
    token = _PENDING.set(pending)
    try:
        yield pending
    finally:
        _PENDING.reset(token)


def gather(event: HistoryEvent) -> None:
    """Keep `event`'s stream event for the request being processed, when one is gathering them."""
    pending = _PENDING.get()
    if pending is not None and (stream_event := stream_event_for(event)) is not None:
        pending.append(stream_event)


async def publish(ctx: Any, events: list[HistoryStreamEvent]) -> None:
    """Emit `events` into the run's stream from the capability's hook.

    Events are gathered and emitted once processing is done because the stages report synchronously; the
    stream delivers what a request hook emits when the request begins either way. A run without an event
    stream (or an emit that fails) costs the stream its events, never the run.
    """
    for event in events:
        try:
            await ctx.emit(event)
        except Exception:
            logger.debug("could not emit %s into the run's event stream", event.kind, exc_info=True)
            return


def ui_forwarding() -> AbstractCapability[Any]:
    """A capability for the app's agent that re-emits the package's stream events as the application event
    `pydantic_ai_history`, which pydantic-ai's UI adapters forward to the frontend: Vercel AI as a
    `data-pydantic_ai_history` chunk, AG-UI as a custom event. Its payload is the stream event's fields
    (`kind`, e.g. `pydantic_ai_history.compaction_finished`, then the rest).

    `Agent(..., capabilities=[processor, ui_forwarding()])`. pydantic-ai 2.x only.
    """
    if _UI_EVENT is None:
        raise RuntimeError('this pydantic-ai version has no capability events to forward (2.x has)')
    from pydantic_ai.capabilities import Hooks

    ui_event = _UI_EVENT

    async def forward(ctx: RunContext[Any], event: AgentStreamEvent) -> None:
        if isinstance(event, HistoryStreamEvent):
            await ctx.emit(ui_event(kind=event.kind, payload=_payload(event)))

    return Hooks(event=forward)


def _payload(event: HistoryStreamEvent) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in fields(event) if f.name not in _ENVELOPE}


def _ui_event_class() -> type[Any] | None:
    if not HAS_CAPABILITY_EVENTS:
        return None
    from pydantic_ai.messages import CustomEvent

    @dataclass(repr=False, kw_only=True)
    class HistoryUIEvent(CustomEvent, name=NAMESPACE):
        """A stream event of the package, re-emitted for the frontend by `ui_forwarding()`."""

        kind: str
        """The stream event's kind, e.g. `pydantic_ai_history.context_usage`."""
        payload: dict[str, Any]
        """Its fields."""

        def to_payload(self) -> dict[str, Any]:
            return {'kind': self.kind, **self.payload}

    return HistoryUIEvent


_UI_EVENT = _ui_event_class()

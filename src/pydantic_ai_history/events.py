"""Typed events: every decision the processor takes, sent to `on_event` and to logging. On 2.x each is also
emitted into the run's stream as a `HistoryStreamEvent` of kind `pydantic_ai_history.<name>`
(`stream_event_for`) with the event's own fields; `ui_forwarding()` re-emits them for UI adapters, which do
not forward capability events. Without capability events the stream classes exist but are never emitted.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import operator
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._compat import HAS_CAPABILITY_EVENTS, CapabilityEventBase
from .messages._clock import wall

if TYPE_CHECKING:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import AgentStreamEvent


CompactionReason = Literal['trigger', 'manual', 'model']
"""Why a compaction ran: `trigger`, the history passed `limits.trigger`; `manual`, code called `compact()`;
`model`, the model called the `compact_context` tool (`HistoryProcessor.compaction_tool`)."""

BackgroundDiscardReason = Literal[
    'history_changed',
    'cut_no_longer_fits',
    'inputs_changed',
    'not_needed',
    'failed',
    'run_ended',
    'capacity',
]
"""Why a background summary was thrown away (`BackgroundSummaryDiscarded.reason`):

- `history_changed`: the history no longer extends its snapshot (an old message was edited or dropped).
- `cut_no_longer_fits`: at the trigger, what it leaves verbatim (its cut and all added since) no longer fits
  the target: the event cuts later, with a summary of its own.
- `inputs_changed`: the event needs a summary of other messages or another focus (a cached prefix summary
  stood in, the model asked for a compaction with a focus).
- `not_needed`: the event ended without a summary (a cached prefix summary sufficed, nothing could be
  compacted, the provider compacted natively).
- `failed`: the background work raised (a summarizer failure instead gives the usual deterministic fallback).
- `run_ended`: the run ended before its trigger: the work was cancelled (or its result dropped).
- `capacity`: no longer emitted (kept for code that matches on it): past
  `CompactionSettings.max_background_summaries` runs no summary starts, none is cancelled for another.
"""

BackgroundStartReason = Literal['lead', 'trigger', 'unmeasured']
"""Why a background summary started when it did (`BackgroundSummaryStarted.reason`); `background_start` is
only the earliest point:

- `lead`: at the run's growth (`tokens_per_step`), the summary is needed within the requests a summary is
  expected to take (`requests_left` <= `expected_requests`): waiting one more request would make a request
  wait for it.
- `trigger`: the next request crosses the trigger, where an event with no summary under way summarizes in
  the request path; or this one did, with none under way (it goes out as it is while the summary is made).
- `unmeasured`: the history has no step of the run to measure its growth on (no model response yet).
"""

WarningKind = Literal[
    'context_window_fallback',
    'context_window_learned',
    'empty_history',
    'invalid_input',
    'over_budget',
    'window_reference_omitted',
    'window_dropped',
    'compaction_over_target',
    'compaction_impossible',
    'compaction_deferred',
    'provider_compaction_unsupported',
    'provider_compaction_failed',
    'transcript_not_stored',
    'transcript_store_failed',
    'artifact_planner_failed',
    'artifact_summary_failed',
    'artifact_reducer_failed',
    'artifact_store_failed',
    'artifact_store_missing',
    'user_prompt_reduced',
    'content_cut',
    'attachment_not_sendable',
    'store_unavailable',
    'setting_clamped',
    'summarizer_timeout',
]
"""The `code` of a `HistoryWarning` (and of `ContentLost`, its error-level kind). Per value: when, what to do:

- `context_window_fallback`: the model's window is unknown; `policy.fallback_context_window` was assumed. Set
  `ContextPolicy(context_window=...)`. Served by llama-cpp-python's server, which never says its window, the
  message also names its `--n_ctx` (`details['local_server']`: `'llama-cpp-python'`).
- `context_window_learned`: after a `context_window_fallback`, the model's window became known (a local server
  that was down or silent at first said it on a later request, after its backoff); it replaces the fallback
  from this request on. Nothing to do; set `ContextPolicy(context_window=...)` not to depend on the server.
- `empty_history`: the processor was given no messages and returned them unchanged.
- `invalid_input`: the history already broke an invariant (e.g. an orphan tool return); no stage may add to
  it. Find what built or edited that history.
- `over_budget`: even after the window the history is over budget (the current request alone is too large).
  Raise the budget, shrink the tool returns (artifacts), or split the request.
- `window_reference_omitted`: the window's note could not name the stored transcript within the budget (the
  dropped messages are stored, the model is not told the id). Raise the budget.
- `window_dropped` (`ContentLost`): the window dropped messages whose transcript could not be stored. Fix or
  configure the store.
- `compaction_over_target`: the compacted history is still over the target (the summary or what is kept
  verbatim is large). Lower `summary_max_tokens` or the pins, or raise the target.
- `compaction_impossible`: over the trigger, but every unit after the preserved head is needed; the window
  takes over. Raise the budget or shorten the head/pins.
- `compaction_deferred`: the evicted messages could not be stored and the history still fits: compaction
  waits for the next request. Check the store.
- `provider_compaction_unsupported`: `CompactionSettings(method='provider')` but the serving model does not
  implement `compact_messages` (or pydantic-ai is 1.x, or a durable run's model is not its durable one); the
  LLM summary was used. Use `method='auto'` to fall back silently, or serve a model that compacts.
- `provider_compaction_failed`: the provider's compaction failed, or its item would not fit the target; the
  LLM summary (then the digest) was used. The message has the provider's error.
- `transcript_not_stored` (`ContentLost`): the compactor had to compact although the store failed. Fix it.
- `transcript_store_failed`: storing the transcript of removed messages failed. Check the store.
- `artifact_planner_failed`: the LLM planner failed; the heuristic plan was used. Check the planner model.
- `artifact_summary_failed`: summarizing an artifact failed; it was extracted instead. Check the summarizer.
- `artifact_reducer_failed`: a tool's reducer raised; the unreduced result went on. Fix the reducer.
- `artifact_store_failed`: storing an artifact or attachment failed; it stays inline when the request can
  carry it (else see `content_cut`, `attachment_not_sendable`). Check the store.
- `artifact_store_missing`: an artifact should be stored but no store is configured; it stays inline.
- `user_prompt_reduced`: the user's own message was more than the request has room for (sent whole, it would
  be rejected): it was stored, and the model sees its passages most relevant to its question and how to read
  the rest. Split the message, or raise the budget.
- `content_cut` (`ContentLost`): the newest request was cut to fit and the original could not be stored (the
  store refused or failed). Fix the store or raise its per-artifact limit.
- `attachment_not_sendable` (`ContentLost`): a file no provider accepts as it is (over the file limits) could
  not be stored either; a note replaced it. Fix the store or raise its per-artifact limit.
- `store_unavailable` (error level): the persistent store cannot give its secret (Redis unreachable, a root
  that cannot be created). Nothing is stored and no id or mark is made; requests are processed as with a
  store that refuses every write (content inline, compaction deferred while the history fits), and notes
  written meanwhile are not recognised later. Fix the store.
- `setting_clamped`: a `ContextPolicy` value cannot work with the serving model's window (a `max_tokens` above
  the budget, a `target_tokens` not below the trigger); the message names the field, the value given and the
  value used. Once per model. Change the setting, or leave it unset to follow the model.
- `summarizer_timeout`: a summarizer call ran out of `SummarizerSettings.timeout`; the deterministic fallback
  was used. Raise the timeout, set it to None, or use a faster summarizer model.
"""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class HistoryEvent:
    """Base of all events. `run_id` is None on pydantic-ai versions without run ids.

    Example:
        ```python
        from pydantic_ai_history import CompactionResult, HistoryEvent, create_history_processor


        def on_history_event(event: HistoryEvent) -> None:
            if isinstance(event, CompactionResult):
                print(f'compacted {event.tokens_before:,} -> {event.tokens_after:,} tokens')


        processor = create_history_processor(on_history_event=on_history_event)
        ```
    """

    run_id: str | None = None
    """The pydantic-ai run this request belongs to; None on versions without run ids."""
    at: float = field(default_factory=wall)
    """When the event was made (`time.time()`; inside a durable workflow, the newest model response's
    timestamp)."""

    @property
    def kind(self) -> str:
        return type(self).__name__

    # One comparison, hash and repr for every kind, instead of three generated per class (the event classes'
    # definitions are most of the package's import time); each behaves as the dataclass one would.
    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in fields(self))
        return f'{type(self).__qualname__}({shown})'

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class RequestProcessed(HistoryEvent):
    """One model request went through the processor."""

    messages_before: int
    """Messages given to the processor."""
    messages_after: int
    """Messages it returned."""
    tokens_before: int
    """Estimated tokens of the input (anchored to the last reported usage)."""
    tokens_after: int
    """Estimated tokens of the output, the same way."""
    tokenizer_tokens_after: int
    """Tokens of the output by the token profile alone, without the usage anchor."""
    context_window: int | None
    """The usable context window (`limits.context_window`); None when unknown."""
    duration_ms: float
    """Wall time the processor took, in milliseconds."""
    anchored: bool
    """Whether the estimates were anchored to usage the provider reported."""
    rewritten_messages: int = 0
    """Messages an earlier request already sent that this one changes (or, when a tool of the package appears,
    all of them): the provider's cached prompt prefix is written again from the first of them. 0 on the usual
    request, which only appends."""
    rewritten_tokens: int = 0
    """Estimated tokens written to the provider's cache again because of that (from the first changed message
    up to the messages new with this request): what prompt caching bills at the cache-write price."""
    rewritten_by: str | None = None
    """What changed the sent prefix: the stage's name, or `read_artifact` when the read-back tool first
    appears in the request's tool list (tools come first in the prompt)."""

    @property
    def utilization(self) -> float | None:
        return self.tokens_after / self.context_window if self.context_window else None


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class WindowApplied(HistoryEvent):
    """The sliding window dropped older units to fit its budget."""

    messages_before: int
    """Messages before the window."""
    messages_after: int
    """Messages after it, its note included."""
    tokens_before: int
    """Estimated tokens before."""
    tokens_after: int
    """Estimated tokens after."""
    budget: int
    """The budget the window fitted to (`limits.budget`)."""
    units_dropped: int
    """Units (a request with its answer and tool results) dropped."""
    pinned_kept: int
    """Pinned units kept although older than the cut."""
    reason: str
    """Why the window cut, for a human."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CompactionStarted(HistoryEvent):
    """A compaction is under way: the cut is chosen and the evicted messages are stored; the summary (an LLM
    call, unless a cached one stands) comes next. A `CompactionResult` follows it."""

    messages_before: int
    """Messages before compaction."""
    tokens_before: int
    """Estimated tokens before."""
    evicted_messages: int
    """Messages the summary will replace."""
    target_tokens: int
    """The size the compaction aims for (`limits.target`)."""
    reason: CompactionReason
    """`trigger`: the history passed `limits.trigger`; `manual`: `compact()` was called; `model`: the model
    called the `compact_context` tool."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class CompactionResult(HistoryEvent):
    """What one compaction did (also passed to `on_compaction`)."""

    messages_before: int
    """Messages before compaction."""
    messages_after: int
    """Messages after it, the summary included."""
    tokens_before: int
    """Estimated tokens before."""
    tokens_after: int
    """Estimated tokens after."""
    summary: str
    """The summary text that now stands for the evicted messages."""
    reason: CompactionReason
    """`trigger`: the history passed `limits.trigger`; `manual`: `compact()` was called; `model`: the model
    called the `compact_context` tool."""
    method: Literal['llm', 'cache', 'digest', 'truncate', 'provider', 'stubs']
    """`llm`: the summarizer wrote it; `cache`: an identical evicted span was summarized before;
    `digest`/`truncate`: the deterministic fallbacks after a summarizer failure or during its cool-down;
    `provider`: the serving model compacted natively (`Model.compact_messages`), and `summary` is our note
    beside its compaction item (`CompactionSettings.method`); `stubs`: the cheap tier alone reached the
    target (old tool outputs and files stored and stubbed, nothing summarized: `summary` is empty)."""
    evicted_messages: int
    """Messages the summary replaced."""
    summarizer_calls: int
    """LLM calls made (0 for cache, digest and truncate; the provider's compaction calls for provider)."""
    duration_ms: float
    """Wall time of the compaction, in milliseconds."""
    error: str | None = None
    """The summarizer failure that led to a fallback method; None otherwise."""
    pinned_units: int = 0
    """Pinned units among the evicted ones, carried verbatim in the summary's pinned section."""
    stubbed_parts: int = 0
    """Tool outputs and files the cheap tier stored and replaced by stubs (method `stubs`)."""
    background: bool = False
    """Whether the summary was made in the background, ahead of the trigger (a `BackgroundSummaryUsed` says
    how long this request waited for it); its `summarizer_calls` are counted here."""
    over_target: str | None = None
    """Why `tokens_after` is over the target, when it is: what the compaction had to keep (the preserved head,
    the current run's question, the verbatim tail with the current request, instructions and tools) and what
    each costs; None when the compaction reached its target."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class BackgroundSummaryStarted(HistoryEvent):
    """The summary of the next compaction event started in the background, on a snapshot of the history,
    off the request path (`CompactionSettings.background_start`). A `BackgroundSummaryUsed` or a
    `BackgroundSummaryDiscarded` follows it."""

    snapshot_messages: int
    """Messages of the snapshot it summarizes from."""
    snapshot_tokens: int
    """Estimated tokens of the snapshot."""
    trigger_tokens: int
    """The compaction trigger (`limits.trigger`) the history is nearing."""
    evicted_messages: int
    """Messages the summary will replace (those before its cut)."""
    reason: BackgroundStartReason = 'lead'
    """Why it started at this request rather than earlier or later (see `BackgroundStartReason`)."""
    tokens_per_step: int = 0
    """The run's growth: the most one of its newest steps (a model response and the request after it) added,
    in tokens; 0 when unmeasured."""
    expected_requests: int | None = None
    """The requests of a run a background summary is expected to take until it is ready, learned from the
    summaries made before it; None before any was seen (`background_start` and the trigger decide then)."""
    needed_tokens: int = 0
    """The history size past which a request would wait for it: the budget (requests past the trigger go out
    as they are while it is made), or less where its cut stops fitting; the trigger while
    `expected_requests` is None."""
    requests_left: int = 0
    """Requests until the first one past `needed_tokens`, at `tokens_per_step` (0 when unmeasured)."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class BackgroundSummaryUsed(HistoryEvent):
    """A compaction event used the summary made in the background: the history still extended its snapshot
    and its cut still fitted the target. The `CompactionResult` of the event follows."""

    evicted_messages: int
    """Messages the summary replaced."""
    method: str
    """How it was made: `llm`, `cache` (found in the cache), or a deterministic fallback (`digest`,
    `truncate`) when the summarizer failed, as a blocking compaction would have fallen back."""
    ready: bool
    """Whether it was finished when the event needed it (the request did not wait for it)."""
    waited_ms: float
    """How long the event's request waited for it, in milliseconds (0 when it was ready)."""
    deferred_requests: int = 0
    """Requests past the trigger that went out uncompacted while it was still being made, because they fitted
    the budget (the event came at the first request after it was ready, or that no longer fitted)."""
    lead_ms: float
    """How long before the event it started, in milliseconds."""
    summarizer_calls: int
    """Summarizer calls it made (its cost): also in the event's `CompactionResult`."""
    input_tokens: int
    """Input tokens of those calls, as the summarizer reported them."""
    output_tokens: int
    """Output tokens of those calls."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class BackgroundSummaryDiscarded(HistoryEvent):
    """A summary started in the background was thrown away: `reason` says why. What it cost (its calls
    and tokens, when it finished) was spent for nothing; the event, if any, compacted as without it."""

    reason: BackgroundDiscardReason
    """Why (see `BackgroundDiscardReason`)."""
    finished: bool
    """Whether it had finished (its calls were paid); False: it was cancelled while it ran (a call cancelled
    after it was sent may still be billed by the provider: it is not counted below)."""
    summarizer_calls: int
    """Summarizer calls it completed (0 when cancelled before an answer)."""
    input_tokens: int
    """Input tokens of those calls, as the summarizer reported them."""
    output_tokens: int
    """Output tokens of those calls."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class NearLimitNoticeSent(HistoryEvent):
    """The model was told, for this request only, that the history nears its limit
    (`HistoryProcessor.near_limit_notice`)."""

    context_tokens: int
    """Estimated tokens of the history sent (instructions and tools included)."""
    limit_tokens: int
    """The limit it nears: the compaction trigger, or the budget when nothing compacts."""
    notice: str
    """The text the model was sent."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class PassagesRecalled(HistoryEvent):
    """A new question asked after a compaction was given, in its own request, the stored passages that best
    match it (`CompactionSettings.recall_chars`)."""

    artifacts: tuple[str, ...]
    """The stored artifacts (transcripts, outputs) the passages come from, best first."""
    tokens_added: int
    """Estimated tokens the passages add to the question's request."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ArtifactProcessed(HistoryEvent):
    """A large tool return or attached file was handled by one strategy."""

    artifact_id: str
    """The id the content is (or would be) stored under."""
    source: str
    """Where it came from: the tool return or attachment it was in."""
    strategy: str
    """What was done with it (e.g. kept, extracted, summarized, stored)."""
    tokens_before: int
    """Estimated tokens of the content as it was."""
    tokens_after: int
    """Estimated tokens of what now stands in the history."""
    cache_hit: bool
    """Whether the result came from the cache of an earlier request."""
    rationale: str
    """Why this strategy, for a human."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class HistoryWarning(HistoryEvent):
    """Something the user should know: the current request alone is over budget, input was invalid, ..."""

    code: WarningKind
    """What happened: one `WarningKind` value (see it for what to do)."""
    message: str
    """The same, for a human: figures included."""
    details: dict[str, Any] = field(default_factory=dict)
    """The figures behind the message (tokens, budget, ids), keyed by name; empty when there are none."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class ContentLost(HistoryWarning):
    """Content left the history with no home: in neither the history nor the store (at most a summary or a
    note stands for it). Logged at error level; `code` is `window_dropped`, `transcript_not_stored`,
    `content_cut` or `attachment_not_sendable` (see `WarningKind` for each)."""

    stage: str
    """The stage that removed it."""
    messages: int
    """How many messages were removed."""
    tool_calls: tuple[str, ...] = ()
    """The tool calls (`name#tool_call_id`) whose calls or results were among them."""
    user_prompts: int = 0
    """How many user prompts were among them."""


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class StageFailed(HistoryEvent):
    """A stage raised or produced a worse history; its input was kept and the run went on."""

    stage: str
    """The name of the stage that failed."""
    error: str
    """What went wrong: the exception or the invariant the output broke."""


# ---- their stream form: pydantic-ai capability events ------------------------------------------------------

NAMESPACE = 'pydantic_ai_history'
"""The namespace of every kind this package emits."""

logger = logging.getLogger('pydantic_ai_history')


@dataclass(repr=False, kw_only=True)
class HistoryStreamEvent(CapabilityEventBase, namespace=NAMESPACE, abstract=True):
    """Base of the package's stream events: the stream form of a `HistoryEvent` (see `stream_event_for`).
    Each kind is a class of its own because pydantic-ai registers a kind by its class (so a serialized event
    comes back typed); its fields are those of its source event, documented there."""

    run_id: str | None = None
    """The pydantic-ai run the request belongs to."""

    def __eq__(self, other: object) -> bool:
        # one comparison for every kind, instead of one generated per class (import time)
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self))

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            """The fields `_stream_form` copies from the source event, which type checkers do not see."""


_ENVELOPE = frozenset(f.name for f in fields(HistoryStreamEvent)) - {'run_id'}
"""The fields pydantic-ai's capability event puts around every event (its kind, the capability's id, ...)."""

_UNSTREAMED = frozenset(f.name for f in fields(HistoryEvent)) - {'run_id'}
"""The fields of every `HistoryEvent` its stream form leaves out (`at`: the stream has its own order)."""

_S = TypeVar('_S', bound=HistoryStreamEvent)
_Getter = Callable[[Any], tuple[Any, ...]]

_STREAM_FORMS: dict[type[HistoryEvent], tuple[type[HistoryStreamEvent], tuple[str, ...], _Getter]] = {}
"""Each event class with a stream form of its own: that class, its fields (`run_id` first), and what reads
their values off an event of the class as a tuple (in C: one is made for every model request)."""


def _stream_form(
    source: type[HistoryEvent], *, drop: tuple[str, ...] = (), renamed: Mapping[str, str] | None = None
) -> Callable[[type[_S]], type[_S]]:
    """Make the decorated class the stream form of `source`: a dataclass whose fields are `source`'s (types
    and defaults included), but for those in `drop`, and for `renamed` ones (stream name: source attribute,
    a field or a property of `source`)."""
    renamed = renamed or {}
    by_name = {f.name: f for f in fields(source)}
    unstreamed = _UNSTREAMED | {'run_id', *drop, *renamed.values()}
    carried = {**{name: name for name in by_name if name not in unstreamed}, **renamed}

    def build(cls: type[_S]) -> type[_S]:
        annotations = inspect.get_annotations(cls)
        for name, attribute in carried.items():
            source_field = by_name.get(attribute)
            if source_field is None:  # a property of the source: its return annotation is the type
                annotations[name] = getattr(source, attribute).fget.__annotations__['return']
                continue
            annotations[name] = source_field.type
            if source_field.default is not MISSING:
                setattr(cls, name, source_field.default)
            elif source_field.default_factory is not MISSING:
                setattr(cls, name, field(default_factory=source_field.default_factory))
        cls.__annotations__ = annotations
        names, attributes = ('run_id', *carried), ('run_id', *carried.values())
        _STREAM_FORMS[source] = (cls, names, operator.attrgetter(*attributes))
        return dataclass(repr=False, eq=False, kw_only=True)(cls)

    return build


@_stream_form(
    RequestProcessed,
    drop=('tokenizer_tokens_after', 'duration_ms'),
    renamed={'tokens': 'tokens_after', 'messages': 'messages_after', 'utilization': 'utilization'},
)
class ContextUsageEvent(HistoryStreamEvent, name='context_usage'):
    """One per model request: how full the context is after processing (a `RequestProcessed`: `tokens` and
    `messages` are its `tokens_after` and `messages_after`, `utilization` its `utilization`)."""


@_stream_form(CompactionStarted)
class CompactionStartedEvent(HistoryStreamEvent, name='compaction_started'):
    """A compaction is under way (a `CompactionStarted`); a `CompactionFinishedEvent` follows."""


@_stream_form(CompactionResult, drop=('reason', 'duration_ms', 'pinned_units'))
class CompactionFinishedEvent(HistoryStreamEvent, name='compaction_finished'):
    """A compaction is done (a `CompactionResult`)."""


@_stream_form(BackgroundSummaryStarted)
class BackgroundSummaryStartedEvent(HistoryStreamEvent, name='background_summary_started'):
    """The next event's summary started in the background (a `BackgroundSummaryStarted`)."""


@_stream_form(BackgroundSummaryUsed)
class BackgroundSummaryUsedEvent(HistoryStreamEvent, name='background_summary_used'):
    """A compaction event used the summary made in the background (a `BackgroundSummaryUsed`)."""


@_stream_form(BackgroundSummaryDiscarded)
class BackgroundSummaryDiscardedEvent(HistoryStreamEvent, name='background_summary_discarded'):
    """A summary started in the background was thrown away (a `BackgroundSummaryDiscarded`)."""


@_stream_form(NearLimitNoticeSent)
class NearLimitNoticeEvent(HistoryStreamEvent, name='near_limit_notice'):
    """The model was told, for this request only, that the history nears its limit (a
    `NearLimitNoticeSent`)."""


@_stream_form(PassagesRecalled)
class PassagesRecalledEvent(HistoryStreamEvent, name='passages_recalled'):
    """A new question after a compaction was given the stored passages that match it (a
    `PassagesRecalled`)."""


@_stream_form(ArtifactProcessed, drop=('cache_hit', 'rationale'))
class ArtifactProcessedEvent(HistoryStreamEvent, name='artifact_processed'):
    """A large tool return or attached file was handled (an `ArtifactProcessed`)."""


@_stream_form(WindowApplied, drop=('units_dropped', 'pinned_kept', 'reason'))
class WindowAppliedEvent(HistoryStreamEvent, name='window_applied'):
    """The sliding window dropped older messages to fit the budget (a `WindowApplied`)."""


@dataclass(repr=False, eq=False, kw_only=True)
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
    form = _STREAM_FORMS.get(type(event))  # most events are of a kind with a form of its own
    if form is None:
        if isinstance(event, (HistoryWarning, StageFailed)):
            return _warning_event(event)
        form = next(filter(None, map(_STREAM_FORMS.get, type(event).__mro__)), None)
        if form is None:
            return None
    cls, names, values = form
    return cls(**dict(zip(names, values(event), strict=True)))


def _warning_event(event: HistoryWarning | StageFailed) -> HistoryWarningEvent:
    if isinstance(event, StageFailed):
        code, message = 'stage_failed', f'the {event.stage} stage was skipped for this request: {event.error}'
        details: dict[str, Any] = {'stage': event.stage}
    else:
        code, message, details = event.code, event.message, dict(event.details)
    if isinstance(event, ContentLost):
        details = {'stage': event.stage, 'messages': event.messages, 'tool_calls': list(event.tool_calls)}
    level: Literal['warning', 'error'] = 'error' if isinstance(event, ContentLost) else 'warning'
    return HistoryWarningEvent(run_id=event.run_id, code=code, message=message, level=level, details=details)


_PENDING: ContextVar[list[HistoryStreamEvent] | None] = ContextVar('pydantic_ai_history_stream', default=None)
"""The stream events of the request being processed, gathered for the hook to emit once it is done."""


class _Gathering:
    """The block `gathering()` returns (entered on every request: no generator)."""

    __slots__ = ('_token', 'pending')

    def __init__(self) -> None:
        self.pending: list[HistoryStreamEvent] = []
        self._token: Token[list[HistoryStreamEvent] | None] | None = None

    def __enter__(self) -> list[HistoryStreamEvent]:
        self._token = _PENDING.set(self.pending if HAS_CAPABILITY_EVENTS else None)
        return self.pending

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _PENDING.reset(self._token)
            self._token = None


def gathering() -> contextlib.AbstractContextManager[list[HistoryStreamEvent]]:
    """Gather the stream events of what runs inside (see `gather`) into the list it yields."""
    return _Gathering()


def gather(event: HistoryEvent) -> None:
    """Keep `event`'s stream event for the request being processed, when one is gathering them."""
    pending = _PENDING.get()
    if pending is not None and (stream_event := stream_event_for(event)) is not None:
        pending.append(stream_event)


async def publish(ctx: Any, events: list[HistoryStreamEvent]) -> None:
    """Emit `events` into the run's stream from the capability's hook, once processing is done (the stages
    report synchronously). A run without a stream, or a failing emit, loses the events, never the run."""
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
    (`kind`, then the rest). `Agent(..., capabilities=[processor, ui_forwarding()])`; pydantic-ai 2.x only.
    """
    if not HAS_CAPABILITY_EVENTS:
        raise RuntimeError('this pydantic-ai version has no capability events to forward (2.x has)')
    from pydantic_ai.capabilities import Hooks

    ui_event = _ui_event_class()

    async def forward(ctx: RunContext[Any], event: AgentStreamEvent) -> None:
        if isinstance(event, HistoryStreamEvent):
            await ctx.emit(ui_event(kind=event.kind, payload=_payload(event)))

    return Hooks(event=forward)


def _payload(event: HistoryStreamEvent) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in fields(event) if f.name not in _ENVELOPE}


@functools.cache
def _ui_event_class() -> type[Any]:
    """The application event `ui_forwarding()` emits, defined (and registered) when first forwarded."""
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

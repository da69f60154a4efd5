"""The compactor: above the trigger, replace the older part of the history with one structured summary.

Output: preserved head + one summary request + the newest units that fit the target verbatim (the last unit,
the current request, always). Pinned units are never summarized: their cost is reserved up front so they never
push the cut; those before it ride in the summary's pinned section. With a store, the evicted transcript is
stored before anything is removed (each names the one before it); if the store fails nothing is compacted
while the window allows, past that `ContentLost` names what only the summary stands for. On-demand
capabilities the evicted messages loaded are recorded again after the summary. `method='provider'|'auto'`
puts the serving model's compaction item in place of our summary where it can (layout in `_native`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry.trace import use_span
from pydantic_ai.exceptions import UserError
from pydantic_ai.usage import RunUsage

from ..._compat import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    UserPromptPart,
    compaction_unavailable,
    is_compaction_response,
    request_compaction,
)
from ...budget.model_info import model_name_of
from ...cache import SummaryCache, cache_key
from ...context._context import HistoryContext
from ...context._llm import add_usage, operations_of
from ...context._summarizer_settings import SummarizerSettings
from ...events import (
    BackgroundDiscardReason,
    BackgroundSummaryDiscarded,
    BackgroundSummaryStarted,
    BackgroundSummaryUsed,
    CompactionReason,
    CompactionResult,
    CompactionStarted,
    HistoryEvent,
)
from ...messages._clock import perf
from ...messages._marks import SEAL_TOKENS, marker_kind, part_kinds, readback_tool, separate_own_parts
from ...messages.pinning import PinPredicate, is_pinned
from ...messages.units import Unit, split_units, system_parts
from ...pipeline._settings_checks import coerce_settings
from ...pipeline._stage_capability import StageCapability, history_processor_annotations
from ...tokens import TokenCounter, TokenEstimate
from .._loads import reload_reserve, with_reloads
from .._spill import no_longer_stored, spill_transcript
from .._transcript import (
    NO_LONGER_STORED,
    TranscriptUnit,
    first_user_text,
    read_call,
    render_each_unit,
    render_units,
    transcript_preamble,
)
from ._background import BackgroundJob, BackgroundSummaries
from ._breaker import ScopedBreakers
from ._depth import EventCosts, stubs_suffice
from ._fallback import digest, head_tail_cut
from ._native import (
    NATIVE_NOTE,
    NativeLayout,
    mark_compaction,
    native_layout,
    preserved_head,
)
from ._plan import CutPlan, plan_cut
from ._prefix_index import Origin, PrefixIndex, PrefixRecord
from ._settings import CompactionSettings
from ._stubs import Stub, apply_stubs, plan_stubs, store_stubbed
from ._summarizer import SummarizerError, run_summarizer
from ._summary_message import (
    PINNED_HEADING,
    TRANSCRIPT_REFERENCE_OPENING,
    SummarySections,
    build_summary_message,
    decode_sections,
    encode_sections,
    summary_sections,
    summary_text,
)
from ._trail import TrailEntry, extract_trail, known_text, prune_trail
from ._view import summarizer_view

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from ...context._summarizer_settings import ModelRef

__all__ = ('Compactor',)

logger = logging.getLogger('pydantic_ai_history.compactor')

_SUMMARY_FRAMING_TOKENS = 40 + SEAL_TOKENS
"""Reserved on top of the summary cap: its message, marker (a seal where parts have no metadata), framing."""
_PINNED_UNIT_FRAMING_TOKENS = 2
"""Per pinned unit: the blank line that separates it in the pinned section."""
_TRANSCRIPT_REFERENCE_TOKENS = 100
"""The line that names the stored transcript of the latest evicted messages."""


Method = Literal['llm', 'cache', 'digest', 'truncate', 'provider', 'stubs']


@dataclass(frozen=True)
class _Summary:
    text: str
    method: Method
    calls: int
    key: str
    error: str | None = None
    background: bool = False
    """Made ahead of the event, in the background (`CompactionSettings.background_start`)."""


@dataclass
class _Event:
    """One compaction as it goes: what it started from, and whether `CompactionStarted` is out."""

    messages: list[ModelMessage]
    """The history given (our summary requests split out)."""
    units: list[Unit]
    per_message: Sequence[int]
    tokens: int
    overhead: int
    """What instructions, tools and framing add to the messages' own count."""
    reserved: int
    """The overhead plus the largest record of loads a cut can unload (recorded again after the summary)."""
    reason: CompactionReason
    focus: str | None
    started: float = field(default_factory=perf)
    announced: bool = False
    """Whether `CompactionStarted` is out: a fallback does not repeat it."""


@dataclass(frozen=True)
class _Outcome:
    """What a compaction ends with: the history and what the event says of it."""

    messages: list[ModelMessage]
    tokens: int
    """Its estimate (instructions and tools included)."""
    summary: _Summary
    evicted: int
    pinned: int = 0
    stubbed: int = 0
    replacement: int = 0
    """What the summary message (or the provider's compaction item) costs."""
    lost: Sequence[ModelMessage] = ()
    """The summarized messages, named by `ContentLost` when their transcript could not be stored."""


@dataclass
class _Plan:
    """The history being compacted; after a prefix-cache hit it is the substituted one."""

    messages: list[ModelMessage]
    per_message: list[int]
    units: list[Unit]
    head: int
    previous: int | None
    """Index of our previous summary (always `head`) when the history has one."""
    origin: Origin | None = None
    """Where the body after `head` (after the previous summary, if any) starts in the original history."""


@dataclass(frozen=True)
class _Spilled:
    """The stored transcript of what a compaction evicted ('' for both where there is no store)."""

    transcript: str = ''
    line: str = ''
    """The reference line that tells the model how to read it back."""
    lost: bool = False
    """The store failed: the summary alone stands for the evicted messages."""


@dataclass(frozen=True)
class _Evicted:
    """What a summary at a cut replaces, and everything its summarizer reads (all of it in `key`)."""

    cut_at: int
    """The message index where the verbatim tail starts."""
    messages: list[ModelMessage]
    """The messages the summary replaces (after the head and the previous summary)."""
    pins: list[TranscriptUnit]
    rendered: list[TranscriptUnit] | None
    """Their rendering, where the stored transcript and the summarizer share one."""
    chain: str | None
    """The rolling hash of the evicted messages, for the prefix index."""
    key: str
    model: ModelRef | None
    summarized: Sequence[ModelMessage]
    """The evicted messages but the pinned units."""
    previous: str | None
    focus: str | None
    task: str | None
    transcript: list[TranscriptUnit] | None
    """The summarizer's view, where it is the stored transcript's rendering."""


@dataclass
class _Cut:
    """Where a compaction cuts, and what the pinned section carries on."""

    unit: int
    """The first unit the summary does not take."""
    verbatim: int
    """The first unit of the verbatim tail (at or after `unit`): the cheap tier stubs what is before it."""
    body_first: int
    """The first unit after the head and the previous summary."""
    pins: dict[int, TranscriptUnit]
    earlier: SummarySections
    """The sections of the previous summary (empty when there is none)."""
    previous_transcripts: list[str]
    """Ids of the stored transcripts the previous summary names, chained from this one's first line."""
    gone_transcripts: list[str] = field(default_factory=list)
    """Ids the previous summary names that the store's retention removed: said to be gone, never named."""

    async def check_stored(self, context: HistoryContext) -> None:
        self.gone_transcripts = await no_longer_stored(self.previous_transcripts, context)
        self.previous_transcripts = [t for t in self.previous_transcripts if t not in self.gone_transcripts]

    def evicted_pins(self) -> list[TranscriptUnit]:
        return [self.pins[i] for i in sorted(self.pins) if i < self.unit]

    def summarized(self, plan: _Plan) -> list[ModelMessage]:
        """The messages before the cut but the pinned units."""
        return [
            m
            for i in range(self.body_first, self.unit)
            if i not in self.pins
            for m in plan.messages[plan.units[i].start : plan.units[i].end]
        ]


@dataclass(kw_only=True, eq=False)
class Compactor(StageCapability):
    """Summarize the older part of the history when it passes `max_tokens`, down to `target_tokens`."""

    settings: CompactionSettings = field(default_factory=CompactionSettings, kw_only=False)
    """The compactor's settings (the one positional argument: `Compactor(CompactionSettings(...))`)."""
    id: str | None = 'pydantic_ai_history.compactor'
    """The capability's id when the compactor runs alone (stable: durable engines name its operations after
    it)."""
    name: str = 'compactor'
    """The stage's name in events and logs."""
    _breakers: ScopedBreakers = field(init=False, repr=False)
    _index: PrefixIndex = field(init=False, repr=False)
    _unsupported_warned: set[str] = field(init=False, repr=False, default_factory=set)
    """Why native compaction was unavailable, each said once (`method='provider'`)."""
    _refused: dict[str, str] = field(init=False, repr=False, default_factory=dict)
    """Model name -> why it refused `compact_messages` as unsupported: not asked again."""
    _background: BackgroundSummaries = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.settings = coerce_settings(CompactionSettings, self.settings, 'settings')
        self._breakers = ScopedBreakers(
            max_failures=self.settings.max_failures,
            cooldown=self.settings.cooldown_seconds,
            clock=self.settings.clock,
        )
        self._index = PrefixIndex(ttl=self.settings.cache_ttl)
        self._background = BackgroundSummaries(self.settings.max_background_summaries)
        super().__post_init__()

    async def apply_stage(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        estimate = context.estimate(messages)
        reason = self._reason(estimate.total, context)
        if reason is None:
            await self._anticipate(messages, context, estimate)
            return messages
        if reason == 'trigger' and self._still_making(messages, estimate, context):
            return messages
        focus = context.compaction_request.focus if reason == 'model' and context.compaction_request else None
        held = self._background.pop(context.run_id)
        with context.span(COMPACTION_SPAN, {'pydantic_ai_history.compaction.reason': reason}):
            try:
                return await self._compact(messages, context, estimate, reason=reason, focus=focus, held=held)
            finally:
                if held is not None and not held.used:
                    self._end(held, held.reason, context.emit_event)

    def _still_making(
        self, messages: list[ModelMessage], estimate: TokenEstimate, context: HistoryContext
    ) -> bool:
        """Whether the request goes out as it is, past the trigger but within the budget, rather than wait
        for the run's background summary of this history (the trigger sits below the budget for this)."""
        held = self._background.get(context.run_id)
        if (
            held is None
            or held.ready
            or estimate.total > context.limits.budget
            or not held.extended_by(messages)
        ):
            return False
        held.deferred += 1
        logger.info(
            'compactor: %d tokens, over the trigger (%d) and within the budget (%d): the request goes out '
            'while the background summary is still being made',
            estimate.total,
            context.limits.trigger,
            context.limits.budget,
        )
        return True

    def _reason(self, tokens: int, context: HistoryContext) -> Literal['trigger', 'model'] | None:
        requested = context.compaction_request
        if requested is not None:
            floor = requested.min_tokens if requested.min_tokens is not None else context.limits.target
            if tokens >= floor:
                return 'model'
            logger.info(
                'compactor: the model asked for a compaction, but the history (%d tokens) is under the %d '
                'that make one worth its cost',
                tokens,
                floor,
            )
        return 'trigger' if tokens > context.limits.trigger else None

    async def compact_history(
        self, messages: Sequence[ModelMessage], context: HistoryContext, *, focus: str | None = None
    ) -> list[ModelMessage]:
        """Compact now, whatever the trigger says, to the target; `focus` says what the summary must keep.
        When everything already fits the target, all units but the last are summarized."""
        history = list(messages)
        held = self._background.pop(context.run_id)
        with context.span(COMPACTION_SPAN, {'pydantic_ai_history.compaction.reason': 'manual'}):
            try:
                return await self._compact(
                    history, context, context.estimate(history), reason='manual', focus=focus
                )
            finally:
                if held is not None:
                    self._end(held, 'inputs_changed', context.emit_event)

    def will_name_readback(self, messages: Sequence[ModelMessage], context: HistoryContext) -> bool:
        """Whether processing `messages` compacts, leaving stubs or a summary that name `read_artifact`:
        asked before tools are prepared, so the tool comes with the event that rewrites the prefix anyway."""
        return (
            context.store is not None
            and len(messages) > 2
            and context.estimate(messages).total > context.limits.trigger
        )

    # ---- the steps ------------------------------------------------------------------------------------

    async def _compact(
        self,
        messages: list[ModelMessage],
        context: HistoryContext,
        estimate: TokenEstimate,
        *,
        reason: CompactionReason,
        focus: str | None,
        held: BackgroundJob[_Summary] | None = None,
    ) -> list[ModelMessage]:
        """Cheapest first: a cached prefix summary, the run's background summary (paid for already), stubs
        (at the trigger), the provider's compaction where asked, then our summary."""
        if held is not None and not held.extended_by(messages):
            held.reason, held = 'history_changed', None
        begun = await self._begin(messages, estimate, context, reason, focus)
        if begun is None:
            return messages
        event, plan, conversation = begun
        substituted, reloaded = _keep_loads(event.messages, plan.messages, plan.head + 1, context.counter)
        total = event.overhead + sum(plan.per_message) + reloaded
        reused = self._reuse_prefix(plan, event, context, substituted, total) if reason == 'trigger' else None
        if reused is not None:
            return reused
        # a cached prefix summary that made the history smaller stands even when nothing more is compacted
        unchanged = substituted if total < event.tokens else event.messages
        cut = self._choose_cut(plan, event.reserved, reason, context, event.tokens)
        if cut is None:
            return unchanged
        adopted = self._held_cut(plan, event, cut, held, context) if held is not None else None
        if adopted is not None:
            held_cut, gap = adopted
            return await self._summarize(plan, held_cut, conversation, context, event, unchanged, held, gap)
        if reason != 'manual' and self.settings.stub_tool_results:
            stubbed = await self._stub(plan, cut, context, event)
            if stubbed is not None:
                return stubbed
        native = await self._compact_natively(context, event)
        if native is not None:
            return native
        return await self._summarize(plan, cut, conversation, context, event, unchanged)

    async def _begin(
        self,
        messages: list[ModelMessage],
        estimate: TokenEstimate,
        context: HistoryContext,
        reason: CompactionReason,
        focus: str | None,
    ) -> tuple[_Event, _Plan, str] | None:
        """The event, and the history as compacted: with the longest cached prefix summary it starts with, and
        where the body after the head (and a previous summary) starts in the original (`_Plan.origin`)."""
        # A new run on a saved history has pydantic-ai merge consecutive requests: our summary requests are
        # split out of the user requests they were merged into, found again, and updated, not summarized.
        separated = separate_own_parts(messages)
        if separated is not messages:
            messages, estimate = separated, context.estimate(separated)
        units = split_units(messages)
        if len(units) < 2:
            return None
        overhead = estimate.total - estimate.tokenizer
        reload = context.counter.count_message(record) if (record := reload_reserve(messages)) else 0
        event = _Event(
            messages, units, estimate.per_message, estimate.total, overhead, overhead + reload, reason, focus
        )
        head = preserved_head(messages, units, keep_first_user_message=context.keep_first_user_message)
        previous = head if head < len(messages) and marker_kind(messages[head]) == 'summary' else None
        plan = _Plan(messages, list(event.per_message), units, head, previous)
        cache = context.cache
        if cache is None:
            return event, plan, ''
        conversation = self._index.conversation_key(messages[:head])
        if previous is not None:
            text = summary_text(messages[previous]) or ''
            plan.origin = await self._index.origin(cache, conversation, text)
            return event, plan, conversation
        plan.origin = Origin(head, conversation)
        return event, await self._lookup(cache, conversation, plan, context) or plan, conversation

    def _reuse_prefix(
        self, plan: _Plan, event: _Event, context: HistoryContext, substituted: list[ModelMessage], total: int
    ) -> list[ModelMessage] | None:
        """The history with its cached prefix summary when that alone brings it under the trigger."""
        hit = plan.messages is not event.messages
        if not hit or plan.origin is None or total > context.limits.trigger or total >= event.tokens:
            return None
        evicted = plan.origin.length - plan.head
        _announce(context, event, evicted)
        summary = _Summary(summary_text(plan.messages[plan.head]) or '', 'cache', 0, '')
        return self._finish(context, event, _Outcome(substituted, total, summary, evicted))

    async def _summarize(
        self,
        plan: _Plan,
        cut: _Cut,
        conversation: str,
        context: HistoryContext,
        event: _Event,
        unchanged: list[ModelMessage],
        held: BackgroundJob[_Summary] | None = None,
        gap: Sequence[Stub] = (),
    ) -> list[ModelMessage]:
        """Our summary (and its trail) in place of what is before the cut, once its transcript is stored;
        `gap`: stubs for tool outputs after the cut (those a background summary's history added)."""
        await cut.check_stored(context)
        evicted = self._evicted(plan, cut, context, event.focus)
        if evicted is None:
            return unchanged  # no summary can be smaller than what it would replace
        spilled = await self._spill(plan, cut, evicted.messages, context, event, evicted.rendered)
        if spilled is None:
            return unchanged
        summary = await self._summary_for(evicted, context, held)
        origin = None
        if plan.origin is not None and evicted.chain is not None:
            origin = Origin(plan.origin.length + len(evicted.messages), evicted.chain)
        stubs = list(gap) if gap and await store_stubbed(gap, context) else []
        head, cut_at, counter = plan.head, evicted.cut_at, context.counter
        kept = apply_stubs(plan.messages, stubs)[cut_at:] if stubs else plan.messages[cut_at:]
        trail: tuple[TrailEntry, ...] = ()
        if (trail_budget := self._trail_budget(context)) > 0:
            # the carried trail and what is summarized now that the kept messages do not already hold
            new = extract_trail(evicted.summarized, known=known_text(kept))
            trail = tuple(prune_trail(cut.earlier.trail, new, budget=trail_budget, counter=counter))
        final = _final_sections(summary.text, cut.earlier, spilled, evicted.pins, trail, cut.gone_transcripts)
        # System prompts survive compaction as parts: those of evicted messages (window notes included, which
        # carry the ones the window dropped) and those the previous summary already carried.
        carriers = [plan.messages[plan.previous]] if plan.previous is not None else []
        message = build_summary_message(
            final,
            details=_summary_details(summary.method, evicted.messages, evicted.pins, origin),
            system_parts=system_parts([*carriers, *evicted.messages]),
        )
        result, reloaded = _keep_loads(
            event.messages, [*plan.messages[:head], message, *kept], head + 1, counter
        )
        summary_cost = counter.count_message(message)
        kept_cost = counter.count_messages(kept) if stubs else sum(plan.per_message[cut_at:])
        after = event.overhead + sum(plan.per_message[:head]) + summary_cost + reloaded + kept_cost
        if after >= event.tokens:
            logger.info(
                'compactor: skipped, the summary would not shrink the history (%d -> %d tokens)',
                event.tokens,
                after,
            )
            return unchanged
        if origin is not None and context.cache is not None:
            await self._remember(context.cache, conversation, summary, final, origin)
        outcome = _Outcome(
            result,
            after,
            dataclasses.replace(summary, text=final.text),
            len(evicted.messages),
            pinned=len(evicted.pins),
            stubbed=len(stubs),
            replacement=summary_cost,
            lost=evicted.summarized,
        )
        return self._conclude(context, event, outcome, spilled)

    async def _spill(
        self,
        plan: _Plan,
        cut: _Cut,
        evicted: Sequence[ModelMessage],
        context: HistoryContext,
        event: _Event,
        rendered: Sequence[TranscriptUnit] | None = None,
    ) -> _Spilled | None:
        """Store the evicted transcript before anything is paid for or removed (a summary loses detail,
        the transcript keeps it findable) and announce the event; None: the store failed and the history
        still fits the window, so nothing is compacted."""
        key = await spill_transcript(
            evicted,
            context,
            previous=cut.previous_transcripts,
            source=f'transcript of {len(evicted)} compacted messages',
            rendered=rendered,
            gone=cut.gone_transcripts,
        )
        if key is None:
            # Nothing is paid for yet: keep everything while the window allows it, the next request tries
            # again. Only a history that no longer fits is compacted without its transcript (`ContentLost`).
            budget, total = context.limits.budget, event.overhead + sum(plan.per_message)
            if total <= budget:
                context.warn(
                    'compaction_deferred',
                    'the evicted messages could not be stored, and the history '
                    f'({total:,} tokens) still fits the budget ({budget:,}): nothing was compacted; the next '
                    'request tries again',
                    tokens=total,
                    budget=budget,
                )
                return None
        _announce(context, event, len(evicted))
        if not key:
            return _Spilled(lost=key is None)
        chain = (
            '; its first line names the transcript of earlier messages' if cut.previous_transcripts else ''
        )
        line = (
            f'{TRANSCRIPT_REFERENCE_OPENING}{len(evicted)} messages summarized last is stored: '
            f'{read_call(key)} finds any detail in it{chain}; {readback_tool()}(query=...) without an id '
            'searches everything stored from this conversation.'
        )
        return _Spilled(key, line)

    def _evicted(self, plan: _Plan, cut: _Cut, context: HistoryContext, focus: str | None) -> _Evicted | None:
        """None when no summary can be smaller than what it would replace."""
        head = plan.head
        cut_at = plan.units[cut.unit].start
        if sum(plan.per_message[head:cut_at]) <= _SUMMARY_FRAMING_TOKENS:
            return None
        body_start = head + (plan.previous is not None)
        evicted = plan.messages[body_start:cut_at]
        summarized = cut.summarized(plan)
        rendered, transcript = self._render_evicted(plan, cut, body_start, context.counter)
        span, chain = self._index.evicted_keys(
            None if plan.origin is None else plan.origin.chain, evicted, summarized
        )
        model = context.summarizer_model
        previous = cut.earlier.summary if plan.previous is not None else None
        task = first_user_text(plan.messages[:head])
        # Everything the summarizer reads is in the key (the original task too); the processor's cache view
        # adds the scope, so two tenants with the same evicted traffic never share a summary.
        fingerprint = self._settings_fingerprint(model, context.summarizer)
        key = cache_key('compactor-summary', span, fingerprint, previous or '', focus or '', task or '')
        pins = cut.evicted_pins()
        return _Evicted(
            cut_at, evicted, pins, rendered, chain, key, model, summarized, previous, focus, task, transcript
        )

    def _breakers_of(self, context: HistoryContext) -> ScopedBreakers:
        """In durable workflow code a fresh set that lets every call through: a replay must decide from the
        journal alone (remembered failures would open a breaker early); the engine's retries stand in."""
        if context.operations is None:
            return self._breakers
        settings = self.settings
        return ScopedBreakers(max_failures=settings.max_failures, cooldown=settings.cooldown_seconds)

    # ---- provider-native compaction (`CompactionSettings.method`) ----------------------------------------

    def _native_model(self, context: HistoryContext) -> object | None:
        model: object = context.serving_model
        if model is None:
            model = context.run_context.model if context.run_context is not None else context.model
        journaled = context.operations is not None
        # workflow code asks every time: a refusal remembered from a later request would change a replay
        refused = None if journaled else self._refused.get(model_name_of(model) or '')
        why_not = compaction_unavailable(model, journaled=journaled) or refused
        if why_not is None:
            return model
        self._unsupported(context, why_not)
        return None

    def _unsupported(self, context: HistoryContext, why_not: str) -> None:
        if self.settings.method == 'provider' and why_not not in self._unsupported_warned:
            self._unsupported_warned.add(why_not)
            context.warn(
                'provider_compaction_unsupported',
                f"CompactionSettings(method='provider'), but {why_not}: the LLM summary is used instead",
                reason=why_not,
            )

    async def _compact_natively(self, context: HistoryContext, event: _Event) -> list[ModelMessage] | None:
        """The serving model's own compaction around our cut, pins and spill; None falls back to our summary.
        The item is planned at the summary's cap; a larger one that ends over the target is not used."""
        model = self._native_model(context) if self.settings.method != 'llm' else None
        if model is None or not self._breakers_of(context).allows('provider', context.scope):
            return None
        messages = event.messages
        layout = native_layout(messages, event.units, keep_first_user_message=context.keep_first_user_message)
        if layout is None:
            return None
        plan = _Plan(messages, list(event.per_message), event.units, layout.body_start, None)
        # our cut rules around the layout (None is not warned: the LLM path plans it and says why)
        body_first = next(
            (i for i, u in enumerate(plan.units) if u.start >= layout.body_start), len(plan.units)
        )
        if body_first >= len(plan.units) - 1:
            return None
        fixed_cost = event.reserved + context.counter.count_messages(layout.kept)
        cut = self._cut(plan, body_first, fixed_cost, layout.earlier, context, event.reason)
        if cut is None:
            return None
        await cut.check_stored(context)
        evicted = messages[layout.body_start : plan.units[cut.unit].start]
        spilled = await self._spill(plan, cut, evicted, context, event)
        if spilled is None:
            return messages
        summarized = cut.summarized(plan)
        response = await self._ask_provider(model, [*layout.sent, *summarized], context, event.focus)
        if response is None:
            return None
        outcome = _native_outcome(plan, cut, layout, response, spilled, event, context.counter)
        if not self._native_fits(context, outcome, event.tokens):
            return None
        return self._conclude(context, event, outcome, spilled)

    def _native_fits(self, context: HistoryContext, outcome: _Outcome, before: int) -> bool:
        """Smaller than before, and at or under the target unless what keeps it over no summary can shrink."""
        target, after, item = context.limits.target, outcome.tokens, outcome.replacement
        if after < before and (after <= target or item <= self.settings.summary_max_tokens):
            return True
        context.warn(
            'provider_compaction_failed',
            f'the compacted history would be {after:,} tokens (target {target:,}, before {before:,}) with a '
            f'compaction item of {item:,} (planned: {self.settings.summary_max_tokens:,}); the LLM summary '
            'is used instead',
            tokens=after,
            target=target,
            item_tokens=item,
        )
        return False

    def _plan_cut(
        self,
        plan: _Plan,
        body_first: int,
        fixed_cost: int,
        pins: dict[int, TranscriptUnit],
        earlier: SummarySections,
        context: HistoryContext,
        reason: CompactionReason,
        shrink: int = 0,
        savings: dict[int, int] | None = None,
    ) -> CutPlan:
        """`plan_cut` with this compactor's reserves. Except on `manual`, the verbatim tail is at most
        `keep_recent_tokens` less `shrink`: the event goes deep. `savings`: tokens stubs take off units."""
        counter, saved, keep_recent = context.counter, savings or {}, self.settings.keep_recent_tokens
        return plan_cut(
            unit_costs=[
                sum(plan.per_message[u.start : u.end]) - saved.get(i, 0)
                for i, u in enumerate(plan.units[body_first:], body_first)
            ],
            body_first=body_first,
            target=context.limits.target,
            fixed_cost=fixed_cost,
            summary_reserve=self.settings.summary_max_tokens
            + _SUMMARY_FRAMING_TOKENS
            + self._trail_budget(context),
            pinned={i: rendered.tokens + _PINNED_UNIT_FRAMING_TOKENS for i, rendered in pins.items()},
            # room for the stored-transcript reference: this compaction's, or the earlier one carried on
            pinned_carried=counter.count_text(earlier.pinned)
            + (_TRANSCRIPT_REFERENCE_TOKENS if context.store is not None or earlier.reference else 0),
            pinned_section_cost=counter.count_text(PINNED_HEADING)
            + _PINNED_UNIT_FRAMING_TOKENS
            + SEAL_TOKENS,
            manual=reason != 'trigger',
            # the verbatim tail at the trigger: `keep_recent_tokens`, else an eighth of the target
            tail_cap=None
            if reason == 'manual'
            else max((keep_recent if keep_recent is not None else context.limits.target // 8) - shrink, 0),
            keep_from=_latest_prompt_unit(plan, body_first),
        )

    def _trail_budget(self, context: HistoryContext) -> int:
        return int(context.limits.target * self.settings.trail_share)

    async def _stub(
        self,
        plan: _Plan,
        cut: _Cut,
        context: HistoryContext,
        event: _Event,
    ) -> list[ModelMessage] | None:
        """The cheap tier: tool outputs and files before the verbatim tail stored and stubbed, when that alone
        reaches the target; None when the summary is needed."""
        stubs = self._planned_stubs(plan, cut, context, event)
        if stubs is None:
            return None
        if not await store_stubbed(stubs, context):
            return None  # the summary stores the whole transcript instead, or waits (`_spill`)
        counter = context.counter
        result, _ = _keep_loads(event.messages, apply_stubs(plan.messages, stubs), plan.head + 1, counter)
        after = event.overhead + counter.count_messages(result)
        if after > context.limits.target:
            return None  # the planned costs were off: the summary decides (the stored originals do no harm)
        _announce(context, event, 0)
        return self._finish(
            context, event, _Outcome(result, after, _Summary('', 'stubs', 0, ''), 0, stubbed=len(stubs))
        )

    def _planned_stubs(
        self, plan: _Plan, cut: _Cut, context: HistoryContext, event: _Event, growth: int = 0
    ) -> list[Stub] | None:
        """Stubs when they alone end the event (within the target, cheaper by `_depth`); else None. `growth`:
        tokens the history adds before the event (a background summary plans ahead of it)."""
        if context.store is None:
            return None
        stubs = self._stubs_from(cut.body_first, plan, cut, context)
        total = event.overhead + sum(plan.per_message) + growth
        stubbed = total - sum(s.tokens_before - s.tokens_after for s in stubs)
        if not stubs or stubbed > context.limits.target:
            return None
        body_start = plan.units[cut.body_first].start
        replaced = sum(plan.per_message[body_start : plan.units[cut.verbatim].start])
        summary_tokens = self.settings.summary_max_tokens // 2
        costs = EventCosts(
            stubbed=stubbed,
            summarized=total - replaced + summary_tokens + self._trail_budget(context),
            trigger=context.limits.trigger,
            growth=sum(plan.per_message[body_start:]) // max(len(plan.units) - cut.body_first, 1),
            view_tokens=min(replaced, self.settings.summarizer_view_tokens or replaced),
            summary_tokens=summary_tokens,
        )
        return stubs if stubs_suffice(costs, cached_input_ratio=self.settings.cached_input_ratio) else None

    # ---- background summaries (`CompactionSettings.background_start`) ------------------------------------

    async def _anticipate(
        self, messages: list[ModelMessage], context: HistoryContext, estimate: TokenEstimate
    ) -> None:
        start = self.settings.background_start
        run = context.run_id
        if start is None or run is None or not context.background_allowed or self.settings.method != 'llm':
            return
        held = self._background.get(run)
        if held is not None:
            if held.extended_by(messages):
                return
            self._background.pop(run)
            self._end(held, 'history_changed', context.emit_event)
        if estimate.total <= context.limits.trigger * start:
            return
        job = await self._background_job(messages, context, estimate)
        if job is None:
            return
        for pushed in self._background.add(job):
            self._end(pushed, 'capacity', context.emit_event)
        context.emit_event(
            BackgroundSummaryStarted(
                run_id=run,
                snapshot_messages=len(messages),
                snapshot_tokens=estimate.total,
                trigger_tokens=context.limits.trigger,
                evicted_messages=job.evicted,
            )
        )
        logger.info(
            'compactor: the summary of %d messages started in the background at %d of %d tokens',
            job.evicted,
            estimate.total,
            context.limits.trigger,
        )

    async def _background_job(
        self, snapshot: list[ModelMessage], context: HistoryContext, estimate: TokenEstimate
    ) -> BackgroundJob[_Summary] | None:
        """The next event planned on `snapshot` as the trigger will plan it, its summary started in a task;
        None when that event will not summarize."""
        assert context.run_id is not None
        begun = await self._begin(snapshot, estimate, context, 'trigger', None)
        if begun is None:
            return None
        event, plan, _ = begun
        if plan.messages is not event.messages:
            return None
        # What the history adds until the trigger joins the verbatim tail: the cut leaves it that room.
        growth = max(context.limits.trigger - event.tokens, 0)
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
        if evicted is None:
            return None
        usage = RunUsage()
        # its own usage, added to the run's when done; the requests that use or discard it emit its events
        own = dataclasses.replace(context, usage=usage, emit_event=_ignore, open_spans=None)
        span = _background_span(context, len(evicted.messages), event.tokens)
        return BackgroundJob[_Summary].start(
            self._background_summary(evicted, own, context.usage, span),
            run_id=context.run_id,
            snapshot=list(snapshot),
            cut_at=evicted.cut_at,
            key=evicted.key,
            evicted=len(evicted.messages),
            usage=usage,
            span=span,
        )

    async def _background_summary(
        self, request: _Evicted, context: HistoryContext, run_usage: object, span: Span | None
    ) -> _Summary:
        try:
            with use_span(span, end_on_exit=False) if span is not None else contextlib.nullcontext():
                return await self._summary(request, context)
        finally:
            add_usage(run_usage, context.usage)

    def _held_cut(
        self, plan: _Plan, event: _Event, cut: _Cut, held: BackgroundJob[_Summary], context: HistoryContext
    ) -> tuple[_Cut, list[Stub]] | None:
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
        stubbing = self.settings.stub_tool_results and context.store is not None
        gap = self._stubs_from(unit, plan, cut, context) if stubbing else []
        fits = self._plan_cut(
            plan,
            cut.body_first,
            event.reserved + sum(plan.per_message[: plan.head]),
            cut.pins,
            cut.earlier,
            context,
            'manual',
            savings=_unit_savings(plan, gap),
        )
        if unit < (fits.verbatim if fits.verbatim is not None else cut.body_first):
            held.reason = 'cut_no_longer_fits'
            return None
        return dataclasses.replace(cut, unit=unit, verbatim=unit), gap

    def _stubs_from(self, first: int, plan: _Plan, cut: _Cut, context: HistoryContext) -> list[Stub]:
        units = plan.units
        spans = [(units[i].start, units[i].end) for i in range(first, cut.verbatim) if i not in cut.pins]
        return plan_stubs(
            plan.messages,
            spans,
            counter=context.counter,
            make_id=context.artifact_id,
            min_tokens=self.settings.stub_min_tokens,
            head_chars=self.settings.stub_head_chars,
        )

    async def _summary_for(
        self, request: _Evicted, context: HistoryContext, held: BackgroundJob[_Summary] | None
    ) -> _Summary:
        """The background summary when it has this event's key (waited for), else a new one."""
        if held is None or held.key != request.key:
            if held is not None:
                held.reason = 'inputs_changed'
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
        finished = job.ready
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

    def end_run(self, run_id: str, emit: Callable[[HistoryEvent], None]) -> None:
        """Cancel the run's background summary, never waiting (called from the processor's run hook)."""
        job = self._background.pop(run_id)
        if job is not None:
            self._end(job, 'run_ended', emit)

    async def _ask_provider(
        self, model: object, messages: list[ModelMessage], context: HistoryContext, focus: str | None
    ) -> ModelResponse | None:
        run = context.run_context
        try:
            response = await request_compaction(
                model,
                messages,
                model_settings=run.model_settings if run is not None else None,
                tool_definitions=context.tool_definitions,
                instructions=focus,
            )
        except (NotImplementedError, UserError) as exc:
            # the model (or its configuration) cannot: not asked again, as without `compact_messages`
            why_not = f'{model_name_of(model)} refused compaction ({type(exc).__name__}: {exc})'
            if context.operations is None:
                self._refused[model_name_of(model) or ''] = why_not
            self._unsupported(context, why_not)
            return None
        except Exception as exc:  # the provider failed: the LLM summary stands in
            self._breakers_of(context).failure('provider', context.scope)
            context.warn(
                'provider_compaction_failed',
                f'the provider compaction failed ({type(exc).__name__}: {exc}); the LLM summary is used',
                error=f'{type(exc).__name__}: {exc}',
            )
            return None
        if not is_compaction_response(response):
            context.warn(
                'provider_compaction_failed',
                'the provider answered the compaction request without a compaction part; the LLM summary is '
                'used instead',
            )
            return None
        self._breakers_of(context).success('provider', context.scope)
        add_usage(context.usage, response.usage, requests=1)
        return response

    def _choose_cut(
        self,
        plan: _Plan,
        reserved: int,
        reason: CompactionReason,
        context: HistoryContext,
        tokens: int,
        *,
        shrink: int = 0,
        quiet: bool = False,
    ) -> _Cut | None:
        """None when nothing can be compacted (warned at the trigger unless `quiet`). `shrink`: room a
        background summary leaves for what the history adds until its trigger."""
        head = plan.head
        body_first = next(
            i for i, u in enumerate(plan.units) if u.start >= head + (plan.previous is not None)
        )
        found = summary_sections(plan.messages[plan.previous]) if plan.previous is not None else None
        fixed_cost = reserved + sum(plan.per_message[:head])
        cut = self._cut(plan, body_first, fixed_cost, found or SummarySections(''), context, reason, shrink)
        if cut is None and not quiet and reason == 'trigger':
            context.warn(
                'compaction_impossible',
                'the history is over the compaction trigger but every unit after the preserved head is '
                'needed to reach the target; nothing was compacted',
                tokens=tokens,
                trigger=context.limits.trigger,
            )
        return cut

    def _cut(
        self,
        plan: _Plan,
        body_first: int,
        fixed_cost: int,
        earlier: SummarySections,
        context: HistoryContext,
        reason: CompactionReason,
        shrink: int = 0,
    ) -> _Cut | None:
        """With a store, the previous transcript reference gives way to this one's (whose first line names
        the previous one)."""
        pins = _pinned_units(plan, body_first, context.counter, context.pin)
        cut = self._plan_cut(plan, body_first, fixed_cost, pins, earlier, context, reason, shrink)
        if cut.unit is None:
            return None
        return _Cut(
            unit=cut.unit,
            verbatim=cut.verbatim if cut.verbatim is not None else cut.unit,
            body_first=body_first,
            pins=pins,
            earlier=earlier,
            previous_transcripts=[earlier.transcript]
            if earlier.transcript and context.store is not None
            else [],
        )

    async def _remember(
        self,
        cache: SummaryCache,
        conversation: str,
        summary: _Summary,
        final: SummarySections,
        origin: Origin,
    ) -> None:
        """So a reload of the uncompacted history reuses the summary."""
        if summary.key:
            # The prefix cache reuses every section (as structure, not text), so a reload keeps the pins.
            # A fallback (no key) is never recorded: a reload after the summarizer recovers gets a real one.
            final_key = cache_key('compactor-sections', summary.key, final.summary, final.pinned)
            await cache.set(final_key, encode_sections(final), ttl=self.settings.cache_ttl)
            record = PrefixRecord(origin.length, origin.chain, final_key)
            await self._index.add(cache, conversation, record)
        # so the next compaction (which updates this summary) can record its own prefix
        await self._index.set_origin(cache, conversation, final.text, origin)

    async def _lookup(
        self, cache: SummaryCache, conversation: str, plan: _Plan, context: HistoryContext
    ) -> _Plan | None:
        records = await self._index.records(cache, conversation)
        head, boundaries = plan.head, {u.start for u in plan.units}
        # recorded prefixes that end where a unit starts (so never take the last unit), longest first
        candidates = sorted((n for n in records if head < n and n in boundaries), reverse=True)
        if not candidates:
            return None
        chains = self._index.chains(conversation, plan.messages[head : candidates[0]])
        for length in candidates:
            record = records[length]
            if chains[length - head - 1] != record.chain:
                continue
            text = await cache.get(record.summary_key)
            if not text:
                continue
            message = build_summary_message(
                decode_sections(text),
                details={'method': 'cache', 'covers_messages': length},
                system_parts=system_parts(plan.messages[head:length]),
            )
            messages = [*plan.messages[:head], message, *plan.messages[length:]]
            per_message = [
                *plan.per_message[:head],
                context.counter.count_message(message),
                *plan.per_message[length:],
            ]
            logger.info('compactor: reused the summary of the first %d messages (prefix cache)', length)
            return _Plan(
                messages, per_message, split_units(messages), head, head, Origin(length, record.chain)
            )
        return None

    def _render_evicted(
        self, plan: _Plan, cut: _Cut, body_start: int, counter: TokenCounter
    ) -> tuple[list[TranscriptUnit] | None, list[TranscriptUnit] | None]:
        """Rendered once for the transcript and the summarizer where both read them whole; else Nones."""
        units = plan.units[cut.body_first : cut.unit]
        if self.settings.tool_result_max_tokens is not None or not units or units[0].start != body_start:
            return None, None
        each = render_each_unit(
            plan.messages,
            units,
            counter,
            tool_result_max_tokens=None,
            # the stored transcript is this text
            preamble=transcript_preamble(cut.previous_transcripts, cut.gone_transcripts),
        )
        return (
            [u for u in each if u is not None],
            [u for i, u in enumerate(each, cut.body_first) if u is not None and i not in cut.pins],
        )

    async def _summary(self, request: _Evicted, context: HistoryContext) -> _Summary:
        settings, counter, cache, scope = self.settings, context.counter, context.cache, context.scope
        if cache is not None and (cached := await cache.get(request.key)):
            return _Summary(cached, 'cache', 0, request.key)
        transcript = request.transcript
        if transcript is None:
            transcript = await context.off_loop(
                functools.partial(
                    summarizer_view,
                    request.summarized,
                    counter,
                    record_tokens=settings.tool_result_max_tokens,
                    view_tokens=settings.summarizer_view_tokens,
                    query=' '.join(p for p in (request.task, request.focus) if p),
                )
            )
        breakers = self._breakers_of(context)
        if not breakers.allows('summarizer', scope):
            error = (
                f'summarizer cooling down after {breakers.failures("summarizer", scope)} consecutive failures'
            )
            return self._fallback(request, transcript, counter, 0, error)
        try:
            outcome = await run_summarizer(
                model=request.model,
                settings=settings,
                summarizer=context.summarizer,
                counter=counter,
                transcript=transcript,
                original_task=request.task,
                previous_summary=request.previous,
                focus=request.focus,
                operations=operations_of(context),
            )
        except SummarizerError as exc:
            breakers.failure('summarizer', scope)
            if exc.timed_out:
                context.warn('summarizer_timeout', f'compaction summary: {exc}; the fallback was used')
            else:
                logger.warning('compactor: summarizer failed (%s); using the fallback', exc)
            return self._fallback(request, transcript, counter, exc.calls, str(exc))
        breakers.success('summarizer', scope)
        if cache is not None:
            await cache.set(request.key, outcome.text, ttl=settings.cache_ttl)
        return _Summary(outcome.text, 'llm', outcome.calls, request.key)

    def _fallback(
        self,
        request: _Evicted,
        transcript: list[TranscriptUnit],
        counter: TokenCounter,
        calls: int,
        error: str,
    ) -> _Summary:
        """Not cached (no key): a fallback stands only until the summarizer answers again."""
        cap, previous = self.settings.summary_max_tokens, request.previous
        if self.settings.fallback == 'digest':
            try:
                return _Summary(
                    digest(request.summarized, previous, counter, cap), 'digest', calls, '', error
                )
            except Exception:
                logger.exception('compactor: the digest failed; cutting the transcript instead')
        return _Summary(head_tail_cut(transcript, previous, counter, cap), 'truncate', calls, '', error)

    def _settings_fingerprint(self, model: object, summarizer: SummarizerSettings) -> str:
        s = self.settings
        return repr(
            (
                model_name_of(model),
                summarizer.model_settings,
                summarizer.instructions,
                s.summary_max_tokens,
                s.tool_result_max_tokens,
                s.summarizer_view_tokens,
            )
        )

    def _conclude(
        self, context: HistoryContext, event: _Event, outcome: _Outcome, spilled: _Spilled
    ) -> list[ModelMessage]:
        if spilled.lost:
            context.lost(
                'compactor',
                'transcript_not_stored',
                'the store failed and the history does not fit the context window without compaction; '
                'only the summary stands for them',
                outcome.lost,
            )
        target, after, replacement = context.limits.target, outcome.tokens, outcome.replacement
        if after > target:
            what = 'compaction item' if outcome.summary.method == 'provider' else 'summary'
            context.warn(
                'compaction_over_target',
                f'the compacted history is {after:,} tokens, over the target of {target:,}: the {what} takes '
                f'{replacement:,}, the rest (preserved head, pinned units, the last unit with the current '
                f'request, instructions and tools) {after - replacement:,}',
                tokens=after,
                target=target,
            )
        return self._finish(context, event, outcome)

    def _finish(self, context: HistoryContext, compaction: _Event, outcome: _Outcome) -> list[ModelMessage]:
        summary = outcome.summary
        event = CompactionResult(
            run_id=context.run_id,
            messages_before=len(compaction.messages),
            messages_after=len(outcome.messages),
            tokens_before=compaction.tokens,
            tokens_after=outcome.tokens,
            summary=summary.text,
            reason=compaction.reason,
            method=summary.method,
            evicted_messages=outcome.evicted,
            summarizer_calls=summary.calls,
            duration_ms=(perf() - compaction.started) * 1000,
            error=summary.error,
            pinned_units=outcome.pinned,
            stubbed_parts=outcome.stubbed,
            background=summary.background,
        )
        context.emit_event(event)
        context.annotate_span(
            {
                'gen_ai.conversation.compacted': True,
                'pydantic_ai_history.compaction.method': event.method,
                'pydantic_ai_history.tokens_before': event.tokens_before,
                'pydantic_ai_history.tokens_after': event.tokens_after,
                'pydantic_ai_history.messages_before': event.messages_before,
                'pydantic_ai_history.messages_after': event.messages_after,
                'pydantic_ai_history.compaction.evicted_messages': event.evicted_messages,
                'pydantic_ai_history.compaction.summarizer_calls': event.summarizer_calls,
            }
        )
        if self.settings.on_compaction is not None:
            try:
                self.settings.on_compaction(event)
            except Exception:
                logger.exception('on_compaction callback raised; ignored')
        logger.info(
            'compactor (%s, %s): %d -> %d messages, %d -> %d tokens, %d summarizer call(s), '
            '%d pinned unit(s) kept verbatim%s',
            event.reason,
            event.method,
            event.messages_before,
            event.messages_after,
            event.tokens_before,
            event.tokens_after,
            event.summarizer_calls,
            event.pinned_units,
            f', error: {event.error}' if event.error else '',
        )
        return outcome.messages


COMPACTION_SPAN = 'compact_messages'
"""The span around a compaction, named like pydantic-ai-harness's so trace views group them; the summarizer's
chat spans are its children."""
BACKGROUND_SPAN = 'background_compaction'
"""The span of a summary made ahead of its event, from its start until it is used or thrown away (its
attributes say which, and why); the summarizer's chat spans are its children. Named like harness's."""


def _background_span(context: HistoryContext, evicted: int, tokens: int) -> Span | None:
    if context.tracer is None:
        return None
    return context.tracer.start_span(
        BACKGROUND_SPAN,
        attributes={
            'pydantic_ai_history.compaction.evicted_messages': evicted,
            'pydantic_ai_history.tokens_before': tokens,
        },
    )


def _ignore(event: HistoryEvent) -> None:
    """The events of a background job's own context: the compactor says what became of the job."""


def _pinned_units(
    plan: _Plan, body_first: int, counter: TokenCounter, pin: PinPredicate | None
) -> dict[int, TranscriptUnit]:
    """The pinned units after the head but the last (which stays verbatim anyway), rendered."""
    pins: dict[int, TranscriptUnit] = {}
    for index in range(body_first, len(plan.units) - 1):
        unit = plan.units[index]
        messages = plan.messages[unit.start : unit.end]
        if any(marker_kind(m) is not None for m in messages) or not is_pinned(messages, pin):
            continue
        rendered = render_units(
            messages,
            [Unit(0, len(messages), unit.starts_with_request)],
            counter,
            tool_result_max_tokens=None,
            system_prompts=False,
        )
        pins[index] = rendered[0] if rendered else TranscriptUnit('', 0, len(messages))
    return pins


def _latest_prompt_unit(plan: _Plan, body_first: int) -> int | None:
    """The latest user prompt: the instruction the agent is working on, left verbatim when it can be."""
    for index in range(len(plan.units) - 1, body_first - 1, -1):
        unit = plan.units[index]
        for message in plan.messages[unit.start : unit.end]:
            if isinstance(message, ModelRequest) and marker_kind(message) is None:
                parts = zip(message.parts, part_kinds(message), strict=True)
                if any(isinstance(p, UserPromptPart) and k is None for p, k in parts):
                    return index
    return None


def _announce(context: HistoryContext, event: _Event, evicted: int) -> None:
    if event.announced:
        return
    event.announced = True
    context.emit_event(
        CompactionStarted(
            run_id=context.run_id,
            messages_before=len(event.messages),
            tokens_before=event.tokens,
            evicted_messages=evicted,
            target_tokens=context.limits.target,
            reason=event.reason,
        )
    )


def _unit_savings(plan: _Plan, stubs: Sequence[Stub]) -> dict[int, int]:
    unit_of = {m: i for i, u in enumerate(plan.units) for m in range(u.start, u.end)}
    savings: dict[int, int] = {}
    for stub in stubs:
        unit = unit_of[stub.message]
        savings[unit] = savings.get(unit, 0) + stub.tokens_before - stub.tokens_after
    return savings


def _keep_loads(
    original: Sequence[ModelMessage], result: list[ModelMessage], kept_from: int, counter: TokenCounter
) -> tuple[list[ModelMessage], int]:
    """`result` with the loads it dropped recorded again after the summary, and that record's cost."""
    result, record = with_reloads(original, result, kept_from=kept_from)
    return result, counter.count_message(record) if record is not None else 0


def _native_outcome(
    plan: _Plan,
    cut: _Cut,
    layout: NativeLayout,
    response: ModelResponse,
    spilled: _Spilled,
    event: _Event,
    counter: TokenCounter,
) -> _Outcome:
    """The provider's compaction item in place of the evicted messages, then our note (pins, transcript)."""
    cut_at = plan.units[cut.unit].start
    evicted = plan.messages[layout.body_start : cut_at]
    pins = cut.evicted_pins()
    final = _final_sections(NATIVE_NOTE, layout.earlier, spilled, pins, gone=cut.gone_transcripts)
    note = build_summary_message(
        final, details=_summary_details('provider', evicted, pins, None), system_parts=system_parts(evicted)
    )
    marked = mark_compaction(response, {'evicted_messages': len(evicted)})
    # its counted text or its output tokens, the larger: an encrypted item has no text to count
    item = max(counter.count_message(response), response.usage.output_tokens)
    result = [*layout.standing, marked, *layout.after_item, note, *plan.messages[cut_at:]]
    # pydantic-ai reads loads only after the compaction item: those before it are recorded after the note
    result, reloaded = _keep_loads(
        event.messages, result, len(layout.standing) + len(layout.after_item) + 2, counter
    )
    after = (
        event.overhead
        + counter.count_messages(layout.kept)
        + item
        + counter.count_message(note)
        + reloaded
        + sum(plan.per_message[cut_at:])
    )
    summary = _Summary(summary_text(note) or NATIVE_NOTE, 'provider', 1, '')
    lost = cut.summarized(plan)
    return _Outcome(result, after, summary, len(evicted), pinned=len(pins), replacement=item, lost=lost)


def _summary_details(
    method: str, evicted: Sequence[ModelMessage], pins: Sequence[TranscriptUnit], origin: Origin | None
) -> dict[str, object]:
    details: dict[str, object] = {'method': method, 'evicted_messages': len(evicted)}
    if pins:
        details['pinned_units'] = len(pins)
    if origin is not None:
        details['covers_messages'] = origin.length
    return details


def _final_sections(
    summary: str,
    earlier: SummarySections,
    spilled: _Spilled,
    evicted_pins: Sequence[TranscriptUnit],
    trail: tuple[TrailEntry, ...] | None = None,
    gone: Sequence[str] = (),
) -> SummarySections:
    """The summary message's sections. When nothing was stored this time the earlier reference stands, or
    says its transcript is gone: never a dead id."""
    pinned = '\n\n'.join(p for p in (earlier.pinned, *(u.text for u in evicted_pins)) if p)
    kept = earlier.trail if trail is None else trail
    if spilled.transcript:
        return SummarySections(summary, pinned, spilled.line, kept, spilled.transcript)
    if spilled.lost and gone:  # the only transcript the earlier line names
        return SummarySections(summary, pinned, NO_LONGER_STORED, kept)
    return SummarySections(summary, pinned, earlier.reference, kept, earlier.transcript)


history_processor_annotations(Compactor)

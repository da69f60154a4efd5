"""One compaction as it goes: what it starts from, where it cuts, what its summary replaces and stores, and
what it ends with; and the pure decisions about them (the summary message's sections and details, loads to
record again, what stubs save per unit)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic_ai.messages import ModelMessage

from ...context._context import HistoryContext
from ...events import CompactionReason, CompactionStarted
from ...messages._clock import perf
from ...messages._marks import SEAL_TOKENS
from ...messages.units import Unit
from ...tokens import TokenCounter
from .._loads import with_reloads
from .._spill import no_longer_stored
from .._transcript import NO_LONGER_STORED, TranscriptUnit
from ._prefix_index import Origin
from ._stubs import Stub
from ._summary_message import SummarySections
from ._trail import TrailEntry

if TYPE_CHECKING:
    from ...context._summarizer_settings import ModelRef


logger = logging.getLogger('pydantic_ai_history.compactor')

SUMMARY_FRAMING_TOKENS = 40 + SEAL_TOKENS
"""Reserved on top of the summary cap: its message, marker (a seal where parts have no metadata), framing."""


PINNED_UNIT_FRAMING_TOKENS = 2
"""Per pinned unit: the blank line that separates it in the pinned section."""


TRANSCRIPT_REFERENCE_TOKENS = 100
"""The line that names the stored transcript of the latest evicted messages."""


Method = Literal['llm', 'cache', 'digest', 'truncate', 'provider', 'stubs']


@dataclass(frozen=True)
class Summary:
    text: str
    method: Method
    calls: int
    key: str
    error: str | None = None
    background: bool = False
    """Made ahead of the event, in the background (`CompactionSettings.background_start`)."""


@dataclass
class Compaction:
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
class Outcome:
    """What a compaction ends with: the history and what the event says of it."""

    messages: list[ModelMessage]
    tokens: int
    """Its estimate (instructions and tools included)."""
    summary: Summary
    evicted: int
    pinned: int = 0
    stubbed: int = 0
    replacement: int = 0
    """What the summary message (or the provider's compaction item) costs."""
    lost: Sequence[ModelMessage] = ()
    """The summarized messages, named by `ContentLost` when their transcript could not be stored."""
    kept: Kept | None = None
    """What the result keeps verbatim (our summary's outcomes), so an event over its target can say why."""


@dataclass(frozen=True)
class Kept:
    """What a compacted history keeps besides its summary, in tokens: what may hold it over its target."""

    head: int
    """The preserved head (the system prompt and, by default, the first user turn)."""
    question: int
    """The current run's question, kept verbatim after the summary (0 when the tail holds it)."""
    tail: int
    """The verbatim tail from the cut on; its last unit holds the current request."""
    rest: int
    """Instructions, tool definitions and the record of loads kept after the summary."""


@dataclass
class Plan:
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
class Spilled:
    """The stored transcript of what a compaction evicted ('' for both where there is no store)."""

    transcript: str = ''
    line: str = ''
    """The reference line that tells the model how to read it back."""
    lost: bool = False
    """The store failed: the summary alone stands for the evicted messages."""


@dataclass(frozen=True)
class Evicted:
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
class Cut:
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
    question: int | None = None
    """The unit of the current run's question (`question_unit`) when it is in the body and not pinned: never
    summarized nor stubbed; before `unit`, it follows the summary verbatim."""

    def passed_question(self) -> int | None:
        """The question's unit when the summary passes it (it is moved after the summary), else None."""
        return self.question if self.question is not None and self.question < self.unit else None

    def question_messages(self, plan: Plan) -> list[ModelMessage]:
        """The messages of the question the summary passes, to follow it verbatim."""
        index = self.passed_question()
        if index is None:
            return []
        unit = plan.units[index]
        return plan.messages[unit.start : unit.end]

    async def check_stored(self, context: HistoryContext) -> None:
        self.gone_transcripts = await no_longer_stored(self.previous_transcripts, context)
        self.previous_transcripts = [t for t in self.previous_transcripts if t not in self.gone_transcripts]

    def evicted_pins(self) -> list[TranscriptUnit]:
        return [self.pins[i] for i in sorted(self.pins) if i < self.unit]

    def summarized(self, plan: Plan) -> list[ModelMessage]:
        """The messages before the cut but the pinned units and the question."""
        return [
            m
            for i in range(self.body_first, self.unit)
            if i not in self.pins and i != self.question
            for m in plan.messages[plan.units[i].start : plan.units[i].end]
        ]


def announce(context: HistoryContext, event: Compaction, evicted: int) -> None:
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


def over_target_reason(outcome: Outcome, target: int) -> str | None:
    """Why a compacted history is still over its target (None when it is not): what it had to keep."""
    after, replacement, kept = outcome.tokens, outcome.replacement, outcome.kept
    if after <= target:
        return None
    what = 'compaction item' if outcome.summary.method == 'provider' else 'summary'
    if kept is None and outcome.summary.method == 'cache' and not replacement:
        return (
            'a cached summary of the earlier messages brought the history under the trigger; nothing more '
            'was compacted'
        )
    if kept is None:
        return (
            f'the {what} takes {replacement:,} tokens, what must stay (preserved head, pinned units, the '
            f'last unit with the current request, instructions and tools) {after - replacement:,}'
        )
    parts = [f'the preserved head {kept.head:,}'] if kept.head else []
    if kept.question:
        parts.append(f"the current run's question {kept.question:,}")
    parts.append(f'the verbatim tail with the current request {kept.tail:,}')
    parts.append(f'instructions, tools and recorded loads {kept.rest:,}')
    return (
        f'the {what} takes {replacement:,} tokens (its pinned units included); what must stay verbatim: '
        + (', '.join(parts))
    )


def unit_tokens(plan: Plan, unit: int) -> int:
    """The tokens unit `unit` of the plan holds."""
    span = plan.units[unit]
    return sum(plan.per_message[span.start : span.end])


def unit_step(plan: Plan, first: int) -> int:
    """The tokens a unit of the body from unit `first` on holds on average: the run's step where a growth is
    planned ahead (the units after the cut are the run's own recent steps)."""
    return sum(plan.per_message[plan.units[first].start :]) // max(len(plan.units) - first, 1)


def unit_savings(plan: Plan, stubs: Sequence[Stub]) -> dict[int, int]:
    unit_of = {m: i for i, u in enumerate(plan.units) for m in range(u.start, u.end)}
    savings: dict[int, int] = {}
    for stub in stubs:
        unit = unit_of[stub.message]
        savings[unit] = savings.get(unit, 0) + stub.tokens_before - stub.tokens_after
    return savings


def keep_loads(
    original: Sequence[ModelMessage], result: list[ModelMessage], kept_from: int, counter: TokenCounter
) -> tuple[list[ModelMessage], int]:
    """`result` with the loads it dropped recorded again after the summary, and that record's cost."""
    result, record = with_reloads(original, result, kept_from=kept_from)
    return result, counter.count_message(record) if record is not None else 0


def summary_details(
    method: str, evicted: Sequence[ModelMessage], pins: Sequence[TranscriptUnit], origin: Origin | None
) -> dict[str, object]:
    details: dict[str, object] = {'method': method, 'evicted_messages': len(evicted)}
    if pins:
        details['pinned_units'] = len(pins)
    if origin is not None:
        details['covers_messages'] = origin.length
    return details


def final_sections(
    summary: str,
    earlier: SummarySections,
    spilled: Spilled,
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

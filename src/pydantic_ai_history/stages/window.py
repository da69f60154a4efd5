"""The sliding window: the last line of defence that makes a history fit its hard limit.

It keeps the preserved head (system prompt, first user message), the pinned units, and the longest
contiguous run of recent units that fits, stopping at the first unit that does not fit. Dropped messages
are replaced by one short note, which also carries any system prompt parts they held.

Before it drops anything, the window stores the transcript of what it drops (its own earlier notes aside) in
the spill store, and the note names it: `read_artifact(artifact_id="...", query=...)`. The transcript opens
with a line naming the previous window transcript, so one note suffices however often the window cut. When
the store fails (or there is none) the window still drops what it must, the request has to fit, and a
`ContentLost` event, logged at error level, names the tool calls and counts the user prompts that went.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._compat import (
    ModelMessage,
    ModelRequest,
    UserPromptPart,
    message_metadata,
)
from .._context import HistoryContext
from .._marks import (
    OPENINGS,
    SEAL_TOKENS,
    marker_kind,
    own_metadata,
    own_request,
    part_kinds,
    seal,
    strip_seal,
)
from ..events import WindowApplied
from ..model_info import ContextWindowUnknownError
from ..pinning import PinPredicate, is_pinned
from ..units import Unit, fit_suffix, head_length, split_units, system_parts
from ._spill import Transcript, render_transcript, store_transcript
from ._transcript import named_transcripts, read_call

__all__ = (
    'SlidingWindow',
    'WindowSettings',
    'dropped_count',
    'note_transcript',
    'select_window',
    'window_note',
)

logger = logging.getLogger('pydantic_ai_history.window')

_NOTE_COST = 40 + SEAL_TOKENS
"""Tokens reserved for the note that replaces dropped messages (its text alone is about 30, plus its seal)."""
_REFERENCE_COST = 64
"""Tokens the note adds when it names the stored transcript (`read_artifact(...)` with a 68-character id)."""
_MAX_PASSES = 3


@dataclass(frozen=True)
class WindowSettings:
    """Settings of the sliding window.

    Args:
        budget: an explicit token budget; by default `context_window * context_utilization - reserve_tokens`.
        reserve_tokens: room left for the model's answer.
        context_utilization: the fraction of the window to use (e.g. 0.33, 0.66 or 1.0: cheaper requests on an
            expensive model).
        keep_first_user_message: keep the first user turn verbatim (the original task).
        pin: a predicate; units with a message it accepts are kept ahead of older unpinned ones.
    """

    budget: int | None = None
    reserve_tokens: int = 1_024
    context_utilization: float = 1.0
    keep_first_user_message: bool = True
    pin: PinPredicate | None = None

    def __post_init__(self) -> None:
        if not 0 < self.context_utilization <= 1:
            raise ValueError('context_utilization must be in (0, 1]')

    def resolve_budget(self, context_window: int | None, model_name: str | None = None) -> int:
        if self.budget is not None:
            return self.budget
        if context_window is None:
            raise ContextWindowUnknownError(model_name)
        return max(int(context_window * self.context_utilization) - self.reserve_tokens, 1)


@dataclass(frozen=True)
class WindowSelection:
    """Which units to keep: indices into the unit list, in order."""

    head: int
    """Messages `[0, head)` are the preserved head."""
    kept_units: tuple[int, ...]
    dropped_units: tuple[int, ...]
    pinned_kept: int


def select_window(
    messages: Sequence[ModelMessage],
    units: Sequence[Unit],
    per_message: Sequence[int],
    budget: int,
    *,
    keep_first_user_message: bool = True,
    pin: PinPredicate | None = None,
    fixed_cost: int = 0,
) -> WindowSelection:
    """Choose the units to keep within `budget` (tokens), given each message's cost.

    Mandatory: the head and the last unit (the current request). Then pinned units, newest first, as long
    as they fit. Then the contiguous suffix of the rest, stopping at the first unit that does not fit: a
    large unit is never skipped to keep older ones. Our own earlier window notes are always dropped (the
    new note supersedes them).
    """
    head = head_length(messages, units, keep_first_user_message=keep_first_user_message)
    if not keep_first_user_message and head and _has_user_prompt(messages[:head]):
        # The system prompt shares its request with the first user turn: dropping that request is allowed,
        # and the note that replaces it carries the system prompt parts.
        head = 0
    first_body = next((i for i, u in enumerate(units) if u.start >= head), len(units))
    last = len(units) - 1
    costs = [sum(per_message[u.start : u.end]) for u in units]
    used = fixed_cost + sum(costs[:first_body]) + costs[last]
    body = range(first_body, last)
    own_markers = {i for i in body if marker_kind(messages[units[i].start]) == 'window'}
    pinned: list[int] = []
    for index in reversed(body):
        if index in own_markers:
            continue
        unit = units[index]
        if is_pinned(messages[unit.start : unit.end], pin) and used + costs[index] <= budget:
            pinned.append(index)
            used += costs[index]
    pinned_set = set(pinned)
    free = [0 if i in pinned_set or i in own_markers else costs[i] for i in body]
    start = first_body + fit_suffix(free, budget - used, at_least=0) if free else first_body
    kept = sorted((set(range(first_body)) | pinned_set | set(range(start, last)) | {last}) - own_markers)
    kept_set = set(kept)
    dropped = tuple(i for i in range(len(units)) if i not in kept_set)
    return WindowSelection(head, tuple(kept), dropped, len(pinned_set))


def _has_user_prompt(messages: Sequence[ModelMessage]) -> bool:
    return any(
        isinstance(p, UserPromptPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts
    )


@dataclass
class SlidingWindow:
    """Keep the longest run of recent units that fits; never skip a unit to keep older ones."""

    settings: WindowSettings = WindowSettings()
    name: str = 'window'

    def hard_budget(self, context: HistoryContext) -> int | None:
        """The budget this window enforces for `context`, None when the context window is unknown."""
        try:
            return self.settings.resolve_budget(context.context_window, context.counter.model_name)
        except ContextWindowUnknownError:
            return None

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        budget = self.settings.resolve_budget(context.context_window, context.counter.model_name)
        estimate = context.estimate(messages)
        if estimate.total <= budget:
            return messages  # the idle path: no unit split, no copy
        units = split_units(messages)
        layout = _Layout(messages, units, estimate.total - estimate.tokenizer, context)
        draft, candidate = self._choose(layout, estimate.per_message, budget)
        if draft is not None and draft.transcript is not None and draft.after > budget:
            draft = _plain_if_it_fits(layout, draft, budget, estimate.total)
        mandatory = layout.overhead + _mandatory_cost(estimate.per_message, units, candidate)
        if draft is None or draft.after >= estimate.total:
            # nothing to drop, or the note costs what it would replace: the input is the best there is
            self._warn_over_budget(
                context, estimate.total, budget, mandatory, messages, estimate.per_message, units
            )
            return messages
        draft = await _give_a_home(layout, draft)
        selection = draft.selection
        context.emit_event(
            WindowApplied(
                run_id=context.run_id,
                messages_before=len(messages),
                messages_after=len(draft.result),
                tokens_before=estimate.total,
                tokens_after=draft.after,
                budget=budget,
                units_dropped=len(selection.dropped_units),
                pinned_kept=selection.pinned_kept,
                reason=f'{estimate.total:,} tokens over the window budget of {budget:,}',
            )
        )
        logger.info(
            'window: %d -> %d messages, %d -> %d tokens (budget %d, %d units dropped, %d pinned kept)',
            len(messages),
            len(draft.result),
            estimate.total,
            draft.after,
            budget,
            len(selection.dropped_units),
            selection.pinned_kept,
        )
        if draft.after > budget:
            self._warn_over_budget(
                context, draft.after, budget, mandatory, messages, estimate.per_message, units
            )
        return draft.result

    def _choose(
        self, layout: _Layout, per_message: Sequence[int], budget: int
    ) -> tuple[_Draft | None, WindowSelection | None]:
        """The history to return (None when nothing can be dropped), and the last selection considered.

        The note's size is only known once the cut is chosen (it carries the system prompt parts of what it
        replaces, and dropping more only adds to them; it names the transcript of what it replaces): when the
        assembled history overshoots, choose again with the note's real cost. A note that names its
        transcript may so cost one more unit than a plain one: that unit is stored, not lost.
        """
        spill = layout.context.store is not None
        note_cost = _NOTE_COST + (_REFERENCE_COST if spill else 0)
        draft: _Draft | None = None
        candidate: WindowSelection | None = None
        for _ in range(_MAX_PASSES):
            candidate = select_window(
                layout.messages,
                layout.units,
                per_message,
                budget,
                keep_first_user_message=self.settings.keep_first_user_message,
                pin=self.settings.pin,
                fixed_cost=layout.overhead + note_cost,
            )
            if not candidate.dropped_units or (
                draft is not None and candidate.dropped_units == draft.selection.dropped_units
            ):
                break
            draft = layout.draft(candidate, spill=spill)
            real_note_cost = layout.context.counter.count_message(draft.note)
            if draft.after <= budget or real_note_cost <= note_cost:
                break
            note_cost = real_note_cost
        return draft, candidate

    @staticmethod
    def _warn_over_budget(
        context: HistoryContext,
        tokens: int,
        budget: int,
        mandatory: int,
        messages: Sequence[ModelMessage],
        per_message: Sequence[int],
        units: Sequence[Unit],
    ) -> None:
        current = sum(per_message[units[-1].start : units[-1].end]) if units else 0
        if mandatory > budget:
            why = (
                f'the preserved head, the system prompt and the current request ({current:,} tokens) '
                f'alone are {mandatory:,} tokens and do not fit'
            )
        else:
            why = (
                f'the preserved head and the current request ({mandatory:,} tokens) fit, but no cut at a '
                'unit boundary, with the note that stands for what it drops, does'
            )
        context.warn(
            'over_budget',
            f'the history is {tokens:,} tokens after the window, over its budget of {budget:,}: {why}',
            tokens=tokens,
            budget=budget,
            current_request_tokens=current,
            mandatory_tokens=mandatory,
            messages=len(messages),
        )


def _plain_if_it_fits(layout: _Layout, draft: _Draft, budget: int, before: int) -> _Draft:
    """`draft` with a plain note when the note naming its transcript is what keeps it from fitting.

    Only where no cut makes room for the reference (the head and the current request take the rest): the
    request must fit, or at least shrink. The transcript is stored all the same.
    """
    plain = layout.plain(draft.selection, draft.dropped, draft.transcript)
    if plain.after <= budget or draft.after >= before > plain.after:
        return plain
    return draft


async def _give_a_home(layout: _Layout, draft: _Draft) -> _Draft:
    """Store the transcript of what `draft` drops; when the store fails (or there is none), drop it anyway
    and name the loss.

    The window is the last line of defence: the request must fit, so a failed store never keeps content in.
    The note then names no new transcript (it costs less than the one priced), and `ContentLost` names, at
    error level, what went.
    """
    context = layout.context
    transcript = draft.transcript
    if transcript is not None and await store_transcript(
        transcript, context, source=f'transcript of {transcript.messages} messages the window removed'
    ):
        if not draft.named:
            # The app can still find the transcript by the id in this warning.
            context.warn(
                'window_reference_omitted',
                f'the note naming the stored transcript {transcript.artifact_id} does not fit the budget; '
                'the window wrote a note without it',
                artifact_id=transcript.artifact_id,
            )
        return draft
    if draft.named:
        draft = layout.plain(draft.selection, draft.dropped, None)
    lost = [m for m in draft.dropped if not marker_kind(m)]
    if lost:
        why = 'the store failed' if context.store is not None else 'there is no store'
        context.lost('window', 'window_dropped', f'{why}; the window note tells the model', lost)
    return draft


def _mandatory_cost(
    per_message: Sequence[int], units: Sequence[Unit], selection: WindowSelection | None
) -> int:
    """What the window can never drop: the preserved head and the last unit (the current request)."""
    if not units:
        return 0
    head = selection.head if selection is not None else 0
    last = units[-1]
    return sum(per_message[: min(head, last.start)]) + sum(per_message[last.start : last.end])


@dataclass(frozen=True)
class _Draft:
    """A history the window may return: the kept messages around the note, and what the note stands for."""

    selection: WindowSelection
    result: list[ModelMessage]
    note: ModelRequest
    dropped: list[ModelMessage]
    transcript: Transcript | None
    """The transcript of the dropped content, rendered and keyed but not stored yet; None without one."""
    named: bool
    """Whether the note names `transcript` (a plain note stands in where that one does not fit)."""
    after: int
    """The result's tokens, provider overhead included."""


@dataclass(frozen=True)
class _Layout:
    """What one window call works on: drafts for different selections are made from it."""

    messages: Sequence[ModelMessage]
    units: Sequence[Unit]
    overhead: int
    """Provider overhead (instructions, tool definitions) counted on top of the messages."""
    context: HistoryContext

    def draft(self, selection: WindowSelection, *, spill: bool) -> _Draft:
        """The history `selection` gives, its note naming the transcript of the dropped content when `spill`
        (and there is content: earlier notes of ours are superseded, not content)."""
        units = self.units
        dropped = [m for i in selection.dropped_units for m in self.messages[units[i].start : units[i].end]]
        content = [m for m in dropped if marker_kind(m) != 'window']
        previous = [t for m in dropped if (t := note_transcript(m)) is not None]
        if not spill or not content:
            return self.plain(selection, dropped, None)
        transcript = render_transcript(content, self.context, previous)
        note = window_note(dropped, self.context.run_id, transcript=transcript.artifact_id)
        result, after = self.assemble(selection, note)
        return _Draft(selection, result, note, dropped, transcript, True, after)

    def plain(
        self, selection: WindowSelection, dropped: list[ModelMessage], transcript: Transcript | None
    ) -> _Draft:
        """A draft whose note names no new transcript (`transcript`, if any, is still to be stored).

        The newest earlier transcript stays named: it chains to every one before it.
        """
        previous = [t for m in dropped if (t := note_transcript(m)) is not None]
        has_content = any(marker_kind(m) != 'window' for m in dropped)
        earlier = previous[-1] if previous else None
        note = window_note(dropped, self.context.run_id, transcript=earlier, complete=not has_content)
        result, after = self.assemble(selection, note)
        return _Draft(selection, result, note, dropped, transcript, False, after)

    def assemble(self, selection: WindowSelection, note: ModelRequest) -> tuple[list[ModelMessage], int]:
        """The kept units with `note` where the dropped ones were, and their tokens (overhead included)."""
        kept = set(selection.kept_units)
        result: list[ModelMessage] = []
        note_placed = False
        for index, unit in enumerate(self.units):
            if index not in kept:
                continue
            if not note_placed and unit.start >= selection.head:
                result.append(note)
                note_placed = True
            result.extend(self.messages[unit.start : unit.end])
        return result, self.context.counter.count_messages(result) + self.overhead


def window_note(
    dropped: Sequence[ModelMessage],
    run_id: str | None,
    *,
    transcript: str | None = None,
    complete: bool = True,
) -> ModelRequest:
    """The request that stands for dropped messages; it keeps their system prompt parts.

    Earlier notes of ours among the dropped messages are folded in: their counts add up, their own text is
    not repeated. `transcript` is the id of the stored transcript the note names: of all the dropped
    messages when `complete`, else only of those an earlier note stood for.
    """
    count = 0
    for message in dropped:
        noted = dropped_count(message)
        count += 1 if noted is None else noted
    text = f'{OPENINGS["window"]} {count} earlier messages were removed to fit the context window; '
    details: dict[str, object] = {'dropped_messages': count}
    if transcript is None:
        text += 'the conversation continues below.'
    else:
        which = 'their transcript' if complete else 'the transcript of the earliest of them'
        text += f'{which}: {read_call(transcript)} finds any detail. The conversation continues below.'
        details['transcript'] = transcript
    return own_request(
        [
            *((p, None) for p in system_parts(dropped)),
            (UserPromptPart(content=seal('window', text)), 'window'),
        ],
        details=details,
        run_id=run_id,
    )


_NOTE_COUNT = re.compile(re.escape(OPENINGS['window']) + r' (\d+) earlier messages were removed')


def dropped_count(message: ModelMessage) -> int | None:
    """How many messages a window note of ours stands for; None for any other message.

    Read from the note's metadata, or from its own sealed text where messages have none (1.0): only the part
    that is the note (by identity) is read, never the system prompts it carries or anybody else's text.
    """
    found = _note_detail(message, 'dropped_messages')
    if found is None:
        return None
    detail, text = found
    if isinstance(detail, int):
        return detail
    match = _NOTE_COUNT.match(text)
    return int(match.group(1)) if match else 0


def note_transcript(message: ModelMessage) -> str | None:
    """The id of the stored transcript a window note of ours names; None for any other message (or none).

    Read, like `dropped_count`, from the note's metadata or from its own sealed text.
    """
    found = _note_detail(message, 'transcript')
    if found is None:
        return None
    detail, text = found
    if isinstance(detail, str):
        return detail
    named = named_transcripts(text)
    return named[0] if named else None


def _note_detail(message: ModelMessage, key: str) -> tuple[object, str] | None:
    """None for anything but a window note of ours; else its metadata value for `key` (None when it has
    none) and, only when that is missing, the note's own text without its seal."""
    if marker_kind(message) != 'window':
        return None
    detail = own_metadata(message_metadata(message)).get(key)
    if detail is not None:
        return detail, ''
    for part, kind in zip(message.parts, part_kinds(message), strict=True):
        content = getattr(part, 'content', None)
        if kind == 'window' and isinstance(content, str):
            return None, strip_seal(content)
    return None, ''

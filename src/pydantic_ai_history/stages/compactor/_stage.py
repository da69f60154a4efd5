"""The compactor: above the trigger, replace the older part of the history with one structured summary.

Output: the preserved head (system prompt, first user message) + one summary request + the most recent
units verbatim, together at most the target. The tail is the contiguous run of newest units that fits
what the target leaves after the head, the summary's cap and the provider overhead (instructions, tool
definitions); the last unit (the current request with the response whose calls it answers) is always kept.

Pinned units (`CompactionSettings.pin`, `pinning.pin()`) are never summarized: their cost is reserved before
the tail is chosen, so they never push the cut; those before the cut are carried verbatim in the summary's
pinned section, which every later compaction carries forward without showing it to the summarizer.

With a store, each compaction stores the full transcript of what it evicted; the pinned section names only
the newest one, and each transcript opens with a line naming the one before it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..._compat import ModelMessage
from ..._context import HistoryContext
from ...cache import SummaryCache, cache_key
from ...events import CompactionResult
from ...pinning import is_pinned, marker_kind
from ...tokens import TokenCounter, TokenEstimate
from ...units import Unit, fit_suffix, head_length, split_units, system_parts
from ...windows import model_name_of
from ._breaker import ScopedBreakers
from ._fallback import digest, head_tail_cut
from ._prefix_index import Origin, PrefixIndex, PrefixRecord
from ._settings import CompactionLimits, CompactionSettings
from ._summarizer import SummarizerError, run_summarizer
from ._summary_message import PINNED_HEADING, build_summary_message, join_pinned, split_pinned, summary_text
from ._transcript import TranscriptUnit, first_user_text, render_units

__all__ = ('Compactor',)

logger = logging.getLogger('pydantic_ai_history.compactor')

_SUMMARY_FRAMING_TOKENS = 40
"""Tokens reserved on top of the summary cap for its message, marker and the provider's framing."""
_PINNED_UNIT_FRAMING_TOKENS = 2
"""Tokens reserved per pinned unit for the blank line that separates it in the pinned section."""
_TRANSCRIPT_REFERENCE_TOKENS = 100
"""The one line of the pinned section that names the stored transcript of the latest evicted messages."""
TRANSCRIPT_REFERENCE_OPENING = 'The full transcript of the '
"""The fixed opening of that line; how the next compaction finds and replaces it."""
_REFERENCE = re.compile(
    re.escape(TRANSCRIPT_REFERENCE_OPENING)
    + r'\d+ messages summarized[^\n]*?read_artifact\(artifact_id="([^"\n]+)"[^\n]*'
)

Method = Literal['llm', 'cache', 'digest', 'truncate']
_FALLBACK_METHODS = frozenset({'digest', 'truncate'})


@dataclass(frozen=True)
class _Summary:
    text: str
    method: Method
    calls: int
    key: str
    error: str | None = None


@dataclass
class _Plan:
    """The history being compacted; after a prefix-cache hit it is the substituted one."""

    messages: list[ModelMessage]
    per_message: list[int]
    units: list[Unit]
    head: int
    previous: int | None
    """Index of our previous summary (always `head`) when the history has one."""
    origin: Origin | None
    """Where the body after `head` (after the previous summary, if any) starts in the original history."""


@dataclass
class Compactor:
    """Summarize the older part of the history when it passes `max_tokens`, down to `target_tokens`."""

    settings: CompactionSettings = field(default_factory=CompactionSettings)
    name: str = 'compactor'
    _breakers: ScopedBreakers = field(init=False, repr=False)
    _index: PrefixIndex = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._breakers = ScopedBreakers(
            max_failures=self.settings.max_failures,
            cooldown=self.settings.cooldown_seconds,
            clock=self.settings.clock,
        )
        self._index = PrefixIndex(ttl=self.settings.cache_ttl)

    async def __call__(self, messages: list[ModelMessage], context: HistoryContext) -> list[ModelMessage]:
        limits = self.settings.resolve(context.context_window)
        estimate = context.estimate(messages)
        if estimate.total <= limits.trigger:
            return messages
        return await self._compact(messages, context, estimate, limits, reason='trigger', focus=None)

    async def compact(
        self, messages: Sequence[ModelMessage], context: HistoryContext, *, focus: str | None = None
    ) -> list[ModelMessage]:
        """Compact now, whatever the trigger says, to the target; `focus` says what the summary must keep.

        When everything already fits the target, all units but the last are summarized.
        """
        history = list(messages)
        limits = self.settings.resolve(context.context_window)
        return await self._compact(
            history, context, context.estimate(history), limits, reason='manual', focus=focus
        )

    # ---- the steps ------------------------------------------------------------------------------------

    async def _compact(
        self,
        messages: list[ModelMessage],
        context: HistoryContext,
        estimate: TokenEstimate,
        limits: CompactionLimits,
        *,
        reason: Literal['trigger', 'manual'],
        focus: str | None,
    ) -> list[ModelMessage]:
        started = time.perf_counter()
        units = split_units(messages)
        if len(units) < 2:
            return messages
        overhead = estimate.total - estimate.tokenizer
        head = self._head(messages, units)
        previous = head if head < len(messages) and marker_kind(messages[head]) == 'summary' else None
        cache = context.cache
        conversation = self._index.conversation_key(messages[:head]) if cache is not None else ''
        plan = _Plan(messages, list(estimate.per_message), units, head, previous, None)
        if cache is not None:
            if previous is None:
                plan.origin = Origin(head, conversation)
                hit = await self._lookup(cache, conversation, plan, context)
                if hit is not None:
                    plan = hit
                    total = overhead + sum(plan.per_message)
                    if reason == 'trigger' and total <= limits.trigger:
                        return self._finish(
                            context,
                            plan.messages,
                            messages,
                            estimate.total,
                            total,
                            reason,
                            started,
                            _Summary(summary_text(plan.messages[head]) or '', 'cache', 0, ''),
                            evicted=plan.origin.length - head if plan.origin is not None else 0,
                        )
            else:
                plan.origin = await self._index.origin(
                    cache, conversation, summary_text(messages[previous]) or ''
                )

        body_first = next(
            i for i, u in enumerate(plan.units) if u.start >= head + (plan.previous is not None)
        )
        last = len(plan.units) - 1
        if body_first > last:
            return plan.messages
        counter = context.counter
        previous_full = summary_text(plan.messages[plan.previous]) if plan.previous is not None else None
        previous_text, previous_pinned = (
            split_pinned(previous_full) if previous_full is not None else (None, '')
        )
        pins = self._pinned_units(plan, body_first, last, counter)
        costs = [sum(plan.per_message[u.start : u.end]) for u in plan.units[body_first:]]
        # With a store, the previous compaction's transcript reference gives way to this one's (the new
        # transcript names the previous one in its first line, so the model can walk back through them all).
        carried_pinned, previous_transcripts = (
            _strip_references(previous_pinned) if context.store is not None else (previous_pinned, [])
        )
        # Pinned units stay whether they end up in the tail (as messages) or before the cut (as text in the
        # pinned section): reserve the larger of the two up front and let them cost nothing in the walk, so
        # they never push the cut.
        pinned_cost = counter.count_text(carried_pinned)
        for index, rendered in pins.items():
            pinned_cost += max(costs[index - body_first], rendered.tokens + _PINNED_UNIT_FRAMING_TOKENS)
            costs[index - body_first] = 0
        if context.store is not None:
            pinned_cost += _TRANSCRIPT_REFERENCE_TOKENS
        if pinned_cost:
            pinned_cost += counter.count_text(PINNED_HEADING) + _PINNED_UNIT_FRAMING_TOKENS
        head_cost = sum(plan.per_message[:head])
        budget = (
            limits.target
            - overhead
            - head_cost
            - self.settings.summary_max_tokens
            - _SUMMARY_FRAMING_TOKENS
            - pinned_cost
        )
        cut_unit = body_first + fit_suffix(costs, budget, at_least=1)
        if cut_unit == body_first:
            if reason == 'manual' and last > body_first:
                cut_unit = last
            else:
                context.warn(
                    'compaction_impossible',
                    'the history is over the compaction trigger but every unit after the preserved head is '
                    'needed to reach the target; nothing was compacted',
                    tokens=estimate.total,
                    trigger=limits.trigger,
                )
                return plan.messages
        cut = plan.units[cut_unit].start
        body_start = head + (plan.previous is not None)
        evicted = plan.messages[body_start:cut]
        evicted_pins = [pins[i] for i in sorted(pins) if i < cut_unit]
        summarized = [
            m
            for i in range(body_first, cut_unit)
            if i not in pins
            for m in plan.messages[plan.units[i].start : plan.units[i].end]
        ]

        summary = await self._summary(plan, summarized, previous_text, focus, context)
        reference = await _spill_transcript(evicted, counter, context, previous_transcripts)
        if not reference:  # nothing stored this time: the earlier reference still stands
            carried_pinned = previous_pinned
        # The summarizer's text (capped) + the pinned section: what it carried, where the full transcript of
        # what was just evicted can be read back, and what was pinned just now.
        final_text = join_pinned(summary.text, carried_pinned, reference, *(p.text for p in evicted_pins))
        # System prompts survive compaction as parts: those of evicted messages (window notes included, which
        # carry the ones the window dropped) and those the previous summary already carried.
        carriers = [plan.messages[plan.previous]] if plan.previous is not None else []
        kept_system = system_parts([*carriers, *evicted])
        new_origin = None
        if plan.origin is not None:
            new_origin = Origin(
                plan.origin.length + len(evicted), self._index.fold(plan.origin.chain, evicted)
            )
        details = {'method': summary.method, 'evicted_messages': len(evicted)}
        if evicted_pins:
            details['pinned_units'] = len(evicted_pins)
        if new_origin is not None:
            details['covers_messages'] = new_origin.length
        message = build_summary_message(final_text, details=details, system_parts=kept_system)
        result = [*plan.messages[:head], message, *plan.messages[cut:]]
        after = overhead + head_cost + counter.count_message(message) + sum(plan.per_message[cut:])
        if cache is not None and new_origin is not None:
            if summary.key and summary.method not in _FALLBACK_METHODS:
                # The prefix cache reuses the final text, pinned section included, so a reload keeps the pins.
                # A fallback is never recorded: a reload after the summarizer recovers gets a real summary.
                final_key = summary.key
                if final_text != summary.text:
                    final_key = cache_key('compactor-pinned', summary.key, final_text)
                    await cache.set(final_key, final_text, ttl=self.settings.cache_ttl)
                record = PrefixRecord(new_origin.length, new_origin.chain, final_key)
                await self._index.add(cache, conversation, record)
            # Where this summary stands in the original history, so the next compaction (which updates it)
            # can record its own prefix.
            await self._index.set_origin(cache, conversation, final_text, new_origin)
        if after > limits.target:
            context.warn(
                'compaction_over_target',
                f'the compacted history is {after:,} tokens, over the target of {limits.target:,}: '
                'the preserved head, the pinned units and the current request alone are that large',
                tokens=after,
                target=limits.target,
            )
        return self._finish(
            context,
            result,
            messages,
            estimate.total,
            after,
            reason,
            started,
            dataclasses.replace(summary, text=final_text),
            len(evicted),
            pinned=len(evicted_pins),
        )

    def _pinned_units(
        self, plan: _Plan, body_first: int, last: int, counter: TokenCounter
    ) -> dict[int, TranscriptUnit]:
        """The pinned units of the body (not our own summaries or notes), each rendered in full."""
        pins: dict[int, TranscriptUnit] = {}
        for index in range(body_first, last):
            unit = plan.units[index]
            messages = plan.messages[unit.start : unit.end]
            if any(marker_kind(m) is not None for m in messages) or not is_pinned(
                messages, self.settings.pin
            ):
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

    def _head(self, messages: Sequence[ModelMessage], units: Sequence[Unit]) -> int:
        head = head_length(messages, units, keep_first_user_message=self.settings.keep_first_user_message)
        # Where the first user message is gone (1.x renders our summary as user text), our own summary is
        # not the head: it is the previous summary, to be updated.
        while head > 0 and marker_kind(messages[head - 1]) is not None:
            head -= 1
        return head

    async def _lookup(
        self, cache: SummaryCache, conversation: str, plan: _Plan, context: HistoryContext
    ) -> _Plan | None:
        """The history with the longest recorded compacted prefix replaced by its cached summary, or None."""
        records = await self._index.records(cache, conversation)
        if not records:
            return None
        head = plan.head
        boundaries = {u.start for u in plan.units}
        limit = plan.units[-1].start
        candidates = sorted((n for n in records if head < n <= limit and n in boundaries), reverse=True)
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
                text,
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

    async def _summary(
        self,
        plan: _Plan,
        summarized: Sequence[ModelMessage],
        previous: str | None,
        focus: str | None,
        context: HistoryContext,
    ) -> _Summary:
        """The summarizer's text for `summarized` (the evicted messages but the pinned units)."""
        settings = self.settings
        counter = context.counter
        model = settings.summarizer_model if settings.summarizer_model is not None else context.model
        key = cache_key(
            'compactor-summary',
            self._index.span_key(summarized),
            self._settings_fingerprint(model),
            previous or '',
            focus or '',
        )
        cache = context.cache
        if cache is not None:
            cached = await cache.get(key)
            if cached:
                return _Summary(cached, 'cache', 0, key)
        summarized_units = split_units(summarized)
        transcript = render_units(
            summarized, summarized_units, counter, tool_result_max_tokens=settings.tool_result_max_tokens
        )
        task = first_user_text(plan.messages[: plan.head])
        error: str | None
        calls = 0
        if self._breakers.allows(context.scope):
            try:
                outcome = await run_summarizer(
                    model=model,
                    settings=settings,
                    counter=counter,
                    transcript=transcript,
                    original_task=task,
                    previous_summary=previous,
                    focus=focus,
                    usage=context.usage,
                )
            except SummarizerError as exc:
                self._breakers.failure(context.scope)
                error, calls = str(exc), exc.calls
                logger.warning('compactor: summarizer failed (%s); using the deterministic fallback', error)
            else:
                self._breakers.success(context.scope)
                if cache is not None:
                    await cache.set(key, outcome.text, ttl=settings.cache_ttl)
                return _Summary(outcome.text, 'llm', outcome.calls, key)
        else:
            error = (
                f'summarizer cooling down after {self._breakers.failures(context.scope)} consecutive failures'
            )
        text: str | None = None
        method: Method = 'truncate'
        if settings.fallback == 'digest':
            try:
                text = digest(summarized, previous, counter, settings.summary_max_tokens)
                method = 'digest'
            except Exception:
                logger.exception('compactor: the digest failed; cutting the transcript instead')
        if not text:
            text = head_tail_cut(transcript, previous, counter, settings.summary_max_tokens)
            method = 'truncate'
        # Not cached: a fallback stands only until the summarizer answers again.
        return _Summary(text, method, calls, '', error)

    def _settings_fingerprint(self, model: object) -> str:
        s = self.settings
        return repr(
            (
                model_name_of(model),
                s.summarizer_settings,
                s.summarizer_instructions,
                s.summary_max_tokens,
                s.tool_result_max_tokens,
            )
        )

    def _finish(
        self,
        context: HistoryContext,
        result: list[ModelMessage],
        original: Sequence[ModelMessage],
        tokens_before: int,
        tokens_after: int,
        reason: Literal['trigger', 'manual'],
        started: float,
        summary: _Summary,
        evicted: int,
        *,
        pinned: int = 0,
    ) -> list[ModelMessage]:
        event = CompactionResult(
            run_id=context.run_id,
            messages_before=len(original),
            messages_after=len(result),
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            summary=summary.text,
            reason=reason,
            method=summary.method,
            evicted_messages=evicted,
            summarizer_calls=summary.calls,
            duration_ms=(time.perf_counter() - started) * 1000,
            error=summary.error,
            pinned_units=pinned,
        )
        context.emit_event(event)
        if self.settings.on_compaction is not None:
            try:
                self.settings.on_compaction(event)
            except Exception:
                logger.exception('on_compaction callback raised; ignored')
        logger.info(
            'compactor (%s, %s): %d -> %d messages, %d -> %d tokens, %d summarizer call(s), '
            '%d pinned unit(s) kept verbatim%s',
            reason,
            summary.method,
            len(original),
            len(result),
            tokens_before,
            tokens_after,
            summary.calls,
            pinned,
            f', error: {summary.error}' if summary.error else '',
        )
        return result


def _strip_references(pinned: str) -> tuple[str, list[str]]:
    """The pinned section without its transcript reference line(s), and the transcript ids they named.

    One line per compaction was carried before transcripts were chained; all are removed and linked.
    """
    pieces = pinned.split('\n\n') if pinned else []
    kept: list[str] = []
    ids: list[str] = []
    for piece in pieces:
        match = _REFERENCE.fullmatch(piece)
        if match is None:
            kept.append(piece)
        else:
            ids.append(match.group(1))
    return '\n\n'.join(kept), ids


async def _spill_transcript(
    evicted: Sequence[ModelMessage],
    counter: TokenCounter,
    context: HistoryContext,
    previous: Sequence[str] = (),
) -> str:
    """Store the full transcript of the evicted messages; the line that tells the model how to read it.

    A summary, however good, loses detail; with the transcript in the spill store nothing the user or the
    tools said is lost, and `read_artifact(artifact_id, query=...)` finds the passage again. The transcript
    opens with a line naming the `previous` transcripts (those of earlier compactions), so the summary needs
    only one reference line however many compactions there were. Empty when there is no store or it fails
    (the summary still stands).
    """
    if context.store is None or not evicted:
        return ''
    rendered = render_units(evicted, split_units(evicted), counter, tool_result_max_tokens=None)
    body = '\n\n'.join(unit.text for unit in rendered)
    if previous:
        # newest first; more than one only for a summary written before transcripts were chained
        links = ', '.join(f'read_artifact(artifact_id="{p}")' for p in reversed(previous))
        where = 'the earlier transcript' if len(previous) == 1 else 'the earlier transcripts, newest first'
        body = f'The messages before these are in {where}: {links}.\n\n{body}'
    data = body.encode()
    key = context.artifact_id(data)
    try:
        await context.store.put(
            key,
            data,
            media_type='text/markdown',
            source=f'transcript of {len(evicted)} compacted messages',
            scope=context.scope,
        )
    except Exception as exc:  # the summary stands without it
        context.warn('transcript_store_failed', f'the evicted transcript could not be stored ({exc})')
        return ''
    chain = '; its first line names the transcript of earlier messages' if previous else ''
    return (
        f'{TRANSCRIPT_REFERENCE_OPENING}{len(evicted)} messages summarized last is stored: '
        f'read_artifact(artifact_id="{key}", query=...) finds any detail in it{chain}.'
    )

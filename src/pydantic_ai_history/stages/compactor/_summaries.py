"""The summary a compaction puts in place of what it evicts: what the summarizer reads and its cache key, the
evicted transcript stored first, the summary asked for (or cached, or the fallback), and the prefix records
that let a reload of the uncompacted history reuse it."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage

from ...budget.model_info import model_name_of
from ...cache import SummaryCache, cache_key
from ...context._context import HistoryContext
from ...context._llm import operations_of
from ...messages._marks import readback_tool
from ...messages.units import split_units, system_parts
from ...tokens import TokenCounter
from .._spill import spill_transcript
from .._transcript import TranscriptUnit, first_user_text, read_call, render_each_unit, transcript_preamble
from ._compaction import SUMMARY_FRAMING_TOKENS, Compaction, Cut, Evicted, Plan, Spilled, Summary, announce
from ._fallback import digest, head_tail_cut
from ._prefix_index import Origin, PrefixRecord
from ._report import CompactionReport
from ._summarizer import SummarizerError, run_summarizer
from ._summary_message import (
    TRANSCRIPT_REFERENCE_OPENING,
    SummarySections,
    build_summary_message,
    decode_sections,
    encode_sections,
)
from ._view import summarizer_view

logger = logging.getLogger('pydantic_ai_history.compactor')


class Summaries(CompactionReport):
    """The summary of what a compaction evicts: a part of `Compactor`."""

    async def _spill(
        self,
        plan: Plan,
        cut: Cut,
        evicted: Sequence[ModelMessage],
        context: HistoryContext,
        event: Compaction,
        rendered: Sequence[TranscriptUnit] | None = None,
    ) -> Spilled | None:
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
        announce(context, event, len(evicted))
        if not key:
            return Spilled(lost=key is None)
        chain = (
            '; its first line names the transcript of earlier messages' if cut.previous_transcripts else ''
        )
        line = (
            f'{TRANSCRIPT_REFERENCE_OPENING}{len(evicted)} messages summarized last is stored: '
            f'{read_call(key)} finds any detail in it{chain}; {readback_tool()}(query=...) without an id '
            'searches everything stored from this conversation.'
        )
        return Spilled(key, line)

    def _evicted(self, plan: Plan, cut: Cut, context: HistoryContext, focus: str | None) -> Evicted | None:
        """None when no summary can be smaller than what it would replace."""
        head = plan.head
        cut_at = plan.units[cut.unit].start
        question = cut.passed_question()
        moved = range(0) if question is None else range(plan.units[question].start, plan.units[question].end)
        if (
            sum(plan.per_message[head:cut_at]) - sum(plan.per_message[i] for i in moved)
            <= SUMMARY_FRAMING_TOKENS
        ):
            return None
        body_start = head + (plan.previous is not None)
        # the question the summary passes follows it verbatim: neither evicted nor in the stored transcript
        evicted = [m for i, m in enumerate(plan.messages[body_start:cut_at], body_start) if i not in moved]
        summarized = cut.summarized(plan)
        rendered, transcript = self._render_evicted(plan, cut, body_start, context)
        span, chain = self._index.evicted_keys(
            None if plan.origin is None else plan.origin.chain, evicted, summarized
        )
        model = context.summarizer_model
        previous = cut.earlier.summary if plan.previous is not None else None
        task = first_user_text(plan.messages[:head])
        # Everything the summarizer reads is in the key (the original task too); the processor's cache view
        # adds the scope, so two tenants with the same evicted traffic never share a summary.
        fingerprint = self._settings_fingerprint(model, context)
        key = cache_key('compactor-summary', span, fingerprint, previous or '', focus or '', task or '')
        pins = cut.evicted_pins()
        return Evicted(
            cut_at, evicted, pins, rendered, chain, key, model, summarized, previous, focus, task, transcript
        )

    async def _remember(
        self,
        cache: SummaryCache,
        conversation: str,
        summary: Summary,
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
        self, cache: SummaryCache, conversation: str, plan: Plan, context: HistoryContext
    ) -> Plan | None:
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
            return Plan(
                messages, per_message, split_units(messages), head, head, Origin(length, record.chain)
            )
        return None

    def _render_evicted(
        self, plan: Plan, cut: Cut, body_start: int, context: HistoryContext
    ) -> tuple[list[TranscriptUnit] | None, list[TranscriptUnit] | None]:
        """Rendered once for the transcript and the summarizer where both read them whole; else Nones."""
        indices = [i for i in range(cut.body_first, cut.unit) if i != cut.question]
        units = [plan.units[i] for i in indices]
        if self.settings.result_view(context.limits) is not None or not units or units[0].start != body_start:
            return None, None
        each = render_each_unit(
            plan.messages,
            units,
            context.counter,
            tool_result_max_tokens=None,
            # the stored transcript is this text
            preamble=transcript_preamble(cut.previous_transcripts, cut.gone_transcripts),
        )
        return (
            [u for u in each if u is not None],
            [u for i, u in zip(indices, each, strict=True) if u is not None and i not in cut.pins],
        )

    async def _summary(self, request: Evicted, context: HistoryContext) -> Summary:
        settings, counter, cache, scope = self.settings, context.counter, context.cache, context.scope
        if cache is not None and (cached := await cache.get(request.key)):
            return Summary(cached, 'cache', 0, request.key)
        transcript = request.transcript
        if transcript is None:
            transcript = await context.off_loop(
                functools.partial(
                    summarizer_view,
                    request.summarized,
                    counter,
                    record_tokens=settings.result_view(context.limits),
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
        return Summary(outcome.text, 'llm', outcome.calls, request.key)

    def _fallback(
        self,
        request: Evicted,
        transcript: list[TranscriptUnit],
        counter: TokenCounter,
        calls: int,
        error: str,
    ) -> Summary:
        """Not cached (no key): a fallback stands only until the summarizer answers again."""
        cap, previous = self.settings.summary_max_tokens, request.previous
        if self.settings.fallback == 'digest':
            try:
                return Summary(digest(request.summarized, previous, counter, cap), 'digest', calls, '', error)
            except Exception:
                logger.exception('compactor: the digest failed; cutting the transcript instead')
        return Summary(head_tail_cut(transcript, previous, counter, cap), 'truncate', calls, '', error)

    def _settings_fingerprint(self, model: object, context: HistoryContext) -> str:
        s, summarizer = self.settings, context.summarizer
        return repr(
            (
                model_name_of(model),
                summarizer.model_settings,
                summarizer.instructions,
                s.summary_max_tokens,
                s.result_view(context.limits),
                s.summarizer_view_tokens,
            )
        )

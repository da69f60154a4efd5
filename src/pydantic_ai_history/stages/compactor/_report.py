"""What the compactor says of a compaction: its result event, span attributes and log line, the warnings a
result over the target or a lost transcript call for; and the per-scope breakers its calls go through."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage

from ...context._context import HistoryContext
from ...events import CompactionResult
from ...messages._clock import perf
from ._background import BackgroundSummaries
from ._breaker import ScopedBreakers
from ._compaction import Compaction, Outcome, Spilled, over_target_reason
from ._prefix_index import PrefixIndex
from ._settings import CompactionSettings

logger = logging.getLogger('pydantic_ai_history.compactor')


class CompactionReport:
    """What the compactor says of each compaction, and the breakers its calls go through: the base of
    `Compactor`'s parts, with the state they share."""

    if TYPE_CHECKING:
        settings: CompactionSettings
        _breakers: ScopedBreakers
        _index: PrefixIndex
        _background: BackgroundSummaries
        _refused: dict[str, str]
        _unsupported_warned: set[str]

    def _breakers_of(self, context: HistoryContext) -> ScopedBreakers:
        """In durable workflow code a fresh set that lets every call through: a replay must decide from the
        journal alone (remembered failures would open a breaker early); the engine's retries stand in."""
        if context.operations is None:
            return self._breakers
        settings = self.settings
        return ScopedBreakers(max_failures=settings.max_failures, cooldown=settings.cooldown_seconds)

    def _trail_budget(self, context: HistoryContext) -> int:
        return int(context.limits.target * self.settings.trail_share)

    def _conclude(
        self, context: HistoryContext, event: Compaction, outcome: Outcome, spilled: Spilled
    ) -> list[ModelMessage]:
        if spilled.lost:
            context.lost(
                'compactor',
                'transcript_not_stored',
                'the store failed and the history does not fit the context window without compaction; '
                'only the summary stands for them',
                outcome.lost,
            )
        target, after = context.limits.target, outcome.tokens
        why = over_target_reason(outcome, target)
        if why is not None:
            context.warn(
                'compaction_over_target',
                f'the compacted history is {after:,} tokens, over the target of {target:,}: {why}',
                tokens=after,
                target=target,
            )
        return self._finish(context, event, outcome)

    def _finish(
        self, context: HistoryContext, compaction: Compaction, outcome: Outcome
    ) -> list[ModelMessage]:
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
            over_target=over_target_reason(outcome, context.limits.target),
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

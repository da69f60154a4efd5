"""Provider-native compaction (`CompactionSettings.method`): the serving model's own compaction item in place
of the evicted messages, around our cut, pins and stored transcript; any failure falls back to our summary."""

from __future__ import annotations

import logging

from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse

from ..._compat import compaction_unavailable, is_compaction_response, request_compaction
from ...budget.model_info import model_name_of
from ...context._context import HistoryContext
from ...context._llm import add_usage
from ...messages.units import system_parts
from ...tokens import TokenCounter
from ._compaction import (
    Compaction,
    Cut,
    Outcome,
    Plan,
    Spilled,
    Summary,
    final_sections,
    keep_loads,
    summary_details,
)
from ._cutting import CutPlanning
from ._native import NATIVE_NOTE, NativeLayout, mark_compaction, native_layout
from ._summary_message import (
    build_summary_message,
    summary_text,
)

logger = logging.getLogger('pydantic_ai_history.compactor')


class ProviderCompaction(CutPlanning):
    """The serving model's own compaction in place of our summary: a part of `Compactor`."""

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

    async def _compact_natively(
        self, context: HistoryContext, event: Compaction
    ) -> list[ModelMessage] | None:
        """The serving model's own compaction around our cut, pins and spill; None falls back to our summary.
        The item is planned at the summary's cap; a larger one that ends over the target is not used."""
        model = self._native_model(context) if self.settings.method != 'llm' else None
        if model is None or not self._breakers_of(context).allows('provider', context.scope):
            return None
        messages = event.messages
        layout = native_layout(messages, event.units, keep_first_user_message=context.keep_first_user_message)
        if layout is None:
            return None
        plan = Plan(messages, list(event.per_message), event.units, layout.body_start, None)
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
        evicted = native_evicted(plan, cut, layout)
        spilled = await self._spill(plan, cut, evicted, context, event)
        if spilled is None:
            return messages
        summarized = cut.summarized(plan)
        response = await self._ask_provider(model, [*layout.sent, *summarized], context, event.focus)
        if response is None:
            return None
        outcome = native_outcome(plan, cut, layout, response, spilled, event, context.counter)
        if not self._native_fits(context, outcome, event.tokens):
            return None
        return self._conclude(context, event, outcome, spilled)

    def _native_fits(self, context: HistoryContext, outcome: Outcome, before: int) -> bool:
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


def native_evicted(plan: Plan, cut: Cut, layout: NativeLayout) -> list[ModelMessage]:
    """What the compaction item stands for: the body before the cut but the current run's question, which
    follows our note verbatim (as it follows our summary)."""
    question = cut.passed_question()
    moved = range(0) if question is None else range(plan.units[question].start, plan.units[question].end)
    cut_at = plan.units[cut.unit].start
    return [
        m
        for i, m in enumerate(plan.messages[layout.body_start : cut_at], layout.body_start)
        if i not in moved
    ]


def native_outcome(
    plan: Plan,
    cut: Cut,
    layout: NativeLayout,
    response: ModelResponse,
    spilled: Spilled,
    event: Compaction,
    counter: TokenCounter,
) -> Outcome:
    """The provider's compaction item in place of the evicted messages, then our note (pins, transcript)."""
    cut_at = plan.units[cut.unit].start
    evicted = native_evicted(plan, cut, layout)
    question = cut.question_messages(plan)
    pins = cut.evicted_pins()
    final = final_sections(NATIVE_NOTE, layout.earlier, spilled, pins, gone=cut.gone_transcripts)
    note = build_summary_message(
        final, details=summary_details('provider', evicted, pins, None), system_parts=system_parts(evicted)
    )
    marked = mark_compaction(response, {'evicted_messages': len(evicted)})
    # its counted text or its output tokens, the larger: an encrypted item has no text to count
    item = max(counter.count_message(response), response.usage.output_tokens)
    result = [*layout.standing, marked, *layout.after_item, note, *question, *plan.messages[cut_at:]]
    # pydantic-ai reads loads only after the compaction item: those before it are recorded after the note
    result, reloaded = keep_loads(
        event.messages, result, len(layout.standing) + len(layout.after_item) + 2, counter
    )
    after = (
        event.overhead
        + counter.count_messages(layout.kept)
        + item
        + counter.count_message(note)
        + reloaded
        + counter.count_messages(question)
        + sum(plan.per_message[cut_at:])
    )
    summary = Summary(summary_text(note) or NATIVE_NOTE, 'provider', 1, '')
    lost = cut.summarized(plan)
    return Outcome(result, after, summary, len(evicted), pinned=len(pins), replacement=item, lost=lost)

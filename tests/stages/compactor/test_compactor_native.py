"""The compactor with `method='provider'` alone: layout, pins, previous summaries, refusals, accounting."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from _compaction import SYSTEM, TASK, context, text, tool_loop
from _history import call, result
from _native import ResponsesLikeProvider, compacting_model, leading_compaction
from pydantic_ai_history import (
    CompactionResult,
    CompactionSettings,
    Compactor,
    ContextPolicy,
    HistoryWarning,
    assert_valid_history,
    validate_history,
)
from pydantic_ai_history._compat import (
    COMPACTION_REQUEST_PART,
    compaction_unavailable,
    is_compaction_response,
    make_request,
)
from pydantic_ai_history.budget.model_info import ModelInfo
from pydantic_ai_history.messages._marks import marker_kind
from pydantic_ai_history.messages.pinning import pin
from pydantic_ai_history.stages.compactor import PINNED_HEADING, summary_sections
from pydantic_ai_history.store import MemoryStore
from pydantic_ai_history.tokens import TokenCounter

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        COMPACTION_REQUEST_PART is None,
        reason='pydantic-ai 1.x has no provider-native compaction for the compactor (2.x only); the fallback '
        'is tested in tests/e2e/test_native_compaction_e2e.py on every version',
    ),
]

LIMITS = ContextPolicy(context_window=64_000, max_tokens=12_000, target_tokens=6_000).resolve(
    ModelInfo('openai:gpt-4o', None, 'unknown')
)


def compactor(**settings: Any) -> Compactor:
    return Compactor(CompactionSettings(method='provider', summary_max_tokens=500, **NO_STUBS, **settings))


NO_STUBS: dict[str, Any] = {'stub_tool_results': False}
"""These tests are about the provider's compaction: the cheap tier that comes first is kept out of the way
(see `test_the_cheap_tier_comes_before_the_providers_compaction`)."""


def native_context(model: Any, **kwargs: Any) -> tuple[Any, list[Any]]:
    kwargs.setdefault('store', MemoryStore())
    return context(model=model, limits=LIMITS, **kwargs)


def methods(events: list[Any]) -> list[str]:
    return [e.method for e in events if isinstance(e, CompactionResult)]


def codes(events: list[Any]) -> list[str]:
    return [e.code for e in events if isinstance(e, HistoryWarning)]


async def test_the_item_comes_first_and_the_task_and_pins_after_it() -> None:
    provider = ResponsesLikeProvider(steps=0)
    history: list[ModelMessage] = tool_loop(20, 900)
    history[5] = pin(history[5])  # a tool return, pinned: its unit is carried verbatim
    ctx, events = native_context(compacting_model(provider))

    out = await compactor()(history, ctx)

    assert methods(events) == ['provider']
    assert_valid_history(out)
    assert isinstance(out[0], ModelRequest)
    assert [type(p).__name__ for p in out[0].parts] == ['SystemPromptPart']
    assert is_compaction_response(out[1])
    task = out[2]
    assert isinstance(task, ModelRequest)
    assert task.parts == [p for p in history[0].parts if p.part_kind != 'system-prompt']
    note = summary_sections(out[3])
    assert note is not None
    assert 'STEP-002' in note.pinned
    assert 'read_artifact' in note.reference
    assert out[-1] is history[-1]
    # the provider compacted the head and what was evicted, not the pinned unit
    sent = provider.compactions[0]
    assert sent[0] is history[0]
    assert all(m is not history[5] for m in sent)
    tokens_after = next(e for e in events if isinstance(e, CompactionResult)).tokens_after
    assert tokens_after <= LIMITS.target
    # the adapter drops what is before the item: the task and the pins are still sent
    wire = compacting_model(provider)._trim_before_compaction(out)  # pyright: ignore[reportPrivateUsage]
    rest, items = leading_compaction(wire)
    assert len(items) == 1
    assert any(isinstance(p, UserPromptPart) and p.content == TASK for m in rest for p in m.parts)
    assert any(PINNED_HEADING in str(getattr(p, 'content', '')) for m in rest for p in m.parts)


async def test_a_second_compaction_replaces_the_first_and_carries_the_pins_on() -> None:
    provider = ResponsesLikeProvider(steps=0)
    history: list[ModelMessage] = tool_loop(20, 900)
    history[5] = pin(history[5])
    ctx, events = native_context(compacting_model(provider))
    stage = compactor()
    first = await stage(history, ctx)
    grown = [*first]
    for i in range(20, 34):
        grown += [call('fetch', f'm{i}', {'page': i}), result('fetch', f'm{i}', text(900, f'MORE-{i:03d}'))]

    second = await stage(grown, ctx)

    assert methods(events) == ['provider', 'provider']
    assert_valid_history(second)
    assert sum(is_compaction_response(m) for m in second) == 1
    assert sum(marker_kind(m) == 'summary' for m in second) == 1
    note = summary_sections(second[3])
    assert note is not None
    assert 'STEP-002' in note.pinned
    assert 'its first line names the transcript of earlier messages' in note.reference
    # the provider re-compacted its own previous item with the newly evicted messages
    assert provider.compactions[1][1] == first[1]
    assert second[2] is first[2]  # the task request is carried as it was


async def test_a_previous_llm_summary_is_compacted_with_the_rest() -> None:
    provider = ResponsesLikeProvider(steps=0)
    history: list[ModelMessage] = tool_loop(20, 900)
    history[5] = pin(history[5])
    llm_ctx, _ = context(limits=LIMITS, store=MemoryStore(), summarizer=_summarizer_settings())
    summarized = await Compactor(CompactionSettings(summary_max_tokens=500, **NO_STUBS))(history, llm_ctx)
    assert marker_kind(summarized[1]) == 'summary'
    grown = [*summarized]
    for i in range(20, 34):
        grown += [call('fetch', f'm{i}', {'page': i}), result('fetch', f'm{i}', text(900, f'MORE-{i:03d}'))]
    ctx, events = native_context(compacting_model(provider))

    out = await compactor()(grown, ctx)

    assert methods(events) == ['provider']
    assert summarized[1] in provider.compactions[0]
    note = summary_sections(out[3])
    assert note is not None
    assert 'STEP-002' in note.pinned
    assert sum(marker_kind(m) == 'summary' for m in out) == 1


def _summarizer_settings() -> Any:
    from pydantic_ai_history import SummarizerSettings

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('The pages were fetched.')])

    return SummarizerSettings(model=FunctionModel(respond, model_name='summarizer'))


@pytest.mark.parametrize('error', [NotImplementedError, 'user'])
async def test_a_model_that_refuses_is_asked_once(error: Any) -> None:
    from pydantic_ai.exceptions import UserError

    asked: list[int] = []

    class Refusing(FunctionModel):
        async def compact_messages(self, request_context: Any, *, instructions: str | None = None) -> Any:
            asked.append(1)
            raise (UserError('does not support on-demand compaction') if error == 'user' else error('no'))

    model = Refusing(lambda m, i: ModelResponse(parts=[TextPart('x')]), model_name='claude-like')
    ctx, events = native_context(model, summarizer=_summarizer_settings())
    stage = compactor()

    await stage(tool_loop(20, 900), ctx)
    await stage(tool_loop(22, 900, tag='again'), ctx)

    assert asked == [1]
    assert methods(events) == ['llm', 'llm']
    assert codes(events).count('provider_compaction_unsupported') == 1


def test_only_the_durable_model_is_asked_inside_a_durable_run() -> None:
    provider = ResponsesLikeProvider(steps=0)
    model = compacting_model(provider)
    assert compaction_unavailable(model, journaled=False) is None
    assert 'durable' in (compaction_unavailable(model, journaled=True) or '')
    assert 'does not implement' in (
        compaction_unavailable(FunctionModel(lambda m, i: ModelResponse(parts=[])), journaled=False) or ''
    )
    from pydantic_ai.durable_exec._utils import DurableModel

    async def never(*args: Any) -> Any:
        raise AssertionError('not called')

    durable = DurableModel(
        model,
        request_segment=never,
        request_stream_segment=never,
        compact_messages_segment=never,
        cancel_suspended_response_segment=never,
    )
    assert compaction_unavailable(durable, journaled=True) is None


async def test_a_durable_run_compacts_through_its_durable_model_only() -> None:
    from pydantic_ai.durable_exec._utils import DurableModel

    provider = ResponsesLikeProvider(steps=0)
    model = compacting_model(provider)
    journaled: list[str] = []

    async def never(*args: Any) -> Any:
        raise AssertionError('not called')

    async def compact_segment(request_context: Any, instructions: str | None) -> ModelResponse:
        journaled.append('compact_messages')  # where a durability capability runs its journaled operation
        return await model.compact_messages(request_context, instructions=instructions)

    durable = DurableModel(
        model,
        request_segment=never,
        request_stream_segment=never,
        compact_messages_segment=compact_segment,
        cancel_suspended_response_segment=never,
    )
    operations: Any = object()  # a journaled run: the processor's operations are bound (here, none work)

    ctx, events = native_context(model, operations=operations)
    await compactor()(tool_loop(20, 900), ctx)
    assert provider.compactions == []  # the run's own model is not journaled: never asked
    assert 'provider_compaction_unsupported' in codes(events)
    assert 'provider' not in methods(events)

    ctx, events = native_context(model, operations=operations, serving_model=durable)
    out = await compactor()(tool_loop(20, 900), ctx)

    assert journaled == ['compact_messages']
    assert methods(events) == ['provider']
    assert is_compaction_response(out[1])


def _compaction_response(input_tokens: int, output_tokens: int) -> ModelResponse:
    from pydantic_ai.messages import CompactionPart

    details = {'encrypted_content': 'x'}
    part = CompactionPart(content=None, id='cmp_1', provider_name='openai', provider_details=details)
    return ModelResponse(
        parts=[part],
        usage=RequestUsage(input_tokens=input_tokens, output_tokens=output_tokens),
        provider_name='openai',
    )


def test_a_compaction_response_is_no_anchor_and_costs_its_output() -> None:
    counter = TokenCounter('gpt-4o')
    item = _compaction_response(input_tokens=90_000, output_tokens=700)
    history = [ModelRequest(parts=[UserPromptPart('hi')]), item, ModelRequest(parts=[UserPromptPart('on')])]
    counter.mark_sent(history)

    estimate = counter.estimate(history)

    assert counter.count_message(item) == 700
    assert estimate.anchor_index is None  # the 90,000 it measured are the conversation it replaced
    assert estimate.total < 2_000


def test_a_history_may_open_with_a_compaction_response_but_not_another_response() -> None:
    item = _compaction_response(input_tokens=1_000, output_tokens=100)
    tail = ModelRequest(parts=[UserPromptPart('go on')])
    assert validate_history([item, tail]) == []
    assert [v.code for v in validate_history([ModelResponse(parts=[TextPart('hi')]), tail])] == [
        'starts_with_response'
    ]


async def test_without_the_first_user_message_nothing_follows_the_item_but_the_note() -> None:
    provider = ResponsesLikeProvider(steps=0)
    ctx, events = native_context(compacting_model(provider), keep_first_user_message=False)
    loop = tool_loop(20, 900)
    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart(SYSTEM)]),
        ModelRequest(parts=[UserPromptPart(TASK)]),
        *loop[1:],
    ]

    out = await compactor()(history, ctx)

    assert methods(events) == ['provider']
    assert out[0] == history[0]
    assert is_compaction_response(out[1])
    assert marker_kind(out[2]) == 'summary'
    assert history[1] in provider.compactions[0]  # the task was compacted with the rest
    assert_valid_history(out)


async def test_auto_compacts_with_the_provider_where_it_can_and_says_nothing_where_it_cannot() -> None:
    provider = ResponsesLikeProvider(steps=0)
    ctx, events = native_context(compacting_model(provider))
    await Compactor(CompactionSettings(method='auto', summary_max_tokens=500, **NO_STUBS))(
        tool_loop(20, 900), ctx
    )
    assert methods(events) == ['provider']

    plain = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('x')]), model_name='plain')
    ctx, events = native_context(plain, summarizer=_summarizer_settings())
    await Compactor(CompactionSettings(method='auto', summary_max_tokens=500, **NO_STUBS))(
        tool_loop(20, 900), ctx
    )
    assert methods(events) == ['llm']
    assert codes(events) == []


async def test_without_a_system_prompt_the_history_opens_with_the_item() -> None:
    provider = ResponsesLikeProvider(steps=0)
    ctx, events = native_context(compacting_model(provider))
    history = [ModelRequest(parts=[UserPromptPart(TASK)]), *tool_loop(20, 900)[1:]]

    out = await compactor()(history, ctx)

    assert methods(events) == ['provider']
    assert is_compaction_response(out[0])
    assert out[1].parts == history[0].parts
    assert_valid_history(out)  # pydantic-ai's adapters send a compaction item first (OpenAICompaction does)


async def test_a_failing_provider_cools_down_like_the_summarizer() -> None:
    clock = [0.0]
    provider = ResponsesLikeProvider(steps=0, fail=True)
    ctx, events = native_context(compacting_model(provider), summarizer=_summarizer_settings())
    settings = CompactionSettings(
        method='provider',
        summary_max_tokens=500,
        max_failures=2,
        cooldown_seconds=60,
        clock=lambda: clock[0],
        **NO_STUBS,
    )
    stage = Compactor(settings)

    for round_ in range(4):
        await stage(tool_loop(20, 900, tag=f'r{round_}'), ctx)
    assert len(provider.compactions) == 2  # asked twice, then cooling down
    assert methods(events) == ['llm'] * 4
    assert codes(events).count('provider_compaction_failed') == 2

    clock[0] = 61.0
    provider.fail = False
    await stage(tool_loop(20, 900, tag='later'), ctx)
    assert methods(events)[-1] == 'provider'


async def test_the_cheap_tier_comes_before_the_providers_compaction() -> None:
    """Old tool outputs are stubbed into the store first; the provider is asked only when that falls short."""
    provider = ResponsesLikeProvider(steps=0)
    ctx, events = native_context(compacting_model(provider))
    history = tool_loop(20, 900)
    out = await Compactor(CompactionSettings(method='provider', summary_max_tokens=500))(history, ctx)
    assert methods(events) == ['stubs']
    assert provider.compactions == []
    assert len(out) == len(history)
    assert_valid_history(out, original=history)


async def test_the_runs_question_follows_the_note_verbatim_and_is_not_compacted() -> None:
    provider = ResponsesLikeProvider(steps=0)
    question = make_request(
        [UserPromptPart('Turn 2: which migrated tables still lack an index?')], run_id='run-2'
    )
    history: list[ModelMessage] = [*tool_loop(6, 900, tag='old'), question]
    for i in range(14):
        history += [
            call('fetch', f'now{i}', {'page': i}),
            result('fetch', f'now{i}', text(900, f'NOW-{i:03d}')),
        ]
    ctx, events = native_context(compacting_model(provider), run_id='run-2')

    out = await compactor()(history, ctx)

    assert methods(events) == ['provider']
    assert_valid_history(out, original=history)
    at = next(i for i, m in enumerate(out) if m is question)  # the same object: verbatim
    assert marker_kind(out[at - 1]) == 'summary', 'the question follows our note'
    assert is_compaction_response(out[1])
    assert at > 1, 'the question comes after the compaction item'
    assert all(m is not question for m in provider.compactions[0]), 'the provider compacted the question'
    # the adapter drops what is before the item: the question is still sent
    wire = compacting_model(provider)._trim_before_compaction(out)  # pyright: ignore[reportPrivateUsage]
    assert any(m is question for m in wire)
    result_event = next(e for e in events if isinstance(e, CompactionResult))
    assert result_event.tokens_after <= LIMITS.target

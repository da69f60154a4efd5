"""The compactor's core: trigger and target, the verbatim tail, the preserved head, the summary message."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RunUsage

from _compaction import (
    HAS_MESSAGE_METADATA,
    SYSTEM,
    TASK,
    SetupCompactor,
    StubSummarizer,
    compaction_setup,
    context,
    prompt_block,
    text,
    tool_loop,
)
from _history import call, is_suffix_by_identity, reply, result, system_user, user
from pydantic_ai_history import (
    CompactionResult,
    HistoryWarning,
    assert_valid_history,
)
from pydantic_ai_history._compat import COMPACTION_PART, COMPACTION_REQUEST_PART
from pydantic_ai_history.context._context import HistoryContext
from pydantic_ai_history.messages._marks import MARKER_KEY, OPENINGS, marker_kind, sealed_kind
from pydantic_ai_history.messages.units import split_units
from pydantic_ai_history.stages._transcript import named_transcripts
from pydantic_ai_history.stages.compactor import CompactionSettings, summary_text
from pydantic_ai_history.store import MemoryStore

pytestmark = pytest.mark.anyio


async def compact(
    messages: list[ModelMessage], settings: CompactionSettings, **kwargs: Any
) -> tuple[list[ModelMessage], list[CompactionResult], HistoryContext]:
    ctx, events = context(**kwargs)
    before = copy.deepcopy(messages)
    out = await SetupCompactor(settings)(messages, ctx)
    assert messages == before, 'the input was mutated'
    assert_valid_history(out, original=messages)
    return out, [e for e in events if isinstance(e, CompactionResult)], ctx


def settings(stub: StubSummarizer, **kwargs: Any) -> CompactionSettings:
    kwargs.setdefault('max_tokens', 20_000)
    kwargs.setdefault('target_tokens', 8_000)
    # these tests are about the summary: the cheap tier that comes first has its own (test_compactor_stubs.py)
    kwargs.setdefault('stub_tool_results', False)
    return compaction_setup(summarizer_model=stub.model(), **kwargs)


async def test_below_the_trigger_the_input_is_returned_as_is():
    stub = StubSummarizer()
    messages = tool_loop(10)
    out, events, _ = await compact(messages, settings(stub))
    assert out is messages
    assert events == []
    assert stub.calls == 0


async def test_over_the_trigger_head_summary_and_a_fitting_contiguous_tail():
    stub = StubSummarizer()
    messages = tool_loop(40)  # about 41K tokens
    cfg = settings(stub)
    out, events, ctx = await compact(messages, cfg)
    assert out[0] is messages[0], 'system prompt and first user message kept verbatim'
    assert marker_kind(out[1]) == 'summary'
    assert 'summary number 1' in (summary_text(out[1]) or '')
    tail = out[2:]
    assert is_suffix_by_identity(tail, messages)
    assert tail[-2:] == messages[-2:], 'the current request and the call it answers stay'
    counter = ctx.counter
    assert counter.count_messages(out) <= 8_000
    # the sliding-window stop rule: the unit before the tail did not fit what the target left for it (the
    # summary with its trail aside), nor the quarter of the target an event at the trigger keeps verbatim
    left = 8_000 - counter.count_message(messages[0]) - cfg.summary_max_tokens - 40 - int(8_000 * 0.1)
    budget = min(left, 8_000 // 4)
    units = split_units(messages)
    first_kept = next(i for i, u in enumerate(units) if messages[u.start] is tail[0])
    before = units[first_kept - 1]
    assert counter.count_messages(tail) + counter.count_messages(messages[before.start : before.end]) > budget
    [event] = events
    assert (event.reason, event.method, event.summarizer_calls, event.error) == ('trigger', 'llm', 1, None)
    assert event.messages_before == len(messages)
    assert event.messages_after == len(out)
    assert event.evicted_messages == len(messages) - 1 - len(tail)
    assert event.tokens_before > 20_000 >= 8_000 >= event.tokens_after == ctx.estimate(out).total


async def test_the_summary_message_per_version():
    stub = StubSummarizer()
    out, _, _ = await compact(tool_loop(40), settings(stub))
    message = out[1]
    assert isinstance(message, ModelRequest)
    assert not any(isinstance(p, SystemPromptPart) for p in message.parts), (
        'never a system prompt mid-history'
    )
    assert marker_kind(message) == 'summary'
    part, trail = message.parts  # the summarizer's text, and the trail of exact details the code writes
    if COMPACTION_REQUEST_PART is not None:  # 2.x: the official request-side summary part
        assert isinstance(part, COMPACTION_REQUEST_PART)
        assert part.content.startswith('## Goal and constraints')
        assert part.provider_name is None
    else:  # 1.x (late 1.x has CompactionPart only as a response part)
        assert isinstance(part, UserPromptPart)
        assert part.content.startswith(OPENINGS['summary'] + '\n## Goal and constraints')
        if COMPACTION_PART is not None:
            assert not isinstance(part, COMPACTION_PART)
    assert isinstance(trail, UserPromptPart)
    assert isinstance(trail.content, str)
    assert sealed_kind(trail.content) is not None
    assert 'STEP-000' in trail.content, 'the exact ids of the summarized results'
    if HAS_MESSAGE_METADATA:
        ours = message.metadata[MARKER_KEY]  # type: ignore[attr-defined]
        assert ours['kind'] == 'summary'
        assert ours['evicted_messages'] > 0
        assert ours['parts'] == ['summary', 'trail']
        assert ['identifier', 'STEP-000'] in [e[:2] for e in ours['trail']], (
            'the trail is data, not only text'
        )


async def test_an_unfinished_tool_round_stays_verbatim_even_when_it_is_over_the_target():
    stub = StubSummarizer()
    messages = tool_loop(30)
    messages += [
        ModelResponse(
            parts=[TextPart('Fetching both.'), ToolCallPart('fetch', {'page': 'a'}, tool_call_id='a')]
        ),
        ModelRequest(parts=[ToolReturnPart('fetch', text(9_000, 'BIG'), 'a')]),
    ]
    out, events, ctx = await compact(messages, settings(stub))
    assert out[-2:] == messages[-2:]
    assert out[-2] is messages[-2]
    assert out[-1] is messages[-1]
    assert len(out) == 4, 'everything between the head and the last unit was summarized'
    assert events[0].tokens_after == ctx.estimate(out).total > 8_000


async def test_over_target_warning_is_emitted():
    stub = StubSummarizer()
    messages = [*tool_loop(25), call('fetch', 'big', {}), result('fetch', 'big', text(12_000, 'BIG'))]
    ctx, events = context()
    out = await SetupCompactor(settings(stub))(messages, ctx)
    assert_valid_history(out, original=messages)
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['compaction_over_target']


async def test_signed_thinking_responses_are_kept_whole_or_dropped_whole():
    stub = StubSummarizer()
    messages: list[ModelMessage] = [system_user(SYSTEM, TASK)]
    for i in range(40):
        messages.append(
            ModelResponse(
                parts=[
                    ThinkingPart(f'thinking about page {i}', signature=f'sig-{i}'),
                    ToolCallPart('fetch', {'page': i}, tool_call_id=f't{i}'),
                ]
            )
        )
        messages.append(result('fetch', f't{i}', text(1_000, f'PAGE-{i}')))
    out, events, _ = await compact(messages, settings(stub))
    assert events
    assert events[0].method == 'llm'
    kept = [m for m in out if isinstance(m, ModelResponse)]
    assert kept
    assert all(any(m is o for o in messages) for m in kept), 'kept responses are the very same objects'
    assert 'thinking about page' not in stub.prompts[0], 'thinking is not sent to the summarizer'


async def test_usage_of_the_summarizer_is_added_to_the_run_usage():
    stub = StubSummarizer(input_tokens=1_234, output_tokens=56)
    usage = RunUsage(requests=3, input_tokens=10_000, output_tokens=500)
    await compact(tool_loop(40), settings(stub), usage=usage)
    assert (usage.requests, usage.input_tokens, usage.output_tokens) == (4, 11_234, 556)


async def test_manual_compaction_with_focus_below_the_trigger():
    stub = StubSummarizer()
    messages = tool_loop(3)  # everything fits the target: all units but the last are summarized
    ctx, events = context()
    compactor = SetupCompactor(settings(stub))
    assert await compactor(messages, ctx) is messages
    out = await compactor.compact_history(messages, ctx, focus='the replica cut-over date')
    assert_valid_history(out, original=messages)
    assert [marker_kind(m) for m in out] == [None, 'summary', None, None]
    assert out[-2:] == messages[-2:]
    assert 'Give the most room to: the replica cut-over date' in stub.prompts[0]
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.reason == 'manual'
    assert event.method == 'llm'


async def test_manual_compaction_evicts_down_to_the_target():
    stub = StubSummarizer()
    messages = tool_loop(12)  # about 12K tokens: below the 20K trigger, above the 8K target
    ctx, _ = context()
    out = await SetupCompactor(settings(stub)).compact_history(messages, ctx)
    assert_valid_history(out, original=messages)
    assert 4 < len(out) < len(messages)
    assert ctx.estimate(out).total <= 8_000
    assert is_suffix_by_identity(out[2:], messages)


async def test_on_compaction_callback_receives_the_event():
    stub = StubSummarizer()
    seen: list[CompactionResult] = []
    out, events, _ = await compact(tool_loop(40), settings(stub, on_compaction=seen.append))
    assert seen == events
    assert len(seen) == 1
    assert seen[0].summary in (summary_text(out[1]) or '')


async def test_previous_summary_survives_two_compactions_and_is_updated_not_resummarized():
    facts = {1: 'FACT-ALPHA: the replica is db-7', 2: 'FACT-BETA: cut-over moved to Thursday'}

    def behaviour(prompt: str, number: int) -> str:
        carried = '\n'.join(f for f in facts.values() if f in prompt)
        return f'## Goal and constraints\n{TASK}\n## Decisions\n{facts[number]}\n{carried}'

    stub = StubSummarizer(behaviour)
    cfg = settings(stub)
    ctx, events = context()
    compactor = SetupCompactor(cfg)
    first = await compactor(tool_loop(40), ctx)
    grown = list(first)
    for i in range(40, 70):
        grown += [
            call('fetch', f'step{i}', {'page': i}),
            result('fetch', f'step{i}', text(1_000, f'STEP-{i:03d}')),
        ]
    second = await compactor(grown, ctx)
    assert_valid_history(second, original=grown)
    assert stub.calls == 2
    previous = prompt_block(stub.prompts[1], 'previous_summary')
    assert facts[1] in previous, (
        'the first summary reached the second summarizer call as the previous summary'
    )
    transcript = prompt_block(stub.prompts[1], 'messages')
    assert 'summary number' not in transcript
    assert facts[1] not in transcript
    assert sum(1 for m in second if marker_kind(m) == 'summary') == 1
    final = summary_text(second[1]) or ''
    assert facts[1] in final
    assert facts[2] in final
    assert second[0] is first[0]
    assert TASK in prompt_block(stub.prompts[1], 'original_task')
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['llm', 'llm']


async def test_default_and_custom_instructions():
    from pydantic_ai_history.stages.compactor import DEFAULT_INSTRUCTIONS, SECTIONS

    stub = StubSummarizer()
    await compact(tool_loop(40), settings(stub))
    assert stub.instructions[0] == DEFAULT_INSTRUCTIONS
    assert all(f'## {s}' in DEFAULT_INSTRUCTIONS for s in SECTIONS)
    custom = StubSummarizer()
    await compact(tool_loop(40), settings(custom, summarizer_instructions='Summarize like a pirate.'))
    assert custom.instructions[0] == 'Summarize like a pirate.'


async def test_the_summarizer_defaults_to_the_run_model():
    stub = StubSummarizer()
    out, events, _ = await compact(
        tool_loop(40), compaction_setup(max_tokens=20_000, target_tokens=8_000), model=stub.model()
    )
    assert stub.calls == 1
    assert events[0].method == 'llm'
    del out


async def test_no_model_at_all_falls_back_to_the_digest():
    out, events, _ = await compact(tool_loop(40), compaction_setup(max_tokens=20_000, target_tokens=8_000))
    assert events[0].method == 'digest'
    assert 'no summarizer model' in (events[0].error or '')
    assert 'Automatic digest' in (summary_text(out[1]) or '')


async def test_tool_results_are_shown_as_their_beginning_and_the_passages_relevant_to_the_task():
    stub = StubSummarizer()
    filler = 'alpha beta gamma delta ' * 100 + '\n\n'
    big = (
        'HEAD-OF-RESULT\n'
        + filler * 10
        + 'The billing database moves to Postgres 16 on host pg-billing-7.\n\n'
        + filler * 10
        + 'TAIL-OF-RESULT'
    )
    messages = [
        system_user(SYSTEM, TASK),
        call('fetch', 'x', {}),
        result('fetch', 'x', big),
        *tool_loop(30)[1:],
    ]
    store = MemoryStore()
    out, _, ctx = await compact(messages, settings(stub, tool_result_max_tokens=500), store=store)
    prompt = stub.prompts[0]
    assert 'HEAD-OF-RESULT' in prompt
    assert 'pg-billing-7' in prompt, 'the passage about the task, from the middle of the result'
    assert 'TAIL-OF-RESULT' not in prompt
    assert 'tokens in all (stored whole)' in prompt
    assert 0 < prompt.count('alpha beta gamma delta') < 200
    assert prompt_block(prompt, 'original_task') == TASK
    # the summarizer read a part; the store keeps the whole, tail included
    [reference] = named_transcripts(summary_text(out[1]) or '')
    stored = await store.get(reference, scope=ctx.scope)
    assert stored is not None
    assert b'TAIL-OF-RESULT' in stored


@pytest.mark.parametrize(
    ('window', 'expected'),
    [
        (None, (120_000, 40_000)),
        (1_000_000, (120_000, 40_000)),
        (128_000, (101_580, 33_860)),
        (20_000, (15_180, 5_060)),
    ],
)
def test_limits_from_the_context_window(window: int | None, expected: tuple[int, int]):
    limits = compaction_setup().resolve(window)
    assert (limits.trigger, limits.target) == expected


def test_explicit_limits_win_and_must_be_ordered():
    setup = compaction_setup(max_tokens=16_000, target_tokens=6_000)
    assert (setup.resolve(40_000).trigger, setup.resolve(40_000).target) == (16_000, 6_000)
    # never above the budget (8,000 less the 1,024 reserve): clamped, and the limits say so
    limits = setup.resolve(8_000)
    assert (limits.trigger, limits.target) == (6_976, 6_000)
    assert limits.adjustments == (
        "ContextPolicy.max_tokens=16,000 is above the budget of 6,976 tokens for 'openai:gpt-4o' "
        '(8,000-token window, override), so compaction would never start: using max_tokens=6,976',
    )
    with pytest.raises(ValueError, match=r'target_tokens \(10,000\) must be below'):
        compaction_setup(max_tokens=10_000, target_tokens=10_000)


async def test_a_history_ending_mid_turn_after_user_reply():
    stub = StubSummarizer()
    messages = [*tool_loop(40), reply('Done with the pages.'), user('Now write the report.')]
    out, events, _ = await compact(messages, settings(stub))
    assert out[-1] is messages[-1]
    assert events[0].method == 'llm'


@pytest.mark.parametrize(
    ('max_tokens', 'target_tokens', 'window', 'expected'),
    [
        # the target follows the trigger, wherever the trigger came from: min(40,000, trigger / 3)
        (None, None, None, (120_000, 40_000)),
        (None, None, 128_000, (101_580, 33_860)),
        (50_000, None, None, (50_000, 16_666)),
        (50_000, None, 128_000, (50_000, 16_666)),
        (50_000, None, 1_000_000, (50_000, 16_666)),
        (300_000, None, None, (300_000, 40_000)),
        (300_000, None, 1_000_000, (300_000, 40_000)),
        # an explicit target below the trigger is kept as it is
        (50_000, 30_000, None, (50_000, 30_000)),
        # a trigger above the budget (the window less the 1,024 reserve) is clamped to it
        (50_000, 30_000, 32_000, (30_976, 30_000)),
        (None, 20_000, 128_000, (101_580, 20_000)),
        # ... and one the budget's trigger undercuts falls back to the default rule, not to trigger - 1
        (None, 50_000, 32_000, (24_780, 8_260)),
    ],
)
def test_the_default_target_depends_on_the_trigger_alone(
    max_tokens: int | None, target_tokens: int | None, window: int | None, expected: tuple[int, int]
):
    limits = compaction_setup(max_tokens=max_tokens, target_tokens=target_tokens).resolve(window)
    assert (limits.trigger, limits.target) == expected

"""An evicted span over the summarizer's input cap is summarized in chunks: all regions seen, none cut off."""

from __future__ import annotations

import re

import pytest
from pydantic_ai.messages import ModelMessage

from _compaction import SYSTEM, TASK, SetupCompactor, StubSummarizer, compaction_setup, context
from _history import call, result, system_user
from pydantic_ai_history import CompactionResult, TokenCounter, assert_valid_history
from pydantic_ai_history.stages.compactor import summary_text

pytestmark = pytest.mark.anyio

VOCABULARY = 'ledger invoice refund account balance tenant schema replica migration index vacuum '


def big_history(regions: int, units_per_region: int, tokens_per_unit: int) -> list[ModelMessage]:
    """A tool loop in which every tool result carries its region's unique token."""
    messages: list[ModelMessage] = [system_user(SYSTEM, TASK)]
    body = VOCABULARY * (tokens_per_unit // 11)
    for region in range(regions):
        for i in range(units_per_region):
            call_id = f'r{region}u{i}'
            messages.append(call('query', call_id, {'region': region, 'i': i}))
            messages.append(result('query', call_id, f'REGION{region:03d}MARK {body}'))
    return messages


WHOLE_VIEW: dict[str, object] = {
    'tool_result_max_tokens': None,
    'summarizer_view_tokens': None,
    'stub_tool_results': False,
}
"""The summarizer sees every token it replaces (no bounded view, no stubs first): what chunking is for."""


async def test_a_400k_token_evicted_span_is_summarized_in_chunks_that_cover_every_region():
    def behaviour(prompt: str, number: int) -> str:
        seen = sorted(set(re.findall(r'REGION\d{3}MARK', prompt)))
        return f'## Current state\nchunk {number} saw {len(seen)} regions; running summary kept'

    stub = StubSummarizer(behaviour)
    messages = big_history(regions=40, units_per_region=10, tokens_per_unit=1_050)  # about 430K tokens
    ctx, events = context()
    assert ctx.estimate(messages).total > 420_000
    out = await SetupCompactor(compaction_setup(summarizer_model=stub.model(), **WHOLE_VIEW))(
        messages, ctx
    )  # defaults: 120K/40K
    assert_valid_history(out, original=messages)
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.method == 'llm'
    assert event.summarizer_calls == stub.calls >= 3
    evicted_units = event.evicted_messages // 2
    evicted_regions = {f'REGION{j // 10:03d}MARK' for j in range(evicted_units)}
    seen = [set(re.findall(r'REGION\d{3}MARK', p)) for p in stub.prompts]
    assert set().union(*seen) == evicted_regions
    assert len(evicted_regions) > 30
    every_unit = [re.findall(r'"i":\d+', p) for p in stub.prompts]
    assert sum(len(x) for x in every_unit) == evicted_units, 'every evicted unit went to exactly one chunk'
    counter = TokenCounter('gpt-4o')
    assert all(counter.count_text(p) <= 180_000 for p in stub.prompts), 'each call stays inside the input cap'
    for number in range(1, stub.calls):  # each chunk updates the summary written from the chunks before it
        assert f'chunk {number} saw' in stub.prompts[number].split('</previous_summary>')[0]
        assert f'part="{number + 1} of {stub.calls}"' in stub.prompts[number]
    assert f'chunk {stub.calls} saw' in (summary_text(out[1]) or '')
    assert ctx.estimate(out).total <= 40_000


async def test_a_small_summarizer_window_lowers_the_input_cap():
    stub = StubSummarizer()
    messages = big_history(regions=4, units_per_region=10, tokens_per_unit=1_050)  # about 43K tokens
    ctx, _ = context()
    settings = compaction_setup(
        max_tokens=20_000,
        target_tokens=8_000,
        summarizer_model=stub.model(),
        summarizer_input_tokens=12_000,
        **WHOLE_VIEW,
    )
    out = await SetupCompactor(settings)(messages, ctx)
    assert_valid_history(out, original=messages)
    assert stub.calls >= 3
    assert all(TokenCounter('gpt-4o').count_text(p) <= 12_000 for p in stub.prompts)


async def test_a_tool_result_larger_than_a_summarizer_request_is_seen_whole_across_calls():
    """Nothing the summary replaces is cut: one 300K-token tool result goes to the summarizer in pieces."""
    stub = StubSummarizer()
    words = [f'w{i:06d}' for i in range(150_000)]
    messages = [
        system_user(SYSTEM, TASK),
        call('export', 'big', {'table': 'ledger'}),
        result('export', 'big', ' '.join(words)),
        call('query', 'next', {'q': 1}),
        result('query', 'next', 'ok'),
    ]
    ctx, events = context()
    assert ctx.estimate(messages).total > 250_000
    out = await SetupCompactor(compaction_setup(summarizer_model=stub.model(), **WHOLE_VIEW))(messages, ctx)
    assert_valid_history(out, original=messages)
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.method == 'llm'
    assert stub.calls >= 2
    counter = TokenCounter('gpt-4o')
    assert all(counter.count_text(p) <= 180_000 for p in stub.prompts), 'each call stays inside the input cap'
    sent = ' '.join(stub.prompts)
    assert all(w in sent for w in words[::97]), 'every word of the evicted result reached the summarizer'
    assert words[-1] in sent
    assert words[0] in sent
    assert 'omitted' not in sent
    assert 'part="1/' in stub.prompts[0], 'the large record starts in the first call, filling it'

"""When the summarizer fails: the deterministic digest, the head/tail cut, the cool-down and the recovery."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    RetryPromptPart,
    ToolReturnPart,
)

from _compaction import (
    TASK,
    SetupCompactor,
    StubSummarizer,
    compaction_setup,
    context,
    default_summary,
    hang,
    text,
    tool_loop,
)
from _history import call, result
from pydantic_ai_history import CompactionResult, assert_valid_history
from pydantic_ai_history.stages.compactor import CompactionSettings, summary_sections, summary_text

pytestmark = pytest.mark.anyio


def boom(prompt: str, number: int) -> str:
    raise RuntimeError('provider exploded')


def settings(stub: StubSummarizer, **kwargs: Any) -> CompactionSettings:
    return compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=stub.model(), **kwargs)


def reload(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history as an app gets it back from its database: new objects, same content."""
    return list(ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages)))


def history() -> list[ModelMessage]:
    messages = tool_loop(40)
    # a failed tool call among the evicted messages: its error must reach the digest
    messages[9:11] = [
        call('deploy', 'd1', {'env': 'staging'}),
        result('deploy', 'd1', 'ERROR: permission denied on /srv'),
    ]
    return messages


@pytest.mark.parametrize(
    ('behaviour', 'error'),
    [
        (boom, 'RuntimeError: provider exploded'),
        (lambda prompt, n: '   ', 'empty summary'),
        (lambda prompt, n: 'word ' * 5_000, 'oversized summary'),
        (lambda prompt, n: hang(), 'timed out after 0.05 s'),
    ],
    ids=['raises', 'empty', 'oversized', 'timeout'],
)
async def test_a_failed_summarizer_falls_back_to_the_digest_and_the_run_goes_on(behaviour: Any, error: str):
    stub = StubSummarizer(behaviour)
    messages = history()
    ctx, events = context()
    out = await SetupCompactor(settings(stub, summarizer_timeout=0.05))(messages, ctx)
    assert_valid_history(out, original=messages)
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.method == 'digest'
    assert error in (event.error or '')
    assert event.summarizer_calls == 1
    digest = summary_text(out[1]) or ''
    assert ctx.counter.count_text(digest) <= 2_000
    assert TASK not in digest, 'the first user message is kept verbatim in the head, not in the digest'
    assert 'fetch({"page":34}) -> success: STEP-034 the quick brown fox' in digest, (
        'the newest outcomes are listed'
    )
    listed = digest.split('## Tool calls and outcomes\n', 1)[1].split('\n\n## ', 1)[0]
    left_out = re.search(r'- \((\d+) earlier item\(s\) left out\)', listed)
    assert left_out, 'older ones are counted, not silently dropped'
    shown = sum(1 for line in listed.splitlines() if line.startswith(('- fetch(', '- deploy(')))
    evicted_calls = sum(1 for m in messages[1 : 1 + event.evicted_messages] if isinstance(m, ModelRequest))
    assert shown >= 5
    assert int(left_out.group(1)) + shown == evicted_calls
    assert out[0] is messages[0]
    assert out[-1] is messages[-1]
    assert ctx.estimate(out).total <= 8_000


HAS_OUTCOME = 'outcome' in {f.name for f in dataclasses.fields(ToolReturnPart)}


@pytest.mark.filterwarnings('ignore:`RetryPromptPart` is deprecated')
@pytest.mark.parametrize('kind', ['retry', 'outcome'])
async def test_tool_errors_are_listed_in_the_digest(kind: str):
    if kind == 'outcome' and not HAS_OUTCOME:
        pytest.skip('ToolReturnPart has no outcome on this pydantic-ai version')
    if kind == 'retry':
        part: Any = RetryPromptPart(content='page 3 is missing', tool_name='fetch', tool_call_id='step3')
    else:
        part = ToolReturnPart('fetch', 'page 3 is missing', 'step3', outcome='failed')  # type: ignore[call-arg]
    messages = tool_loop(40)
    messages[8] = ModelRequest(parts=[part])
    ctx, _ = context()
    out = await SetupCompactor(settings(StubSummarizer(boom)))(messages, ctx)
    assert_valid_history(out, original=messages)
    digest = summary_text(out[1]) or ''
    assert '## Errors\n- fetch: page 3 is missing' in digest, (
        'an old error is kept though old tool outcomes are not'
    )


async def test_the_head_tail_cut_keeps_the_first_quarter_and_last_three_quarters():
    stub = StubSummarizer(boom)
    messages = tool_loop(40)
    ctx, events = context()
    out = await SetupCompactor(settings(stub, fallback='truncate', summary_max_tokens=3_000))(messages, ctx)
    assert_valid_history(out, original=messages)
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.method == 'truncate'
    sections = summary_sections(out[1])
    assert sections is not None
    cut = sections.summary  # the trail beside it lists every id, as data
    assert 'STEP-000' in cut, 'the start of the evicted span is kept'
    last_evicted = event.evicted_messages // 2 - 1
    assert f'STEP-{last_evicted:03d}' in cut, 'its end is kept'
    assert f'STEP-{last_evicted // 2:03d}' not in cut, 'its middle is removed'
    assert 'messages (about' in cut
    assert 'tokens) removed here' in cut
    assert ctx.counter.count_text(cut) <= 3_000


async def test_three_failures_open_a_cool_down_then_the_summarizer_is_tried_again():
    now = [1_000.0]
    failing = [True]

    def behaviour(prompt: str, number: int) -> str:
        if failing[0]:
            raise RuntimeError('down')
        return '## Goal and constraints\nrecovered'

    stub = StubSummarizer(behaviour)
    compactor = SetupCompactor(settings(stub, max_failures=3, cooldown_seconds=300, clock=lambda: now[0]))
    ctx, events = context(cache=None)  # no cache: each compaction below goes to the summarizer or fallback

    async def one() -> CompactionResult:
        messages = tool_loop(40)
        out = await compactor(messages, ctx)
        assert_valid_history(out, original=messages)
        return [e for e in events if isinstance(e, CompactionResult)][-1]

    for _ in range(3):
        assert (await one()).method == 'digest'
        now[0] += 10
    assert stub.calls == 3  # the third failure was at 1020: cool-down until 1320
    cooling = await one()
    assert stub.calls == 3, 'not called during the cool-down'
    assert (cooling.method, cooling.summarizer_calls) == ('digest', 0)
    assert 'cooling down after 3 consecutive failures' in (cooling.error or '')
    now[0] = 1_319
    assert (await one()).summarizer_calls == 0
    now[0] = 1_321  # the cool-down is over: one call goes through; it fails, so the breaker opens again
    assert (await one()).summarizer_calls == 1
    assert stub.calls == 4
    assert (await one()).summarizer_calls == 0
    now[0] += 300
    failing[0] = False
    recovered = await one()
    assert (recovered.method, recovered.summarizer_calls, recovered.error) == ('llm', 1, None)
    now[0] += 1
    failing[0] = True
    assert (await one()).summarizer_calls == 1, 'after a success the count starts again from zero'
    assert (await one()).summarizer_calls == 1


async def test_the_fallback_keeps_the_previous_summary():
    calls = [0]

    def first_ok_then_fail(prompt: str, number: int) -> str:
        calls[0] += 1
        if calls[0] == 1:
            return '## Decisions\nKEEP-THIS-FACT: the replica is db-7'
        raise RuntimeError('down')

    stub = StubSummarizer(first_ok_then_fail)
    compactor = SetupCompactor(settings(stub))
    ctx, _ = context()
    first = await compactor(tool_loop(40), ctx)
    grown = list(first)
    for i in range(40, 70):
        grown += [call('fetch', f'n{i}', {'page': i}), result('fetch', f'n{i}', text(1_000, f'NEW-{i}'))]
    second = await compactor(grown, ctx)
    assert_valid_history(second, original=grown)
    digest = summary_text(second[1]) or ''
    assert digest.startswith('Automatic digest')
    assert 'KEEP-THIS-FACT: the replica is db-7' in digest


async def test_a_fallback_summary_is_not_reused_from_the_prefix_cache_after_the_summarizer_recovers():
    """An app that reloads its full history gets a real summary once the summarizer answers again."""
    down = [True]

    def behaviour(prompt: str, number: int) -> str:
        if down[0]:
            raise RuntimeError('provider exploded')
        return default_summary(prompt, number)

    stub = StubSummarizer(behaviour)
    compactor = SetupCompactor(settings(stub))
    ctx, events = context()
    full = history()
    first = await compactor(full, ctx)
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['digest']
    assert (summary_text(first[1]) or '').startswith('Automatic digest')

    down[0] = False
    reloaded = reload(
        [*full, call('fetch', 'late', {'page': 99}), result('fetch', 'late', text(500, 'LATE'))]
    )
    second = await compactor(reloaded, ctx)
    assert_valid_history(second, original=reloaded)
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['digest', 'llm']
    assert 'Automatic digest' not in (summary_text(second[1]) or '')
    assert 'summary number' in (summary_text(second[1]) or '')

    # the real summary is recorded: the next reload reuses it without a call
    calls = stub.calls
    third = await compactor(reload(reloaded), ctx)
    assert stub.calls == calls
    assert [e.method for e in events if isinstance(e, CompactionResult)][-1] == 'cache'
    assert summary_text(third[1]) == summary_text(second[1])


async def test_in_durable_workflow_code_the_summarizer_is_tried_on_every_event():
    """A replay decides from the journal alone: failures this process remembers (from the run's later
    requests) must not open a breaker early, so workflow code keeps no breaker state; the engine retries."""
    from pydantic_ai_history.context._llm import InlineOperations

    stub = StubSummarizer(lambda prompt, number: (_ for _ in ()).throw(RuntimeError('down')))
    compactor = SetupCompactor(settings(stub, max_failures=1, cooldown_seconds=300, clock=lambda: 1_000.0))
    ctx, events = context(cache=None)
    ctx.operations = InlineOperations(ctx)  # journaled: the processor's operations are bound
    for _ in range(3):
        messages = tool_loop(40)
        out = await compactor(messages, ctx)
        assert_valid_history(out, original=messages)
    results = [e for e in events if isinstance(e, CompactionResult)]
    assert [r.method for r in results] == ['digest'] * 3
    assert stub.calls == 3, 'a breaker opened in workflow code'
    assert compactor.compactor._breakers.allows('summarizer', ctx.scope)

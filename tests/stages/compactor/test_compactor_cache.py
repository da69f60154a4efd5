"""No re-summarization: the prefix index for reloaded histories, the content-keyed summary cache."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

from _compaction import (
    TASK,
    SetupCompactor,
    StubSummarizer,
    compaction_setup,
    context,
    prompt_block,
    text,
    tool_loop,
)
from _history import call, is_suffix_by_identity, result
from pydantic_ai_history import CompactionResult, HistoryEvent, assert_valid_history
from pydantic_ai_history.cache import MemoryCache
from pydantic_ai_history.messages._marks import marker_kind
from pydantic_ai_history.stages.compactor import CompactionSettings, summary_text

pytestmark = pytest.mark.anyio


def settings(stub: StubSummarizer, **kwargs: Any) -> CompactionSettings:
    return compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=stub.model(), **kwargs)


def grow(messages: list[ModelMessage], start: int, count: int) -> list[ModelMessage]:
    out = list(messages)
    for i in range(start, start + count):
        out += [
            call('fetch', f'step{i}', {'page': i}),
            result('fetch', f'step{i}', text(1_000, f'STEP-{i:03d}')),
        ]
    return out


def compactions(events: list[HistoryEvent]) -> list[CompactionResult]:
    return [e for e in events if isinstance(e, CompactionResult)]


def reload(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The history as an app gets it back from its database: new objects, same content."""
    return list(ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages)))


async def test_a_reloaded_uncompacted_history_reuses_the_recorded_prefix():
    stub = StubSummarizer()
    compactor = SetupCompactor(settings(stub))
    ctx, events = context()
    full = tool_loop(40)
    first = await compactor(full, ctx)
    assert stub.calls == 1
    n = len(full) - (len(first) - 2)  # messages the summary stands for, head included

    # next turn: the app reloads the full uncompacted history plus two new rounds
    full2 = reload(grow(full, 40, 2))
    second = await compactor(full2, ctx)
    assert_valid_history(second, original=full2)
    assert stub.calls == 1, 'no new summary: the recorded prefix was found'
    assert compactions(events)[-1].method == 'cache'
    assert compactions(events)[-1].summarizer_calls == 0
    assert second[0] is full2[0]
    assert summary_text(second[1]) == summary_text(first[1])
    assert is_suffix_by_identity(second[2:], full2)
    assert len(second) - 2 == len(full2) - n
    assert ctx.estimate(second).total <= 20_000

    # much later: still over the trigger after substitution: compacts incrementally from the cached summary
    full3 = reload(grow(full2, 42, 20))
    third = await compactor(full3, ctx)
    assert_valid_history(third, original=full3)
    assert stub.calls == 2
    assert 'summary number 1' in prompt_block(stub.prompts[1], 'previous_summary')
    transcript = prompt_block(stub.prompts[1], 'messages')
    assert 'STEP-000' not in transcript, 'the prefix already summarized is not sent again'
    assert f'STEP-{(n - 1) // 2:03d}' in transcript, 'the summarizer sees the newly evicted messages'
    assert ctx.estimate(third).total <= 8_000

    # and the turn after that finds the longer prefix
    full4 = reload(grow(full3, 62, 1))
    fourth = await compactor(full4, ctx)
    assert stub.calls == 2
    assert summary_text(fourth[1]) == summary_text(third[1])
    assert [c.method for c in compactions(events)] == ['llm', 'cache', 'llm', 'cache']


async def test_a_new_processor_with_the_same_cache_does_not_summarize_again():
    stub = StubSummarizer()
    cache = MemoryCache()
    messages = tool_loop(40)
    ctx1, _ = context(cache=cache)
    first = await SetupCompactor(settings(stub))(messages, ctx1)
    ctx2, events = context(cache=cache)
    second = await SetupCompactor(settings(stub))(reload(messages), ctx2)
    assert stub.calls == 1
    assert compactions(events)[0].method == 'cache'
    assert summary_text(second[1]) == summary_text(first[1])
    assert len(second) == len(first)


async def test_within_a_run_the_compacted_history_is_updated_incrementally_and_recorded():
    """A run's compacted history (stored by pydantic-ai) compacts again from its summary; an app that reloads
    the uncompacted history afterwards still finds the prefix the in-run compaction recorded."""
    stub = StubSummarizer()
    compactor = SetupCompactor(settings(stub))
    ctx, events = context()
    full = tool_loop(40)
    in_run = await compactor(full, ctx)
    new_rounds = grow([], 40, 20)  # the same message objects reach the run's history and the app's store
    full = [*full, *new_rounds]
    in_run = await compactor([*in_run, *new_rounds], ctx)
    assert stub.calls == 2
    assert sum(marker_kind(m) == 'summary' for m in in_run) == 1
    reloaded = await compactor(reload(full), ctx)
    assert stub.calls == 2
    assert compactions(events)[-1].method == 'cache'
    assert summary_text(reloaded[1]) == summary_text(in_run[1])
    assert reloaded[2:] == in_run[2:]


async def test_a_changed_prefix_is_not_mistaken_for_a_recorded_one():
    stub = StubSummarizer()
    compactor = SetupCompactor(settings(stub))
    ctx, events = context()
    full = tool_loop(40)
    await compactor(full, ctx)
    edited = reload(full)
    edited[5] = result('fetch', 'step1', 'this page was edited afterwards')
    await compactor(edited, ctx)
    assert stub.calls == 2
    assert [c.method for c in compactions(events)] == ['llm', 'llm']


async def test_same_evicted_span_and_previous_summary_hits_the_content_cache():
    stub = StubSummarizer()
    cache = MemoryCache()
    messages = tool_loop(40)
    ctx1, _ = context(cache=cache)
    await SetupCompactor(settings(stub))(messages, ctx1)
    # a different conversation head (another system prompt) with the same evicted span: no prefix record,
    # but the summary is keyed by the exact evicted content, settings, previous summary and focus
    other = [ModelRequest(parts=[UserPromptPart(TASK)]), *messages[1:]]  # no system prompt: another head
    ctx2, events = context(cache=cache)
    out = await SetupCompactor(settings(stub))(other, ctx2)
    assert_valid_history(out, original=other)
    assert stub.calls == 1
    assert compactions(events)[0].method == 'cache'

"""The compactor on the real fixture conversations, joined past 120K tokens, with the default settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, SystemPromptPart

from _compaction import (
    SetupCompactor,
    StubSummarizer,
    compaction_setup,
    context,
    joined_conversations,
    user_texts,
)
from _history import is_suffix_by_identity
from pydantic_ai_history import CompactionResult, assert_valid_history
from pydantic_ai_history.messages._marks import marker_kind

pytestmark = pytest.mark.anyio


@pytest.fixture(scope='module')
def long_history(fixtures_dir: Path) -> list[ModelMessage]:
    return joined_conversations(fixtures_dir, min_tokens=125_000)


@pytest.mark.parametrize('window', [None, 200_000])
async def test_real_conversations_compact_to_the_default_target(
    long_history: list[ModelMessage], window: int | None
):
    stub = StubSummarizer()
    ctx, events = context(context_window=window)
    assert ctx.estimate(long_history).total > 120_000
    out = await SetupCompactor(compaction_setup(summarizer_model=stub.model()))(long_history, ctx)
    assert_valid_history(out, original=long_history)
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.method == 'llm'
    assert stub.calls == 1
    assert ctx.estimate(out).total == event.tokens_after <= 40_000
    assert out[0] is long_history[0]
    assert [type(p) for p in out[0].parts][:1] == [SystemPromptPart]
    assert marker_kind(out[1]) == 'summary'
    assert is_suffix_by_identity(out[2:], long_history)
    # the summarizer saw the original task and the conversations it replaced, not the verbatim tail
    task = user_texts(long_history[:1])[0]
    assert task[:200] in stub.prompts[0].split('</original_task>')[0]
    evicted_users = [t for t in user_texts(long_history[1 : len(long_history) - len(out) + 2]) if len(t) > 40]
    assert evicted_users
    assert all(t[:40] in stub.prompts[0] for t in evicted_users)


async def test_twice_reloaded_real_history_hits_the_cache(long_history: list[ModelMessage]):
    stub = StubSummarizer()
    compactor = SetupCompactor(compaction_setup(summarizer_model=stub.model()))
    ctx, events = context()
    first = await compactor(long_history, ctx)
    reloaded = list(ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(long_history)))
    second = await compactor(reloaded, ctx)
    assert_valid_history(second, original=reloaded)
    assert stub.calls == 1
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['llm', 'cache']
    assert len(second) == len(first)
    assert isinstance(second[1], ModelRequest)

"""Two tenants with the same tool traffic never see each other's text through the shared cache.

Replayed or scripted flows, servers with predictable ids and forked conversations give two tenants the same
tool-call ids and outputs; only their first messages differ. The summary the compactor caches for Alice's
evicted messages must never come back in Bob's history, on every cache backend: memory, SQLite, Redis, and a
Redis cache degraded to its in-memory fallback.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import filler, make_agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from _compaction import StubSummarizer, prompt_block, user_texts
from _redis_server import free_port
from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    SummarizerSettings,
    assert_valid_history,
)
from pydantic_ai_history.cache import MemoryCache, RedisCache, SQLiteCache, SummaryCache, redis_cache
from pydantic_ai_history.stages.compactor import summary_text

pytestmark = pytest.mark.anyio

WINDOW, TRIGGER, TARGET = 8_000, 4_000, 1_500
STEPS = 10


def task(tenant: str) -> str:
    return f'Help CUSTOMER-{tenant} with their account.'


def goal_summary(prompt: str, number: int) -> str:
    """A summarizer that, like a real one, writes the original task into the summary's goal."""
    return f'## Goal\n{prompt_block(prompt, "original_task")}\n## Current state\nsummary {number}'


class Scripted:
    """The same tool calls, with the same ids, for every tenant; then an answer (one instance per run: the
    compactor removes old responses, so it counts its own calls)."""

    def __init__(self) -> None:
        self.step = 0
        self.__name__ = 'scripted'  # FunctionModel on 1.x names the model after the function

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step, self.step = self.step, self.step + 1
        if step >= STEPS:
            return ModelResponse(parts=[TextPart('Done.')])
        return ModelResponse(parts=[ToolCallPart('ledger', {'page': step}, tool_call_id=f'call_{step}')])


@pytest.fixture(params=['memory', 'sqlite', pytest.param('redis', marks=pytest.mark.redis), 'fallback'])
async def cache(request: Any, tmp_path: Path) -> AsyncIterator[SummaryCache]:
    made: SummaryCache
    if request.param == 'memory':
        made = MemoryCache()
    elif request.param == 'sqlite':
        made = SQLiteCache(tmp_path / 'cache.sqlite')
    elif request.param == 'redis':
        made = RedisCache(request.getfixturevalue('redis_server').url)
    else:  # Redis unreachable: every entry lives in the fallback's memory
        made = redis_cache(f'redis://127.0.0.1:{free_port()}/0', socket_timeout=0.2)
    yield made
    await made.aclose()


def _agent(processor: HistoryProcessor) -> Any:
    agent = make_agent(None, processor, deps_type=str)

    @agent.tool_plain
    def ledger(page: int) -> str:
        """One page of the ledger."""
        return f'ledger page {page}\n' + filler(2_500, seed=page)

    return agent


async def _run(agent: Any, tenant: str) -> list[ModelMessage]:
    result = await agent.run(
        task(tenant),
        model=FunctionModel(Scripted()),
        deps=tenant,
        usage_limits=UsageLimits(request_limit=None),
    )
    return result.all_messages()


def _summaries(processor: HistoryProcessor, messages: list[ModelMessage]) -> list[str]:
    with processor.marks():  # on 1.0 a summary is known by its seal, keyed with the store's secret
        return [text for m in messages if (text := summary_text(m)) is not None]


async def test_identical_evicted_traffic_never_crosses_tenants(cache: SummaryCache) -> None:
    summarizer = StubSummarizer(behaviour=goal_summary)
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        artifacts=False,
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=summarizer.model()),
        cache=cache,
        scope=lambda ctx: f'tenant:{ctx.deps}',
        on_history_event=events.append,
    )
    agent = _agent(processor)

    alice = await _run(agent, 'alice')
    alice_calls = summarizer.calls
    assert alice_calls >= 1, 'Alice never compacted: the test proves nothing'
    assert any('CUSTOMER-alice' in s for s in _summaries(processor, alice))

    bob = await _run(agent, 'bob')
    assert_valid_history(bob[:-1] if isinstance(bob[-1], ModelResponse) else bob)
    # Bob's evicted messages were summarized for Bob, not served from Alice's entries
    assert summarizer.calls > alice_calls
    bob_methods = [e.method for e in events if isinstance(e, CompactionResult)][
        -(summarizer.calls - alice_calls) :
    ]
    assert 'cache' not in bob_methods
    seen_by_bob = '\n'.join([*_summaries(processor, bob), *user_texts(bob)])
    assert 'CUSTOMER-alice' not in seen_by_bob
    assert 'CUSTOMER-bob' in seen_by_bob

    # the cache does work within a tenant: Alice's identical conversation again is answered from it
    before = summarizer.calls
    again = await _run(agent, 'alice')
    assert summarizer.calls == before
    assert 'CUSTOMER-bob' not in '\n'.join(_summaries(processor, again))


async def test_one_scope_with_two_tasks_does_not_share_a_summary() -> None:
    """Runs that share a scope (pydantic-ai 1.0's default, or an app's coarse key) still never get a summary
    written for another task: the original task the summarizer reads is part of the key."""
    summarizer = StubSummarizer(behaviour=goal_summary)
    processor = HistoryProcessor(
        artifacts=False,
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=summarizer.model()),
        scope=lambda ctx: 'one-shared-scope',
    )
    agent = _agent(processor)
    await _run(agent, 'alice')
    bob = await _run(agent, 'bob')
    text = '\n'.join(_summaries(processor, bob))
    assert 'CUSTOMER-bob' in text
    assert not re.search(r'CUSTOMER-alice', text)

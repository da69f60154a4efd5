"""A cold burst on one processor with `RedisStore` (a real redis-server): nothing is lost.

200 runs start at once on a processor whose store has never been used: each stores a large tool output and
the transcript its compaction evicts. The store loads its secret once for all of them, shares one pool of
connections sized for the burst (runs wait for a connection instead of failing), and retries a failed call
with backoff before it reports one; no run falls back to a secret of its own process.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest
from helpers import PageSteps, filler, make_agent
from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.usage import UsageLimits

from _compaction import StubSummarizer
from pydantic_ai_history import (
    CompactionResult,
    ContentLost,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    SummarizerSettings,
)
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.store import RedisStore

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.slow]

RUNS = 200
WINDOW, TRIGGER, TARGET = 4_000, 1_600, 700
STEPS = 4
ART_ID = re.compile(r'art_[0-9a-f]{32}')


def named_ids(messages: list[ModelMessage]) -> set[str]:
    return {
        found
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        for found in ART_ID.findall(str(getattr(p, 'content', '')))
    }


async def _burst(url: str, attempt: int, caplog: Any) -> None:
    store = RedisStore(url, prefix=f'burst-{attempt}:')
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=StubSummarizer().model()),
        store=store,
        scope=lambda ctx: f'user:{ctx.deps}',
        on_history_event=events.append,
    )
    agent = make_agent(None, processor, deps_type=int)

    @agent.tool_plain
    async def page(n: int) -> str:
        """One page."""
        # the first page is large (the artifact stage stores it), the others fill the history
        return f'page {n}\n' + filler(12_000 if n == 0 else 3_000, seed=n)

    async def run(i: int) -> list[ModelMessage]:
        result = await agent.run(
            f'User {i}: read the pages.',
            model=FunctionModel(PageSteps(STEPS)),
            deps=i,
            usage_limits=UsageLimits(request_limit=None),
        )
        return result.all_messages()

    caplog.clear()
    try:
        histories = await asyncio.gather(*(run(i) for i in range(RUNS)))
        lost = [e for e in events if isinstance(e, ContentLost)]
        failures = [e for e in events if 'store_failed' in str(getattr(e, 'code', ''))]
        assert (len(lost), len(failures)) == (0, 0), (lost[:2], failures[:2])
        assert not [r for r in caplog.records if 'for this process only' in r.getMessage()]
        assert sum(isinstance(e, CompactionResult) for e in events) >= RUNS, 'every run compacted'
        for i, history in enumerate(histories):
            ids = named_ids(history)
            assert ids, f'run {i} names no stored transcript'
            for artifact in ids:
                text = await read_artifact_text(store, artifact, limit=100, scope=f'user:{i}')
                assert not text.startswith('Error'), (i, text)
    finally:
        await store.aclose()


@pytest.mark.parametrize('attempt', [1, 2, 3])
async def test_a_cold_burst_of_runs_loses_nothing(redis_server: Any, attempt: int, caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    await _burst(redis_server.url, attempt, caplog)

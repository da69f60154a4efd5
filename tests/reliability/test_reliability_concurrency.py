"""50 concurrent agent runs through one processor and one cache: no cross-talk, no lost updates.

Every run's tool outputs carry a per-run secret, while the system prompt and first user message are the same
for all runs (so the compactor's prefix index sees one conversation key for all of them). No run's model
may ever receive another run's secret, and the per-run stats add up to the overall ones.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from helpers import Behaviour, check_requests, fake_model, filler, full_processor, make_agent, strict
from pydantic_ai import RunContext
from strategies import text_of

from pydantic_ai_history import CompactionResult, HistoryEvent, StageFailed
from pydantic_ai_history.cache import MemoryCache

pytestmark = pytest.mark.anyio

RUNS = 50
WINDOW = 16_000
SECRET = re.compile(r'SECRET-(\d+)-[a-z]+')


@pytest.mark.slow  # many concurrent runs: scale
async def test_concurrent_runs_share_nothing_but_the_processor() -> None:
    events: list[HistoryEvent] = []
    summarizer = Behaviour('echo')
    cache = MemoryCache()
    processor = full_processor(
        context_window=WINDOW,
        max_tokens=6_000,
        target_tokens=2_500,
        summarizer=fake_model(summarizer),
        cache=cache,
        on_event=events.append,
    )
    providers = [strict(4, WINDOW, parallel=True) for _ in range(RUNS)]
    agent = make_agent(None, processor, deps_type=int, system_prompt='You read reports for the user.')

    @agent.tool
    async def fetch(ctx: RunContext[int], n: int) -> str:
        """Fetch page n of the report."""
        await asyncio.sleep(0)  # let the other runs interleave
        secret = f'SECRET-{ctx.deps}-{"abcdefghij"[ctx.deps % 10]}x'
        return f'{secret} page {n}: ' + filler(9_000, seed=abs(n)) + f' {secret}'

    async def one(i: int) -> Any:
        return await agent.run('Summarize the report.', model=providers[i].model(), deps=i)

    results = await asyncio.gather(*(one(i) for i in range(RUNS)))

    assert all(r.output == 'All done.' for r in results)
    assert not [e for e in events if isinstance(e, StageFailed)]
    compactions = [e for e in events if isinstance(e, CompactionResult)]
    assert compactions, 'no run compacted: the shared cache and summarizer were not exercised'
    for i, provider in enumerate(providers):
        check_requests(provider)
        for record in provider.requests:
            seen = {int(m.group(1)) for m in SECRET.finditer(text_of(list(record.history)))}
            assert seen <= {i}, f'run {i} received secrets of runs {sorted(seen - {i})}'
        final = {int(m.group(1)) for m in SECRET.finditer(text_of(results[i].all_messages()))}
        assert final <= {i}
    for event in compactions:  # a summary only speaks of one run
        assert len({m.group(1) for m in SECRET.finditer(event.summary)}) <= 1

    stats = processor.stats()
    assert len(stats.runs) == RUNS
    runs = list(stats.runs.values())
    assert sum(r.requests for r in runs) == stats.overall.requests
    assert stats.overall.requests == sum(len(p.requests) for p in providers), 'a request was not counted'
    assert sorted(r.requests for r in runs) == sorted(len(p.requests) for p in providers)
    assert sum(r.tokens_in for r in runs) == stats.overall.tokens_in
    assert sum(r.tokens_out for r in runs) == stats.overall.tokens_out
    assert sum(r.compactions for r in runs) == stats.overall.compactions == len(compactions)
    assert sum(r.summarizer_calls for r in runs) == stats.overall.summarizer_calls
    assert stats.overall.summarizer_calls == summarizer.calls
    assert sum(r.warnings for r in runs) == stats.overall.warnings
    assert sum(sum(r.artifacts_by_strategy.values()) for r in runs) == sum(
        stats.overall.artifacts_by_strategy.values()
    )

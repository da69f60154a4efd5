"""A hung Redis (the real server under SIGSTOP): one timeout per cool-down, not one per operation.

No timings are asserted: the breaker's state and the number of operations that reached the server are.
The time per run is measured in `benchmarks/bench_hung_redis.py`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from helpers import filler, make_agent
from pydantic_ai import RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import ContextPolicy, HistoryEvent, create_history_processor
from pydantic_ai_history.store import RedisStore, StoreError

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.redis]


@contextmanager
def hung(server: Any) -> Iterator[None]:
    """The server process stopped: connections are accepted by the kernel, nothing ever answers."""
    pid = server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_store_breaker_opens_on_the_first_timeout(redis_server: Any) -> None:
    now = [0.0]
    store = RedisStore(redis_server.url, socket_timeout=0.3, cooldown=30, monotonic=lambda: now[0])
    try:
        await store.put('art_a', b'a', media_type='text/plain', source='t')
        assert store.breaker.attempts == 1
        with hung(redis_server):
            with pytest.raises(StoreError, match='Timeout'):
                await store.get('art_a')
            assert store.breaker.is_open
            for i in range(20):
                with pytest.raises(StoreError, match='circuit open'):
                    await store.put(f'art_{i}', b'x', media_type='text/plain', source='t')
                with pytest.raises(StoreError, match='circuit open'):
                    await store.get('art_a')
            assert store.breaker.attempts == 2  # the put before, the get that timed out
            assert store.breaker.refused == 40
            now[0] += 31  # after the cool-down one call is tried again, and fails again
            with pytest.raises(StoreError, match='Timeout'):
                await store.get('art_a')
            assert store.breaker.attempts == 3
        now[0] += 31
        assert await store.get('art_a') == b'a'  # the server answers again: the breaker closes
        assert not store.breaker.is_open
    finally:
        await store.aclose()


def _fetch_loop(steps: int) -> FunctionModel:
    done = [0]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if done[0] >= steps:
            return ModelResponse(parts=[TextPart('Done.')])
        done[0] += 1
        return ModelResponse(parts=[ToolCallPart('fetch', {'n': done[0]}, tool_call_id=f'c{done[0]}')])

    return FunctionModel(respond)


async def test_a_run_goes_on_against_a_hung_store(redis_server: Any) -> None:
    store = RedisStore(redis_server.url, socket_timeout=0.3, cooldown=60)
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=16_000), store=store, compaction=False, on_event=events.append
    )
    agent = make_agent(None, processor)

    @agent.tool
    async def fetch(ctx: RunContext[None], n: int) -> str:
        """Fetch page n."""
        return f'page {n}: ' + filler(30_000, seed=n)

    try:
        await store.prepare()  # the id secret, loaded while the server answers
        before = store.breaker.attempts
        with hung(redis_server):
            result = await agent.run('Read five pages.', model=_fetch_loop(5))
        assert result.output == 'Done.'
        # every large page was kept inline (the store could not take it), with a warning each time
        failed = [e for e in events if getattr(e, 'code', '') == 'artifact_store_failed']
        assert len(failed) >= 5
        # ...but only the first store operation waited for the server; the rest were refused at once
        assert store.breaker.attempts - before == 1
        assert store.breaker.refused >= 4
    finally:
        await store.aclose()

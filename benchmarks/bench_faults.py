"""Wall time of a run against a hung Redis store and of a compaction against a locked SQLite cache.

- hung Redis: the real `redis-server` under SIGSTOP, a 5-step tool loop whose 30K-char pages are spilled;
  the store with its breaker (default timeout and cool-down) against one with the breaker disabled
  (`cooldown=0`) and 0.1.0's 5 s socket timeout.
- locked SQLite: another connection holds `BEGIN EXCLUSIVE`; two compactions of a 40-round tool loop with
  the default `busy_timeout` against 0.1.0's 5 s.

Run: python benchmarks/bench_faults.py   (needs redis-server on PATH)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import (
    ContextLimits,
    ContextPolicy,
    HistoryContext,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.cache import SQLiteCache
from pydantic_ai_history.stages.compactor import CompactionSettings, Compactor
from pydantic_ai_history.store import RedisStore
from pydantic_ai_history.tokens import TokenCounter

PAGE = 'The service handled the request and wrote a log line with the latency and the status. ' * 350


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


def _loop(steps: int) -> FunctionModel:
    done = [0]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if done[0] >= steps:
            return ModelResponse(parts=[TextPart('Done.')])
        done[0] += 1
        return ModelResponse(parts=[ToolCallPart('fetch', {'n': done[0]}, tool_call_id=f'c{done[0]}')])

    return FunctionModel(respond)


async def _hung_run(url: str, **store_kwargs: Any) -> float:
    store = RedisStore(url, **store_kwargs)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=16_000), store=store, compaction=False
    )
    kwargs: dict[str, Any] = (
        {'capabilities': [processor]}
        if HAS_CAPABILITIES
        else {'history_processors': [processor], 'toolsets': [processor.readback_toolset()]}
    )
    agent = Agent(None, **kwargs)

    @agent.tool
    async def fetch(ctx: RunContext[None], n: int) -> str:
        """Fetch page n."""
        return f'page {n}: {PAGE}'

    started = time.perf_counter()
    await agent.run('Read five pages.', model=_loop(5))
    return time.perf_counter() - started


def bench_hung_redis() -> list[tuple[str, float]]:
    binary = shutil.which('redis-server')
    if binary is None:
        print('redis-server not installed: skipped', file=sys.stderr)
        return []
    port = _free_port()
    server = subprocess.Popen(
        [binary, '--port', str(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f'redis://127.0.0.1:{port}/0'
    try:
        time.sleep(0.5)
        os.kill(server.pid, signal.SIGSTOP)
        rows = [
            (
                'hung Redis, 5-step run, store with breaker (defaults)',
                asyncio.run(_hung_run(url, secret=b'x' * 32)),
            ),
            (
                'hung Redis, 5-step run, no breaker, 5 s timeout (0.1.0)',
                asyncio.run(_hung_run(url, secret=b'x' * 32, cooldown=0, socket_timeout=5.0)),
            ),
        ]
        os.kill(server.pid, signal.SIGCONT)
        return rows
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.terminate()
        server.wait()


def _history(units: int) -> list[ModelMessage]:
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Migrate the database.')])]
    for i in range(units):
        messages.append(ModelResponse(parts=[ToolCallPart('fetch', {'page': i}, tool_call_id=f't{i}')]))
        messages.append(
            ModelRequest(parts=[ToolReturnPart('fetch', PAGE[:4_000] + str(i), tool_call_id=f't{i}')])
        )
    return messages


async def _locked_compactions(path: Path, busy_timeout: float) -> float:
    def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('## Goal and constraints\nmigrate\n')])

    cache = SQLiteCache(path, busy_timeout=busy_timeout)
    compactor = Compactor(CompactionSettings())
    limits = ContextLimits.fixed(budget=128_000, trigger=20_000, target=8_000)
    summarizer = SummarizerSettings(model=FunctionModel(summarize))
    started = time.perf_counter()
    for n in (40, 41):
        context = HistoryContext(
            counter=TokenCounter('gpt-4o'), limits=limits, summarizer=summarizer, cache=cache
        )
        await compactor(_history(n), context)
    return time.perf_counter() - started


def bench_locked_sqlite() -> list[tuple[str, float]]:
    rows = []
    for label, timeout in (('default busy_timeout', 0.1), ('5 s busy_timeout (0.1.0)', 5.0)):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / 'cache.sqlite'
            holder = sqlite3.connect(path, isolation_level=None)
            holder.execute('CREATE TABLE other (x)')
            holder.execute('BEGIN EXCLUSIVE')
            try:
                rows.append(
                    (
                        f'locked SQLite cache, 2 compactions, {label}',
                        asyncio.run(_locked_compactions(path, timeout)),
                    )
                )
            finally:
                holder.execute('ROLLBACK')
                holder.close()
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:  # warm up: tokenizer load, imports
        asyncio.run(_locked_compactions(Path(tmp) / 'warm.sqlite', 0.1))
    print('| case | wall time |\n|---|---|')
    for label, seconds in [*bench_hung_redis(), *bench_locked_sqlite()]:
        print(f'| {label} | {seconds:.2f} s |')


if __name__ == '__main__':
    main()

"""State that stays bounded and survives bursts: the spill stores under an operator's load.

- `directory`: many conversations through one processor with a `DirectoryStore` (every run compacts and stores
  its transcript, and stores one large tool output): bytes and files on disk as the requests add up, with
  retention off (0.1.0's behaviour) and with a `max_bytes` bound.
- `memory`: conversations through a `MemoryStore` past its cap: how many of the newest conversations still
  have every transcript readable.
- `redis-burst`: `--runs` runs started at once on one processor with a cold `RedisStore` (a real redis-server
  on a free port), `--tries` times: `ContentLost` events and store failures per try.

Run: python benchmarks/bench_stores.py [directory|memory|redis-burst ...] [--requests N] [--runs N]
     [--tries N]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from pydantic_ai_history import ContentLost, ContextPolicy, HistoryEvent, HistoryProcessor, SummarizerSettings
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.store import ArtifactStore, DirectoryStore, MemoryStore, RedisStore

STEPS = 5
TRANSCRIPT = re.compile(r'artifact_id="(art_[0-9a-f]{32})"')
LINE = 'The service handled request {n} in {ms} ms from region {r} and wrote an audit line. '


def page(n: int, chars: int) -> str:
    text = ''.join(LINE.format(n=n * 1000 + i, ms=i * 7 % 90, r=i % 5) for i in range(chars // 70 + 1))
    return f'PAGE-{n}\n{text[:chars]}'


class Steps:
    def __init__(self) -> None:
        self.step = 0
        self.__name__ = 'steps'

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step, self.step = self.step, self.step + 1
        if step >= STEPS:
            return ModelResponse(parts=[TextPart('Done.')])
        return ModelResponse(parts=[ToolCallPart('fetch', {'n': step}, tool_call_id=f'c{step}')])


def summarizer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(
        parts=[TextPart('## Goal\nread the pages\n## Current state\nworking')],
        usage=RequestUsage(input_tokens=500, output_tokens=20),
    )


def agent_for(store: ArtifactStore, events: list[HistoryEvent]) -> Agent[int, str]:
    processor = HistoryProcessor(
        policy=ContextPolicy(context_window=6_000, max_tokens=3_000, target_tokens=1_200),
        summarizer=SummarizerSettings(model=FunctionModel(summarizer)),
        store=store,
        scope=lambda ctx: f'conversation:{ctx.deps}',
        on_history_event=events.append,
    )
    if HAS_CAPABILITIES:
        agent: Agent[int, str] = Agent(None, capabilities=[processor], deps_type=int)
    else:
        agent = Agent(
            None, history_processors=[processor], toolsets=[processor.readback_toolset()], deps_type=int
        )

    @agent.tool_plain
    def fetch(n: int) -> str:
        """One page of the log."""
        return page(n, 14_000 if n == 0 else 3_000)  # the first is stored by the artifact stage

    return agent


async def conversation(agent: Agent[int, str], number: int) -> list[ModelMessage]:
    result = await agent.run(
        f'Conversation {number}: read the pages.',
        model=FunctionModel(Steps()),
        deps=number,
        usage_limits=UsageLimits(request_limit=None),
    )
    return result.all_messages()


def disk(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob('*') if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


async def directory(requests: int) -> None:
    conversations = requests // (STEPS + 1)
    print(f'DirectoryStore: {conversations:,} conversations, {conversations * (STEPS + 1):,} requests')
    print(
        f'{"requests":>9} | {"no retention: MB":>16} {"files":>6} | {"max_bytes=8 MB: MB":>18} {"files":>6}'
    )
    roots = {name: Path(tempfile.mkdtemp(prefix=f'bench-{name}-')) for name in ('off', 'bounded')}
    stores = {
        'off': DirectoryStore(roots['off'], max_age=None, max_bytes=None),
        'bounded': DirectoryStore(roots['bounded'], max_bytes=8_000_000),
    }
    events: list[HistoryEvent] = []
    agents = {name: agent_for(store, events) for name, store in stores.items()}
    try:
        for c in range(conversations):
            for agent in agents.values():
                await conversation(agent, c)
            if (c + 1) % max(conversations // 8, 1) == 0 or c + 1 == conversations:
                off, bounded = disk(roots['off']), disk(roots['bounded'])
                print(
                    f'{(c + 1) * (STEPS + 1):>9,} | {off[0] / 1e6:>16.1f} {off[1]:>6,} | '
                    f'{bounded[0] / 1e6:>18.1f} {bounded[1]:>6,}'
                )
        print(f'ContentLost events: {sum(isinstance(e, ContentLost) for e in events)}')
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


async def memory(conversations: int) -> None:
    store = MemoryStore(max_bytes=10**12, max_scope_bytes=10**9)
    events: list[HistoryEvent] = []
    agent = agent_for(store, events)
    named: list[list[str]] = []
    for c in range(conversations):
        messages = await conversation(agent, c)
        texts = [
            str(getattr(p, 'content', '')) for m in messages if isinstance(m, ModelRequest) for p in m.parts
        ]
        named.append(sorted({t for text in texts for t in TRANSCRIPT.findall(text)}))
        if c == 0:
            store.max_bytes = 55 * store.size_bytes  # a cap that holds about 55 conversations
    readable = 0
    for c in range(conversations - 1, -1, -1):
        answers = [await read_artifact_text(store, t, limit=10, scope=f'conversation:{c}') for t in named[c]]
        if any(a.startswith('Error') for a in answers):
            break
        readable += 1
    print(
        f'MemoryStore at its cap ({store.max_bytes / 1e6:.1f} MB, {store.size_bytes / 1e6:.1f} MB held, '
        f'{store.evicted:,} artifacts evicted): the newest {readable} of {conversations} conversations have '
        f'every transcript readable; ContentLost events: {sum(isinstance(e, ContentLost) for e in events)}'
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return int(s.getsockname()[1])


async def redis_burst(runs: int, tries: int) -> None:
    binary = shutil.which('redis-server')
    if binary is None:
        print('redis-burst: redis-server is not on PATH; skipped')
        return
    port = _free_port()
    server = subprocess.Popen(
        [binary, '--port', str(port), '--save', '', '--appendonly', 'no'], stdout=subprocess.DEVNULL
    )
    try:
        await asyncio.sleep(0.5)
        for attempt in range(1, tries + 1):
            store = RedisStore(f'redis://127.0.0.1:{port}/0', prefix=f'burst-{attempt}:')
            events: list[HistoryEvent] = []
            agent = agent_for(store, events)
            started = time.perf_counter()
            await asyncio.gather(*(conversation(agent, i) for i in range(runs)))
            seconds = time.perf_counter() - started
            lost = sum(isinstance(e, ContentLost) for e in events)
            failed = sum('store_failed' in str(getattr(e, 'code', '')) for e in events)
            unavailable = sum(getattr(e, 'code', '') == 'store_unavailable' for e in events)
            print(
                f'try {attempt}: {runs} cold runs at once in {seconds:.1f} s: {lost} ContentLost, '
                f'{failed} store failures, {unavailable} store_unavailable'
            )
            await store.aclose()
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('cases', nargs='*', default=['directory', 'memory', 'redis-burst'])
    parser.add_argument('--requests', type=int, default=6_000, help='requests in the directory case')
    parser.add_argument('--conversations', type=int, default=120, help='conversations in the memory case')
    parser.add_argument('--runs', type=int, default=200)
    parser.add_argument('--tries', type=int, default=3)
    args = parser.parse_args()
    for case in args.cases:
        if case == 'directory':
            asyncio.run(directory(args.requests))
        elif case == 'memory':
            asyncio.run(memory(args.conversations))
        elif case == 'redis-burst':
            asyncio.run(redis_burst(args.runs, args.tries))


if __name__ == '__main__':
    main()

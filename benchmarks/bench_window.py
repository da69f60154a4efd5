"""Processor overhead per model request on a 300-message history built from real conversations (~95K tokens).

Simulates what pydantic-ai does: before every request the processor gets its previous output + the model's
response + the new request. Reports the median time per request
  - idle: nothing needs to change (the window is 200K), counts memoized from earlier requests;
  - cut: the window (60K budget) has to cut on every request;
next to the time a fresh tiktoken count of the same history takes.

Run: TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache python benchmarks/bench_window.py
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import time
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history import ContextPolicy, HistoryProcessor, SlidingWindow, validate_history
from pydantic_ai_history.tokens import TokenCounter

SHARED = Path(__file__).resolve().parents[1].parent / 'shared'
os.environ.setdefault('TIKTOKEN_CACHE_DIR', str(SHARED / 'tiktoken-cache'))
TARGET_MESSAGES = 300
WARMUP_MESSAGES = 200  # requests before this length only warm the memo


def joined_history() -> list[ModelMessage]:
    """Real conversations joined end to end (each ending with a request), cut at ~300 messages.

    The real conversations average 185 tokens per message, so 300 of them hold ~95K tokens, not 130K; the
    idle path's cost depends on the message count (counts are memoized), the raw count's on the tokens.
    """
    pool: list[ModelMessage] = []
    loaded = [
        list(ModelMessagesTypeAdapter.validate_json(path.read_bytes()))
        for path in sorted((SHARED / 'fixtures' / 'conversations').glob('*.json'))
    ]
    density = TokenCounter('gpt-4o')
    # the densest conversations first: the fixtures hold ~149K tokens in 804 messages in all
    loaded.sort(key=lambda messages: -density.count_messages(messages) / len(messages))
    for messages in loaded:
        while messages and not isinstance(messages[-1], ModelRequest):
            messages.pop()  # SWE runs end with an unanswered call: drop it (timing only)
        if pool and messages and isinstance(messages[0], ModelRequest) and isinstance(pool[-1], ModelRequest):
            messages.insert(0, ModelResponse(parts=[]))  # keep request/response alternation
        pool.extend(messages)
    # stop at a request so the last element is the current request
    end = TARGET_MESSAGES
    while not isinstance(pool[end - 1], ModelRequest):
        end += 1
    return pool[:end]


async def simulate(pool: list[ModelMessage], budget: int | None) -> tuple[list[float], int]:
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='openai:gpt-4o',
        policy=ContextPolicy(context_window=200_000, budget_tokens=budget),
    )
    provider = TokenCounter('gpt-4o')  # counts what was sent, as the provider's usage would report it
    history: list[ModelMessage] = []
    timings: list[float] = []
    position = 0
    while position < len(pool):
        # append up to and including the next request: previous output + response + new request
        step = [pool[position]]
        position += 1
        while not isinstance(step[-1], ModelRequest) and position < len(pool):
            step.append(pool[position])
            position += 1
        while position < len(pool) and isinstance(pool[position], ModelRequest):
            step.append(pool[position])
            position += 1
        if history and isinstance(step[0], ModelResponse):
            sent = provider.count_messages(history) + 120  # + instructions and tool definitions
            step[0] = dataclasses.replace(step[0], usage=RequestUsage(input_tokens=sent))
        history = [*history, *step]
        windows = processor.stats().overall.window_applications
        started = time.perf_counter()
        history = await processor.process(history)
        elapsed = time.perf_counter() - started
        cut = processor.stats().overall.window_applications > windows
        if position >= WARMUP_MESSAGES and (cut or budget is None):
            timings.append(elapsed)
    assert not [
        v for v in validate_history(history) if v.code in {'dangling_tool_call', 'orphan_tool_return'}
    ]
    return timings, processor.stats().overall.window_applications


def main() -> None:
    pool = joined_history()
    fresh = TokenCounter('gpt-4o')
    started = time.perf_counter()
    tokens = fresh.count_messages(pool)
    raw_ms = (time.perf_counter() - started) * 1000
    raw_again = []
    for _ in range(3):
        counter = TokenCounter('gpt-4o')
        counter.count_text('warm the encoder')
        started = time.perf_counter()
        counter.count_messages(pool)
        raw_again.append((time.perf_counter() - started) * 1000)

    idle, idle_windows = asyncio.run(simulate(pool, None))
    cut, cut_windows = asyncio.run(simulate(pool, 60_000))
    print(f'history: {len(pool)} messages, {tokens:,} tokens (o200k, corrected)')
    print(
        f'fresh tiktoken count of the history: {statistics.median(raw_again):.1f} ms (first: {raw_ms:.1f} ms)'
    )
    for label, timings, windows in (
        ('idle (nothing to change)', idle, idle_windows),
        ('cut (60K budget)', cut, cut_windows),
    ):
        p90 = sorted(timings)[int(len(timings) * 0.9)] * 1000
        print(
            f'{label}, per request: median {statistics.median(timings) * 1000:.3f} ms, p90 {p90:.3f} ms '
            f'over {len(timings)} requests; window applied {windows}x in the run'
        )


if __name__ == '__main__':
    main()

"""Processor time of one compaction of a 300-message, ~150K-token tool loop (summarizer stubbed).

The tool results are real data (the vega_datasets CSV/JSON files in ../shared/fixtures/tool_outputs), one
page of ~1,000 tokens per call. Reports the median over repeated runs of
  - stage, memoized: `Compactor.__call__` alone, counts memoized (the processor counted the history for its
    `before` estimate, as it does on every request);
  - processor, memoized: `HistoryProcessor.process` with the compactor (estimate before/after, validation);
  - processor, cold: the same with a fresh `TokenCounter` (every message tokenized once);
  - reload, prefix hit: the same history reloaded from JSON (new objects, counts memoized by content), whose
    compacted prefix is found in the cache and substituted: no summarizer call;
and the time of the stub summarizer's model request (part of the stage time: pydantic-ai's own overhead),
next to how many times `TokenCounter.count_message` ran (and how many of those were memo misses) per
compaction. The stage must count the whole history at most once.

Run: TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache python benchmarks/bench_compaction.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history import (
    ContextLimits,
    ContextPolicy,
    HistoryContext,
    HistoryProcessor,
    SummarizerSettings,
)
from pydantic_ai_history.cache import MemoryCache
from pydantic_ai_history.stages.compactor import CompactionSettings, Compactor
from pydantic_ai_history.tokens import TokenCounter

SHARED = Path(__file__).resolve().parents[1].parent / 'shared'
os.environ.setdefault('TIKTOKEN_CACHE_DIR', str(SHARED / 'tiktoken-cache'))
DATA = SHARED / 'fixtures' / 'tool_outputs' / 'vega_datasets'
ROUNDS = 150
REPEAT = 15
SUMMARY = '\n'.join(
    f'## {s}\nnothing of note' for s in ('Goal and constraints', 'Decisions', 'Current state')
)


def history() -> list[ModelMessage]:
    lines: list[str] = []
    for name in ('airports.csv', 'sf-temps.csv', 'cars.json', 'seattle-weather.csv'):
        lines.extend((DATA / name).read_text().splitlines())
    pages = ['\n'.join(lines[i : i + 44]) for i in range(0, len(lines), 44)]
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[SystemPromptPart('You are a data analyst.'), UserPromptPart('Analyse every page.')]
        )
    ]
    for i in range(ROUNDS):
        messages.append(
            ModelResponse(
                parts=[TextPart(f'Page {i}.'), ToolCallPart('fetch', {'page': i}, tool_call_id=f'c{i}')]
            )
        )
        messages.append(ModelRequest(parts=[ToolReturnPart('fetch', pages[i % len(pages)], f'c{i}')]))
    return messages


class Instrumented:
    """Counts `TokenCounter.count_message` calls and memo misses (real tokenization of a message)."""

    def __init__(self) -> None:
        self.calls = 0
        self.misses = 0
        self._original = TokenCounter.count_message
        self._original_part = TokenCounter._count_part

    def __enter__(self) -> Instrumented:
        outer = self

        def count_message(counter: TokenCounter, message: ModelMessage) -> int:
            outer.calls += 1
            return outer._original(counter, message)

        def count_part(counter: TokenCounter, part: Any) -> int:
            outer.misses += 1
            return outer._original_part(counter, part)

        TokenCounter.count_message = count_message  # type: ignore[method-assign]
        TokenCounter._count_part = count_part  # type: ignore[method-assign]
        return self

    def __exit__(self, *args: object) -> None:
        TokenCounter.count_message = self._original  # type: ignore[method-assign]
        TokenCounter._count_part = self._original_part  # type: ignore[method-assign]


async def stub(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # with usage set, as a provider reports it (else FunctionModel estimates it by regex-splitting the prompt)
    return ModelResponse(parts=[TextPart(SUMMARY)], usage=RequestUsage(input_tokens=50_000, output_tokens=40))


def compactor() -> Compactor:
    return Compactor(CompactionSettings())


SUMMARIZER = SummarizerSettings(model=FunctionModel(stub, model_name='stub'))
LIMITS = ContextLimits.fixed(budget=200_000, trigger=120_000, target=40_000)
"""The compactor's 0.1.0 defaults (120K trigger, 40K target) under a 200K window."""


def context(counter: TokenCounter, cache: MemoryCache) -> HistoryContext:
    return HistoryContext(counter=counter, limits=LIMITS, summarizer=SUMMARIZER, cache=cache)


async def median_ms(run: Callable[[], Coroutine[Any, Any, object]]) -> float:
    times = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        await run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def main() -> None:
    messages = history()
    TokenCounter('gpt-4o').count_text('load the encoding')  # loading tiktoken's file is not counting
    counter = TokenCounter('gpt-4o')
    start = time.perf_counter()
    tokens = counter.count_messages(messages)
    raw_ms = (time.perf_counter() - start) * 1000
    print(
        f'history: {len(messages)} messages, {tokens:,} tokens (o200k); '
        f'a fresh full count takes {raw_ms:.0f} ms'
    )

    stage = compactor()  # one long-lived stage, as in an app; a fresh cache each time so it really compacts

    async def stage_memoized() -> object:
        ctx = context(counter, MemoryCache())
        return await stage(messages, ctx)  # the processor's `before` estimate memoized every count

    def processor(fresh_counter: bool) -> Callable[[], Coroutine[Any, Any, object]]:
        async def run() -> object:
            p = HistoryProcessor(
                stages=[stage],
                model='gpt-4o',
                policy=ContextPolicy(context_window=200_000, max_tokens=120_000, target_tokens=40_000),
                summarizer=SUMMARIZER,
            )
            if not fresh_counter:
                p._counters[p.counter_for('gpt-4o').model_name] = counter
            return await p.process(messages)

        return run

    # the stub summarizer's own request (pydantic-ai's direct model request, as the compactor makes it), alone
    from pydantic_ai.direct import model_request

    stub_model = FunctionModel(stub, model_name='stub')
    agent_ms = await median_ms(
        lambda: model_request(
            stub_model, [ModelRequest(parts=[UserPromptPart('summarize')], instructions='x')]
        )
    )

    stage_ms = await median_ms(stage_memoized)
    processor_ms = await median_ms(processor(False))
    cold_ms = await median_ms(processor(True))

    # the reload path: the prefix is recorded once, then every reload finds it
    shared_cache = MemoryCache()
    recorder = compactor()
    await recorder(messages, context(counter, shared_cache))
    reloaded = list(ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages)))
    reloaded.append(ModelResponse(parts=[TextPart('one more')]))
    reloaded.append(ModelRequest(parts=[UserPromptPart('and one more question')]))

    async def reload_hit() -> object:
        ctx = context(counter, shared_cache)
        counter.estimate(reloaded)
        return await recorder(reloaded, ctx)

    reload_ms = await median_ms(reload_hit)

    with Instrumented() as memo:
        await stage_memoized()
    with Instrumented() as cold:
        ctx = context(TokenCounter('gpt-4o'), MemoryCache())
        out = await compactor()(messages, ctx)
    parts = sum(len(m.parts) for m in messages)

    print(f'stub summarizer request alone:              {agent_ms:6.2f} ms (included below)')
    print(f'stage, memoized counts (median of {REPEAT}):     {stage_ms:6.2f} ms')
    print(f'processor, memoized counts:                 {processor_ms:6.2f} ms')
    print(f'processor, cold (fresh counter):            {cold_ms:6.2f} ms')
    print(f'reload from JSON, prefix cache hit (stage): {reload_ms:6.2f} ms')
    print(
        f'count_message per compaction, memoized: {memo.calls} call(s) for {len(messages)} messages '
        f'(+ the summary), {memo.misses} part(s) tokenized'
    )
    print(
        f'count_message per compaction, cold: {cold.calls} call(s) for {len(messages)} messages '
        f'(+ the summary), {cold.misses} part(s) tokenized of {parts} in the history'
    )
    print(f'result: {len(messages)} -> {len(out)} messages')
    ok = len(out) < len(messages) and processor_ms < 30 and max(cold.calls, memo.calls) <= len(messages) + 1
    print('PASS' if ok else 'FAIL', '(processor < 30 ms memoized; history counted at most once)')


if __name__ == '__main__':
    asyncio.run(main())

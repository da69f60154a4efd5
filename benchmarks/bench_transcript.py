"""Time to render the compactor's framed transcript of a long history, and of one whole compaction.

A 20,000-message tool loop (each round: an assistant text and a call, then a ~150-token tool return). The
counter has estimated the history once (as the processor does on every request), so rendering reads token
counts from its memo. Reports the median and minimum over repeated runs of
  - summarizer transcript: `render_units` with tool results capped (what the summarizer reads);
  - stored transcript: `render_units` uncapped (what goes to the store before anything is evicted);
  - whole compaction: `Compactor.__call__` with a stub summarizer and a `MemoryStore` (render, store, summary,
    assemble), prefix cache off.
Rendering must stay linear in the history and well under 0.5 s at 20,000 messages.

Run: TIKTOKEN_CACHE_DIR=../shared/tiktoken-cache python benchmarks/bench_transcript.py
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import ContextLimits, HistoryContext, SummarizerSettings
from pydantic_ai_history.messages.units import split_units
from pydantic_ai_history.stages._transcript import render_units
from pydantic_ai_history.stages.compactor import CompactionSettings, Compactor
from pydantic_ai_history.store import MemoryStore
from pydantic_ai_history.tokens import TokenCounter

SHARED = Path(__file__).resolve().parents[1].parent / 'shared'
os.environ.setdefault('TIKTOKEN_CACHE_DIR', str(SHARED / 'tiktoken-cache'))
MESSAGES = 20_000
REPEAT = 5


def history(n: int) -> list[ModelMessage]:
    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You are a data analyst.'), UserPromptPart('Analyse the logs.')])
    ]
    i = 0
    while len(messages) < n:
        messages.append(
            ModelResponse(
                parts=[
                    TextPart(f'Looking at step {i}.'),
                    ToolCallPart('search', {'q': f'query {i}', 'page': i}, tool_call_id=f'c{i}'),
                ]
            )
        )
        body = f'result {i}: ' + 'lorem ipsum dolor sit amet ' * 20 + json.dumps({'k': i})
        messages.append(ModelRequest(parts=[ToolReturnPart('search', body, f'c{i}')]))
        i += 1
    return messages


def timed(label: str, run: Callable[[], object]) -> None:
    times = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    print(f'{label:<28} median {statistics.median(times) * 1000:7.0f} ms   min {min(times) * 1000:7.0f} ms')


def main() -> None:
    messages = history(MESSAGES)
    counter = TokenCounter('gpt-4o')
    total = counter.estimate(messages).total
    units = split_units(messages)
    print(f'{len(messages):,} messages, {total:,} tokens (o200k)')
    timed(
        'summarizer transcript', lambda: render_units(messages, units, counter, tool_result_max_tokens=2_000)
    )
    timed('stored transcript', lambda: render_units(messages, units, counter, tool_result_max_tokens=None))

    async def summarize(history: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('## Goal and constraints\nanalyse the logs')])

    limits = ContextLimits.fixed(budget=total, trigger=total // 2, target=total // 4)
    summarizer = SummarizerSettings(model=FunctionModel(summarize), max_input_tokens=10_000_000)

    def compact() -> object:
        context = HistoryContext(counter=counter, limits=limits, summarizer=summarizer, store=MemoryStore())
        return asyncio.run(Compactor(CompactionSettings())(messages, context))

    timed('whole compaction', compact)


if __name__ == '__main__':
    main()

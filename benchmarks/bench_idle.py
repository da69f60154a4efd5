"""Per-request cost as a history grows: idle, recount, first call on a loaded history (100 to 20K messages).

Histories come from `_sizes.build` (real conversations joined; see there). For each size:
  - raw tiktoken: `encode_ordinary` over every text of the history (the floor a first count cannot beat);
  - first call: `processor.process` of the loaded history with a fresh processor (every message counted once,
    every stage looks once; the encoding already loaded, its one-time load is reported apart);
  - idle: then, as pydantic-ai does, the previous output + a response (with the provider's usage) + a new
    request, processed again: nothing needs to change (the window is far away);
  - recount: `TokenCounter.estimate` of the history plus one appended message, after the history's own.
Medians of RUNS runs (min-max). Targets (issue 15): idle < 0.2 ms at 300 messages and at 20,000 at most 2x
that; recount < 0.1 ms at any length; first call <= 1.2x raw tiktoken.

Run: python benchmarks/bench_idle.py [--runs 5] [--sizes 100,300,1000,5000,20000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import operator
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.usage import RequestUsage

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _sizes

from pydantic_ai_history import ContextPolicy, HistoryProcessor, create_history_processor

try:
    from pydantic_ai_history.tokens._encodings import load_encoding
except ImportError:  # a version before the encodings shipped (for before/after figures)
    import tiktoken

    load_encoding = tiktoken.get_encoding

STEPS = 30
"""Idle requests per run (the median of them is the run's figure)."""


def processor() -> HistoryProcessor:
    # a window far beyond the history: every stage has nothing to do
    return create_history_processor(
        model='openai:gpt-4o',
        policy=ContextPolicy(context_window=100_000_000, max_tokens=90_000_000, target_tokens=1_000_000),
    )


def summary(values: list[float]) -> str:
    return f'{statistics.median(values):9.3f} ({min(values):.3f}-{max(values):.3f})'


def timed(run: Callable[[], object]) -> float:
    gc.collect()
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def raw_tiktoken(history: list[ModelMessage]) -> float:
    encoding = load_encoding('o200k_base')
    texts = _sizes.texts(history)
    return timed(lambda: [encoding.encode_ordinary(t) for t in texts])


def first_call(history: list[ModelMessage]) -> tuple[float, HistoryProcessor, list[ModelMessage]]:
    p = processor()
    out: list[list[ModelMessage]] = []
    ms = timed(lambda: out.append(asyncio.run(p.process(history))))
    return ms, p, out[0]


def idle(p: HistoryProcessor, history: list[ModelMessage]) -> float:
    times: list[float] = []
    sizes: list[int] = []
    p.on_history_event = lambda event: sizes.append(getattr(event, 'tokenizer_tokens_after', 0))

    async def run(history: list[ModelMessage]) -> None:
        for step in range(STEPS):
            # what the provider reports for what was sent (from the processor's own event: walking the
            # history here to count it would also evict the CPU caches the processor's next call uses)
            sent = (sizes[-1] if sizes else 0) + 120
            response = ModelResponse(
                parts=[TextPart(f'Answer {step}.')], usage=RequestUsage(input_tokens=sent, output_tokens=5)
            )
            request = ModelRequest(parts=[UserPromptPart(f'Question {step}: and then?')])
            grown = [*history, response, request]
            started = time.perf_counter()
            history = await p.process(grown)
            times.append((time.perf_counter() - started) * 1000)
            assert len(history) == len(grown)  # nothing changed
            assert all(map(operator.is_, history, grown))

    asyncio.run(run(history))
    p.on_history_event = None
    return statistics.median(times[2:])


def recount(p: HistoryProcessor, history: list[ModelMessage]) -> float:
    counter = p.counter_for('openai:gpt-4o')
    times = []
    for step in range(STEPS):
        counter.estimate(history)
        grown = [*history, ModelResponse(parts=[TextPart(f'One more answer {step}.')])]
        started = time.perf_counter()
        counter.estimate(grown)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--runs', type=int, default=5)
    parser.add_argument('--sizes', default='100,300,1000,5000,20000')
    args = parser.parse_args()
    started = time.perf_counter()
    load_encoding('o200k_base')
    print(f'one-time o200k load: {(time.perf_counter() - started) * 1000:.0f} ms')
    first_call(_sizes.build(20))  # imports and first-use set-up of every stage are not a history's cost
    print(f'medians of {args.runs} runs (min-max), ms')
    columns = ('raw tiktoken', 'first call', 'idle', 'recount')
    print(f'{"messages":>8} {"tokens":>10} ' + ' '.join(f'{c:>24}' for c in columns))
    for size in (int(s) for s in args.sizes.split(',')):
        history = _sizes.build(size)
        raw, first, idles, recounts = [], [], [], []
        tokens = 0
        for _ in range(args.runs):
            raw.append(raw_tiktoken(history))
            ms, p, out = first_call(history)
            first.append(ms)
            tokens = p.counter_for('openai:gpt-4o').count_messages(out)
            idles.append(idle(p, out))
            recounts.append(recount(p, out))
        print(
            f'{len(history):>8} {tokens:>10,} {summary(raw):>24} {summary(first):>24} '
            f'{summary(idles):>24} {summary(recounts):>24}'
        )
        sys.stdout.flush()


if __name__ == '__main__':
    main()

"""How long the processor holds the event loop on the first request of a reloaded long chat.

A chat app reloads its history from a database for each turn: every message is a new object, so the run's
first request reads all of it (a byte bound, the input check; near the limit the tokenizer). Beside
`processor.process(history)` a coroutine ticks every millisecond; the longest gap between its ticks is the
longest the loop served nothing else. Each measure builds a new processor (nothing of the history seen) on
histories of `_sizes.build` (real conversations), far below the window (100M tokens) and near it (the
window 1.6x the history: counted by the tokenizer), median of RUNS. The garbage collection a reload leaves due
is made before each measure (an app that reloads thousands of messages pays it wherever it falls: see
`gc.freeze`).

Run: python benchmarks/bench_loop_stall.py [--sizes 300,20000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / 'src'))

RUNS = 5


async def _stall(processor: Any, history: list[Any]) -> tuple[float, float]:
    """(the call's wall time, the longest gap between the ticks of a 1 ms ticker), in ms."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    await processor.process(history)
    took = time.perf_counter() - started
    done.set()
    await task
    return took * 1000, max(gaps) * 1000


async def measure(size: int, runs: int) -> list[tuple[str, float, float]]:
    import _sizes
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from pydantic_ai_history import ContextPolicy, TokenCounter, create_history_processor

    raw = ModelMessagesTypeAdapter.dump_json(_sizes.build(size))
    tokens = TokenCounter('openai:gpt-4o').count_messages(ModelMessagesTypeAdapter.validate_json(raw))
    rows = []
    for label, window in (('far below', 100_000_000), ('near the limit', int(tokens * 1.6))):
        found = []
        for _ in range(runs):
            policy = ContextPolicy(context_window=window, max_tokens=window - 1_024)
            processor = create_history_processor(model='openai:gpt-4o', policy=policy)
            history = list(ModelMessagesTypeAdapter.validate_json(raw))  # a reload: new objects
            # the full collection the reload's millions of new objects leave due (90-270 ms at 20,000
            # messages) falls on whatever allocates next: here, not inside the measure
            gc.collect()
            found.append(await _stall(processor, history))
        rows.append((label, statistics.median(t for t, _ in found), statistics.median(s for _, s in found)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--sizes', default='300,20000')
    parser.add_argument('--runs', type=int, default=RUNS)
    args = parser.parse_args()
    print('| messages | history | process, ms | longest loop stall, ms |')
    print('|---:|---|---:|---:|')
    for size in (int(s) for s in args.sizes.split(',')):
        for label, took, stall in asyncio.run(measure(size, args.runs)):
            print(f'| {size:,} | {label} | {took:.1f} | {stall:.1f} |', flush=True)


if __name__ == '__main__':
    main()

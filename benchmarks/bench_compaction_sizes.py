"""One compaction of a 100 to 20,000-message history (real conversations, `_sizes.build`), instant summarizer.

For each size, medians of RUNS runs (min-max) of `processor.process(history)` where the history is over the
compaction trigger:
  - warm: the processor already counted this history (its previous request), as in a run;
  - cold: a fresh processor (every message counted, the prefix index hashed from scratch);
  - peak: tracemalloc's peak during a warm compaction (MiB; tracing slows it, so it is a separate run);
  - summarizer input: tokens the summarizer was sent (all calls), against the tokens of the messages it
    replaced, and its calls.
Target (issue 15): at or below pydantic-ai-harness 0.62 (16 / 62 / 227 / 1,120 ms at 100 / 1,000 / 5,000 /
20,000 messages), peak memory at most 1.5x harness's (0.3 / 1.6 / 7.7 / 32 MiB).

Run: python benchmarks/bench_compaction_sizes.py [--runs 5] [--sizes 100,1000,5000,20000] [--profile N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _sizes

from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryProcessor,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.tokens import TokenCounter

SUMMARY = '\n'.join(
    f'## {s}\nnothing of note' for s in ('Goal and constraints', 'Decisions', 'Current state')
)


class Summarizer:
    """An instant summarizer that keeps what it was sent (counted after the timing, not during it)."""

    def __init__(self, *, keep: bool = True) -> None:
        self.requests: list[list[ModelMessage]] = []
        self.keep = keep
        """False where memory is measured: the prompts kept here are not the processor's memory."""
        self.called = 0

    def model(self) -> FunctionModel:
        return FunctionModel(self._respond, model_name='summarizer')

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.called += 1
        if self.keep:
            self.requests.append(messages)
        return ModelResponse(parts=[TextPart(SUMMARY)], usage=RequestUsage(input_tokens=1, output_tokens=40))

    @property
    def calls(self) -> int:
        return self.called

    @property
    def input_tokens(self) -> int:
        counter = TokenCounter('gpt-4o')
        return sum(counter.count_messages(messages) for messages in self.requests)


def processor(summarizer: Summarizer, tokens: int, events: list[Any]) -> HistoryProcessor:
    # over the trigger by a margin: compaction to the default 40K target (or a third of a small history)
    trigger = max(tokens // 2, 2_000)
    return create_history_processor(
        model='openai:gpt-4o',
        policy=ContextPolicy(
            context_window=max(tokens * 2, 200_000),
            max_tokens=trigger,
            target_tokens=min(40_000, trigger // 3),
        ),
        summarizer=SummarizerSettings(model=summarizer.model()),
        on_history_event=events.append,
    )


def once(history: list[ModelMessage], tokens: int, *, warm: bool, trace: bool = False) -> dict[str, float]:
    summarizer = Summarizer(keep=not trace)
    events: list[Any] = []
    p = processor(summarizer, tokens, events)
    if warm:
        p.counter_for('openai:gpt-4o').estimate(history)
    gc.collect()
    if trace:
        tracemalloc.start()
    started = time.perf_counter()
    out = asyncio.run(p.process(history))
    elapsed = (time.perf_counter() - started) * 1000
    peak = 0.0
    if trace:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    results = [e for e in events if isinstance(e, CompactionResult)]
    assert len(results) == 1, 'exactly one compaction'
    head = next(i for i, (a, b) in enumerate(zip(out, history, strict=False)) if a is not b)
    evicted = history[head : head + results[0].evicted_messages]
    counter = p.counter_for('openai:gpt-4o')
    evicted_tokens = sum(counter.count_message(m) for m in evicted)
    return {
        'ms': elapsed,
        'peak': peak,
        'sent': summarizer.input_tokens,
        'calls': summarizer.calls,
        'replaced': evicted_tokens,
    }


def span(values: list[float], digits: int = 1) -> str:
    return f'{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})'


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--runs', type=int, default=5)
    parser.add_argument('--sizes', default='100,1000,5000,20000')
    parser.add_argument('--profile', type=int, default=0, help='cProfile one warm compaction of N messages')
    args = parser.parse_args()
    once(_sizes.build(40), 10_000, warm=True)  # imports and the encoding load are not a compaction's cost
    if args.profile:
        import cProfile
        import pstats

        history = _sizes.build(args.profile)
        tokens = TokenCounter('gpt-4o').count_messages(history)
        profiler = cProfile.Profile()
        profiler.enable()
        once(history, tokens, warm=True)
        profiler.disable()
        pstats.Stats(profiler).sort_stats('cumulative').print_stats(40)
        return
    print(f'medians of {args.runs} runs (min-max)')
    print(
        'messages     tokens   warm ms              cold ms              peak MiB        '
        'summarizer sent / replaced tokens, calls'
    )
    for size in (int(s) for s in args.sizes.split(',')):
        history = _sizes.build(size)
        tokens = TokenCounter('gpt-4o').count_messages(history)
        warm = [once(history, tokens, warm=True) for _ in range(args.runs)]
        cold = [once(history, tokens, warm=False) for _ in range(args.runs)]
        traced = [once(history, tokens, warm=True, trace=True) for _ in range(max(args.runs // 2, 1))]
        w = warm[0]
        print(
            f'{len(history):>8} {tokens:>10,}   {span([r["ms"] for r in warm]):<20} '
            f'{span([r["ms"] for r in cold]):<20} '
            f'{span([r["peak"] for r in traced]):<15} {w["sent"]:,} / {w["replaced"]:,}, {w["calls"]}'
        )
        sys.stdout.flush()


if __name__ == '__main__':
    main()

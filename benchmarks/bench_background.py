"""What background summaries cost under concurrency: summarizer calls per compaction (issue 36, point 4).

    python benchmarks/bench_background.py                      # 80 concurrent runs, 32K window
    python benchmarks/bench_background.py --runs 100 --window 16000,64000,128000 --no-stubs
    python benchmarks/bench_background.py --abandoned 100       # `agent.iter` runs dropped after two steps

N concurrent `agent.run`s through a real `Agent` on one processor (`CompactionSettings(background_start=0.6)`,
`max_background_summaries` at its default), against `StrictProvider`: each run fetches `--steps` pages with a
tool, one call a step. The summarizer is a scripted model slower than a model step (it yields to the event
loop `--summarizer-yields` times before it answers), counting its calls. Printed per window: compactions,
summarizer calls, calls per compaction, background summaries started / used / discarded (by reason), and
rejected requests. `--abandoned N` starts N `agent.iter` runs, takes a few steps of each and drops them
unfinished, then prints how many runs the processor still holds state for (after a garbage collection).
Offline; no wall-clock figure is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from pydantic_ai_history import (
    BackgroundSummaryDiscarded,
    BackgroundSummaryStarted,
    BackgroundSummaryUsed,
    CompactionResult,
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.testing import StrictProvider

ROW = 'id={i},region=eu-{r},status={s},latency_ms={l},path=/api/v{v}/items/{i}/detail,owner=team-{o}\n'


def page_text(run: int, step: int, rows: int) -> str:
    """One page of varied rows (so it tokenizes like data), with one distinctive line."""
    body = ''.join(
        ROW.format(
            i=step * rows + k, r=k % 7, s=200 + k % 5, l=(k * 37 + run) % 900, v=k % 3, o=(k + run) % 11
        )
        for k in range(rows)
    )
    return f'ticket id: T-{run:03d}-{step:03d}\n{body}'


UNLIMITED = UsageLimits(request_limit=None)


def prompt(run: int) -> str:
    return f'Collect every ticket id. Run {run}.'


@dataclass
class Summarizer:
    """Answers after `yields` turns of the event loop (slower than a model step); counts its calls."""

    yields: int
    calls: int = 0
    """Calls started."""
    answered: int = 0
    cancelled: int = 0

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, model_name='summarizer')

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls += 1
        try:
            for _ in range(self.yields):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.answered += 1
        text = f'## Goal and constraints\ncollect ticket ids\n## Current state\nsummary {self.calls}'
        return ModelResponse(parts=[TextPart(text)], usage=RequestUsage(input_tokens=100, output_tokens=40))


def loop(steps: int) -> Any:
    """The scripted model: one `fetch` call a step for `steps` steps, then an answer (the next page after the
    latest call, which a compaction always keeps)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls = [
            p
            for m in messages
            if isinstance(m, ModelResponse)
            for p in m.parts
            if isinstance(p, ToolCallPart)
        ]
        step = int(calls[-1].args_as_dict()['page']) + 1 if calls else 0
        if step < steps:
            return ModelResponse(parts=[TextPart(f'Page {step}.'), ToolCallPart('fetch', {'page': step})])
        return ModelResponse(parts=[TextPart('All pages done.')])

    return respond


@dataclass
class Setup:
    agent: Agent[None, str]
    provider: StrictProvider
    summarizer: Summarizer
    processor: Any
    events: list[HistoryEvent] = field(default_factory=list)


def build(window: int, steps: int, rows: int, yields: int, *, stubs: bool, start: float | None) -> Setup:
    events: list[HistoryEvent] = []
    summarizer = Summarizer(yields)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=window),
        summarizer=SummarizerSettings(model=summarizer.model()),
        artifacts=False,
        compaction=CompactionSettings(background_start=start, stub_tool_results=stubs),
        on_event=events.append,
    )
    provider = StrictProvider(loop(steps), context_window=window)
    agent = Agent(provider.model(), capabilities=[processor])

    @agent.tool
    async def fetch(ctx: RunContext[None], page: int) -> str:
        """Fetch one page of the dataset."""
        await asyncio.sleep(0)
        run = int(str(ctx.prompt).rsplit(' ', 1)[-1].rstrip('.'))  # the prompt ends with the run's number
        return page_text(run, page, rows)

    return Setup(agent, provider, summarizer, processor, events)


async def concurrent(setup: Setup, runs: int, steps: int, rows: int) -> None:
    async def one(number: int) -> None:
        result = await setup.agent.run(prompt(number), usage_limits=UNLIMITED)
        assert result.output == 'All pages done.', result.output

    await asyncio.gather(*(one(n) for n in range(runs)))


def report(window: int, setup: Setup, runs: int) -> dict[str, Any]:
    events = setup.events
    compactions = [e for e in events if isinstance(e, CompactionResult)]
    summaries = [e for e in compactions if e.method == 'llm']
    discarded = Counter(e.reason for e in events if isinstance(e, BackgroundSummaryDiscarded))
    row = {
        'window': window,
        'runs': runs,
        'compactions': len(compactions),
        'llm_compactions': len(summaries),
        'summarizer_calls': setup.summarizer.calls,
        'answered': setup.summarizer.answered,
        'cancelled': setup.summarizer.cancelled,
        'calls_per_compaction': round(setup.summarizer.calls / max(len(compactions), 1), 2),
        'answered_per_compaction': round(setup.summarizer.answered / max(len(compactions), 1), 2),
        'bg_started': sum(isinstance(e, BackgroundSummaryStarted) for e in events),
        'bg_used': sum(isinstance(e, BackgroundSummaryUsed) for e in events),
        'bg_discarded': dict(discarded),
        'rejected': len(setup.provider.rejected),
    }
    return row


async def abandoned(
    count: int, window: int, rows: int, yields: int, stubs: bool, *, keep: bool
) -> dict[str, Any]:
    """`count` `agent.iter` runs, each taken a few steps past `background_start` and left unfinished: kept
    referenced (`keep`, as an app that stores them), else dropped and garbage-collected."""
    setup = build(window, 200, rows, yields, stubs=stubs, start=0.1)
    kept: list[Any] = []

    async def start_and_leave(number: int) -> None:
        run_cm = setup.agent.iter(prompt(number), usage_limits=UNLIMITED)
        run = await run_cm.__aenter__()
        steps = 0
        async for _node in run:
            steps += 1
            if steps >= 16:
                break
        if keep:
            kept.append((run_cm, run))

    for number in range(count):
        try:  # in a task of its own: a dropped run is closed by the garbage collector in another task
            await asyncio.create_task(start_and_leave(number))
        except BaseException as error:
            print('abandoned run', number, type(error).__name__, file=sys.stderr)
        gc.collect()
        for _ in range(5):
            await asyncio.sleep(0)
    processor = setup.processor
    runs = getattr(processor, '_runs', None)
    held = (
        len(processor._open_runs) if hasattr(processor, '_open_runs') else runs.open_count
    )  # before / after
    jobs = sum(len(getattr(getattr(s, '_background', None), '_jobs', ())) for s in processor.history_stages)
    tasks = [t for t in asyncio.all_tasks() if t.get_name() == 'pydantic_ai_history.background_summary']
    return {
        'abandoned_runs': count,
        'kept_referenced': keep,
        'open_runs_held': held,
        'background_jobs_held': jobs,
        'background_tasks_left': len(tasks),
        'bg_started': sum(isinstance(e, BackgroundSummaryStarted) for e in setup.events),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument('--runs', type=int, default=80)
    parser.add_argument('--window', default='32000', help='comma-separated context windows')
    parser.add_argument('--steps', type=int, default=40)
    parser.add_argument('--rows', type=int, default=30, help='rows per fetched page (~30 tokens each)')
    parser.add_argument('--summarizer-yields', type=int, default=200)
    parser.add_argument('--no-stubs', action='store_true', help='stub_tool_results=False')
    parser.add_argument('--abandoned', type=int, default=0, help='also drop this many agent.iter runs')
    args = parser.parse_args(argv)
    for window in (int(w) for w in args.window.split(',')):
        setup = build(
            window, args.steps, args.rows, args.summarizer_yields, stubs=not args.no_stubs, start=0.6
        )
        asyncio.run(concurrent(setup, args.runs, args.steps, args.rows))
        print(report(window, setup, args.runs))
        if args.abandoned:
            for keep in (True, False):
                found = abandoned(
                    args.abandoned, window, args.rows, args.summarizer_yields, not args.no_stubs, keep=keep
                )
                print(asyncio.run(found))
    return 0


if __name__ == '__main__':
    sys.exit(main())

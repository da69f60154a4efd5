"""Background summaries bounded by their events, through a real `Agent` and a strict provider (issue 36).

Many concurrent runs on one processor, a summarizer slower than a model step (it yields to the event loop
before it answers, so no wall clock is involved):

- past `max_background_summaries` runs, a run starts no background summary and compacts at its trigger; no
  run's summary is cancelled for another's, so every summary started is used (or ended with its run);
- with `stub_tool_results=False`, a summary starts only where the event can take it (it was thrown away as
  `cut_no_longer_fits` on every event before);
- runs left unfinished (`agent.iter`, a few steps, not exited) hold no more state than `max_tracked_runs`,
  and release it (their summaries cancelled) when they end.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
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
    StageFailed,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.events import CompactionStarted
from pydantic_ai_history.stages.compactor._background import TASK_NAME
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.skipif(not HAS_CAPABILITIES, reason='background work needs the run hook of a capability'),
]

WINDOW = 32_000
UNLIMITED = UsageLimits(request_limit=None)
ROW = 'id={i},region=eu-{r},status={s},latency_ms={l},path=/api/v{v}/items/{i}/detail,owner=team-{o}\n'


def page_text(run: int, number: int) -> str:
    """About 900 tokens of varied rows, with one distinctive line."""
    rows = ''.join(
        ROW.format(
            i=number * 30 + k, r=k % 7, s=200 + k % 5, l=(k * 37 + run) % 900, v=k % 3, o=(k + run) % 11
        )
        for k in range(30)
    )
    return f'ticket id: T-{run:03d}-{number:03d}\n{rows}'


def prompt(run: int) -> str:
    return f'Collect every ticket id. Run {run}'


@dataclass
class Summarizer:
    """Answers after `yields` turns of the event loop (several model steps of every run); counts its calls."""

    yields: int = 200
    started: int = 0
    cancelled: int = 0

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, model_name='summarizer')

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.started += 1
        try:
            for _ in range(self.yields):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        text = f'## Goal and constraints\ncollect ticket ids\n## Current state\nsummary {self.started}'
        return ModelResponse(parts=[TextPart(text)], usage=RequestUsage(input_tokens=100, output_tokens=40))


def loop(steps: int) -> Any:
    """One `fetch` a step, the page after the latest call (a compaction keeps it), then an answer."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        responses = [m for m in messages if isinstance(m, ModelResponse)]
        calls = [p for m in responses for p in m.parts if isinstance(p, ToolCallPart)]
        step = int(calls[-1].args_as_dict()['page']) + 1 if calls else 0
        if step < steps:
            return ModelResponse(parts=[TextPart(f'Page {step}.'), ToolCallPart('fetch', {'page': step})])
        return ModelResponse(parts=[TextPart('All pages done.')])

    return respond


def setup(
    steps: int,
    *,
    stubs: bool = True,
    capacity: int = 64,
    start: float = 0.6,
    tracked: int = 1_024,
    trigger: int | None = None,
) -> tuple[Agent[None, str], StrictProvider, Summarizer, Any, list[HistoryEvent]]:
    events: list[HistoryEvent] = []
    summarizer = Summarizer()
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW, max_tokens=trigger),
        summarizer=SummarizerSettings(model=summarizer.model()),
        artifacts=False,
        compaction=CompactionSettings(
            background_start=start, stub_tool_results=stubs, max_background_summaries=capacity
        ),
        on_event=events.append,
        max_tracked_runs=tracked,
    )
    provider = StrictProvider(loop(steps), context_window=WINDOW)
    agent = Agent(provider.model(), capabilities=[processor])

    @agent.tool
    async def fetch(ctx: RunContext[None], page: int) -> str:
        """Fetch one page of the dataset."""
        await asyncio.sleep(0)
        return page_text(int(str(ctx.prompt).rsplit(' ', 1)[-1]), page)  # the prompt ends with the run

    return agent, provider, summarizer, processor, events


def of(events: list[HistoryEvent], kind: type[HistoryEvent]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def held_at_once(events: list[HistoryEvent]) -> list[int]:
    """How many runs held a background summary after each event: from its start to its run's compaction."""
    holding: set[str | None] = set()
    counts = [0]
    for event in events:
        if isinstance(event, BackgroundSummaryStarted):
            holding.add(event.run_id)
        elif isinstance(event, CompactionStarted):
            holding.discard(event.run_id)
        counts.append(len(holding))
    return counts


@pytest.mark.slow
async def test_past_capacity_a_run_compacts_at_its_trigger_and_none_is_pushed_out() -> None:
    """8 runs, room for 3: before, each new summary cancelled the oldest live one, which its run started again
    on its next request (dozens of calls for 8 compactions); now every summary started is used."""
    runs = 8
    # 32 steps: one compaction each (at about step 24), and the runs end before their next summary starts;
    # without stubs every event summarizes, so every run would start one
    agent, provider, summarizer, processor, events = setup(32, capacity=3, stubs=False)

    async def run(number: int) -> None:
        result = await agent.run(prompt(number), usage_limits=UNLIMITED)
        assert result.output == 'All pages done.'

    await asyncio.gather(*(run(n) for n in range(runs)))
    assert not provider.rejected
    assert not of(events, StageFailed)
    compactions = of(events, CompactionResult)
    started, used = of(events, BackgroundSummaryStarted), of(events, BackgroundSummaryUsed)
    discarded = Counter(e.reason for e in of(events, BackgroundSummaryDiscarded))
    assert len(compactions) == runs, compactions
    assert used, 'the runs with room used their summaries'
    # at most 3 at once (a summary is held from its start to its run's event); how far apart the runs drift
    # (the threads that count their requests) decides whether a run ever finds all 3 taken, or starts later
    assert max(held_at_once(events)) == 3, 'the capacity was reached, and never passed'
    assert discarded == Counter(), discarded
    assert len(used) == len(started)
    assert summarizer.started <= 1.2 * len(compactions), (summarizer.started, len(compactions))
    assert processor.stats().overall.background_summaries_discarded == 0


async def test_without_stubs_a_summary_starts_where_the_event_can_take_it() -> None:
    """`stub_tool_results=False`: the summary made at 60% of the trigger left more verbatim than the target
    holds by the trigger, and was thrown away (`cut_no_longer_fits`) for a second, blocking one."""
    agent, provider, summarizer, processor, events = setup(34, stubs=False)
    result = await agent.run(prompt(0), usage_limits=UNLIMITED)
    assert result.output == 'All pages done.'
    assert not provider.rejected
    compactions = of(events, CompactionResult)
    (used,) = of(events, BackgroundSummaryUsed)
    assert not of(events, BackgroundSummaryDiscarded)
    assert [c.background for c in compactions] == [True], compactions
    (started,) = of(events, BackgroundSummaryStarted)
    trigger = processor.limits_for(provider.model()).trigger
    assert started.snapshot_tokens > 0.6 * trigger, 'later than background_start: when the cut can hold'
    assert used.summarizer_calls == 1
    assert summarizer.started == 1
    assert compactions[0].tokens_after <= processor.limits_for(provider.model()).target


async def test_runs_left_unfinished_hold_bounded_state() -> None:
    """Runs taken past the start of their summary (three requests before their trigger) and left open (still
    referenced): the runs going on are bounded by `max_tracked_runs` (one more each before), and the
    summaries by `max_background_summaries`."""
    agent, _, _, processor, events = setup(200, start=0.1, capacity=2, tracked=3, stubs=False)
    left: list[Any] = []
    try:
        for number in range(6):
            manager = agent.iter(prompt(number), usage_limits=UNLIMITED)
            run = await manager.__aenter__()
            left.append(manager)
            nodes = 0
            async for _ in run:
                nodes += 1
                if nodes >= 48:  # 23 requests, the last two under the trigger with a summary started
                    break
        assert processor._runs.open_count == 3
        assert len(of(events, BackgroundSummaryStarted)) == 2, 'the first two runs hold one each'
        assert not of(events, BackgroundSummaryDiscarded), 'none pushed out'
    finally:
        for manager in reversed(left):  # their cancel scopes nest: the last entered first
            await manager.__aexit__(None, None, None)
    assert processor._runs.open_count == 0
    assert {e.reason for e in of(events, BackgroundSummaryDiscarded)} == {'run_ended'}
    await asyncio.sleep(0)
    assert [t for t in asyncio.all_tasks() if t.get_name() == TASK_NAME] == []

"""Background compaction through a real `Agent` on a strict provider (`CompactionSettings.background_start`).

The summary of the next compaction event starts ahead of the trigger, on a snapshot, in an asyncio task; the
request that crosses the trigger uses it. Checked by order of events, never by wall-clock time (the latency
is measured in benchmarks/bench_cost.py's latency run):

- the summarizer call the event used started before the trigger request was processed, and none started
  while it was;
- it is the summary a blocking compaction makes for the same cut (same prompt but for the transcript's random
  nonce, same answer), and the history stays valid, within the window;
- a run that ends before its trigger cancels the work: no task left, no call left hanging;
- concurrent runs on one processor each use their own.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
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
    RequestProcessed,
    StageFailed,
    SummarizerSettings,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES, HAS_CAPABILITY_EVENTS, instrumented_agent_options
from pydantic_ai_history.messages._marks import marker_kind
from pydantic_ai_history.stages import _transcript
from pydantic_ai_history.stages.compactor import summary_sections
from pydantic_ai_history.stages.compactor._background import TASK_NAME
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),  # deprecated on late 1.x
]
needs_run_hook = pytest.mark.skipif(
    not HAS_CAPABILITIES, reason='background work needs the run hook of a capability'
)

WINDOW = 32_000
TRIGGER, TARGET = 16_000, 8_000
TASK = 'Go through the dataset one page at a time with the fetch tool and collect every ticket id.'


def pages(fixtures_dir: Path, count: int, size: int = 60) -> list[str]:
    """Real tool outputs (CSV rows, JSON records) of `size` lines, each with one distinctive fact in its
    middle."""
    lines: list[str] = []
    for name in ('airports.csv', 'seattle-weather.csv', 'cars.json', 'stocks.csv'):
        lines.extend((fixtures_dir / 'tool_outputs' / 'vega_datasets' / name).read_text().splitlines())
    out = []
    for i in range(count):
        chunk = lines[(i * size) % (len(lines) - size) :][:size]
        half = size // 2
        out.append('\n'.join([*chunk[:half], f'ticket id: T-{i:04d}', *chunk[half:]]))
    return out


def nonce_free(prompt: str) -> str:
    """The summarizer's prompt without the transcript's random nonce (drawn anew for every rendering)."""
    found = re.search(r'carry the nonce ([0-9a-f]+)', prompt)
    return prompt.replace(found.group(1), 'NONCE') if found else prompt


@dataclass
class Call:
    prompt: str
    """The prompt, nonce taken out."""
    processed: int
    """How many requests the processor had finished when the call started."""
    answer: str


@dataclass
class Summarizer:
    """A deterministic summarizer: its answer is a function of its prompt (nonce aside). `gate` holds every
    call until it is set (a summarizer slower than the model); `processed()` tells where the run is."""

    processed: Callable[[], int]
    gate: anyio.Event | None = None
    calls: list[Call] = field(default_factory=list)
    entered: int = 0
    """Calls that reached the summarizer (a background job cancelled before its call never does)."""
    cancelled: int = 0

    def model(self) -> FunctionModel:
        return FunctionModel(self.respond, model_name='summarizer')

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        prompt = nonce_free(
            '\n'.join(
                p.content
                for p in request.parts
                if isinstance(p, UserPromptPart) and isinstance(p.content, str)
            )
        )
        started = self.processed()
        self.entered += 1
        try:
            if self.gate is not None:
                await self.gate.wait()
        except BaseException:
            self.cancelled += 1
            raise
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
        answer = f'## Goal and constraints\ncollect ticket ids\n## Current state\nsummary {digest}'
        self.calls.append(Call(prompt, started, answer))
        return ModelResponse(
            parts=[TextPart(answer)], usage=RequestUsage(input_tokens=len(prompt) // 4, output_tokens=40)
        )


class Loop:
    """The scripted model: fetch `steps` pages one at a time, then answer. `on_call` runs at each call."""

    def __init__(self, steps: int, on_call: Callable[[int], None] | None = None) -> None:
        self.steps = steps
        self.on_call = on_call
        self.step = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step, self.step = self.step, self.step + 1
        if self.on_call is not None:
            self.on_call(step)
        if step < self.steps:
            return ModelResponse(
                parts=[
                    TextPart(f'Page {step} next.'),
                    ToolCallPart('fetch', {'page': step}, tool_call_id=f'c{step}'),
                ]
            )
        return ModelResponse(parts=[TextPart('All pages done.')])


def setup(
    fixtures_dir: Path,
    loop: Loop,
    summarizer_gate: anyio.Event | None = None,
    *,
    background_start: float | None = 0.6,
    keep_recent_tokens: int | None = None,
    max_tokens: int = TRIGGER,
    tracer_provider: Any = None,
    plain: bool = False,
    page_lines: int = 60,
) -> tuple[Any, StrictProvider, list[HistoryEvent], Summarizer, Any]:
    """The loop's agent with the processor as a capability, or with `plain`, as a plain history processor
    (`ProcessHistory` where pydantic-ai has capabilities, else `history_processors=`)."""
    data = pages(fixtures_dir, loop.steps, page_lines)
    events: list[HistoryEvent] = []
    summarizer = Summarizer(lambda: sum(isinstance(e, RequestProcessed) for e in events), summarizer_gate)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW, max_tokens=max_tokens, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=summarizer.model()),
        artifacts=False,
        # summaries win over stubs whatever the history (the cost rule is `_depth`'s own tests)
        compaction=CompactionSettings(
            background_start=background_start, cached_input_ratio=1.0, keep_recent_tokens=keep_recent_tokens
        ),
        on_event=events.append,
    )
    provider = StrictProvider(loop, context_window=WINDOW)
    from pydantic_ai import Agent

    capabilities: list[Any] = [processor]
    if tracer_provider is not None:
        from pydantic_ai.models.instrumented import InstrumentationSettings

        options = instrumented_agent_options(InstrumentationSettings(tracer_provider=tracer_provider))
        capabilities += options.get('capabilities', [])
    if not plain:
        agent = Agent(provider.model(), capabilities=capabilities)
    elif HAS_CAPABILITIES:
        from pydantic_ai.capabilities import ProcessHistory

        agent = Agent(provider.model(), capabilities=[ProcessHistory(processor)])
    else:
        agent = Agent(provider.model(), history_processors=[processor])

    @agent.tool_plain
    async def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        await anyio.sleep(0)
        return data[page]

    return agent, provider, events, summarizer, processor


def without_announcements(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The provider's copy of a history as the processor saw it: pydantic-ai sends its tool-availability delta
    (`read_artifact`, offered once stubs name it) as a user prompt to a model without a channel for it."""
    announced = re.compile(r'<system>The following tool\(s\) are now available: .*</system>')
    out: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            parts = [
                p
                for p in message.parts
                if not (
                    isinstance(p, UserPromptPart)
                    and isinstance(p.content, str)
                    and announced.fullmatch(p.content)
                )
            ]
            if not parts:
                continue
            message = dataclasses.replace(message, parts=parts)
        out.append(message)
    return out


def request_of(events: list[HistoryEvent], kind: type[HistoryEvent]) -> list[int]:
    """The index of the request in whose processing each event of `kind` was emitted."""
    found, processed = [], 0
    for event in events:
        if isinstance(event, RequestProcessed):
            processed += 1
        elif isinstance(event, kind):
            found.append(processed)
    return found


@needs_run_hook
async def test_the_event_uses_the_summary_made_before_its_trigger(
    fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one nonce for every transcript: its random tokens change how much of a record the view shows
    monkeypatch.setattr(_transcript, 'new_nonce', lambda: 'f00dfeedf00dfeed')
    gate = anyio.Event()
    # the summarizer answers only once the model has answered again: slower than a model step
    loop = Loop(40, on_call=lambda step: gate.set() if step > 0 else None)
    agent, provider, events, summarizer, processor = setup(fixtures_dir, loop, gate)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    assert not [e for e in events if isinstance(e, StageFailed)]
    for record in provider.requests:
        assert_valid_history(list(record.history))

    compactions = [e for e in events if isinstance(e, CompactionResult)]
    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    kinds = [type(e).__name__ for e in events if not isinstance(e, RequestProcessed)]
    assert compactions, kinds
    assert used, kinds
    # the first event ends with stubs alone (no summary planned for it); the first to summarize takes its own
    index = next(i for i, e in enumerate(compactions) if e.method == 'llm')
    first = compactions[index]
    assert first.background, first
    assert first.stubbed_parts > 0, first
    assert first.tokens_after <= TARGET, 'as deep as a blocking event: the gap after the snapshot is stubbed'
    trigger = request_of(events, CompactionResult)[index]
    started = request_of(events, BackgroundSummaryStarted)[0]
    assert started < trigger

    # the event's summary is the call of the job started before the trigger (which reaches its call a few
    # event-loop turns later: under load, as the trigger request is processed), and no other call started then
    answers = [c for c in summarizer.calls if c.answer in first.summary]
    assert len(answers) == 1, (first.summary, summarizer.calls)
    assert answers[0].processed <= trigger
    assert all(c.processed != trigger for c in summarizer.calls if c is not answers[0])
    assert used[0].summarizer_calls == first.summarizer_calls == 1
    stats = processor.stats().overall
    assert stats.background_summaries_used == len(used)
    assert stats.summarizer_calls == len(summarizer.calls)

    # a blocking compaction of the snapshot with the same cut asks the same and gets the same summary
    snapshot = without_announcements(provider.requests[started].history)
    blocking = Summarizer(lambda: 0)
    # its trigger under the snapshot, its verbatim tail the least (what the background cut keeps of it)
    baseline = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TARGET + 1, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=blocking.model()),
        artifacts=False,
        compaction=CompactionSettings(cached_input_ratio=1.0, keep_recent_tokens=1, stub_tool_results=False),
    )
    compacted = await baseline.process(snapshot, model=provider.model())
    assert [c.prompt for c in blocking.calls] == [answers[0].prompt]
    (summary,) = [m for m in compacted if marker_kind(m) == 'summary']
    assert summary_sections(summary).summary == answers[0].answer  # type: ignore[union-attr]


@needs_run_hook
async def test_a_summary_not_ready_at_the_trigger_holds_no_request_up(fixtures_dir: Path) -> None:
    """Past the trigger, the requests that fit the budget go out as they are while the summary is still being
    made; the first request after it is ready compacts with it, without waiting."""
    gate = anyio.Event()
    events: list[HistoryEvent] = []
    over_trigger = 0

    def on_call(step: int) -> None:
        nonlocal over_trigger
        # the summarizer finishes only once three requests have gone out past the trigger
        processed = [e for e in events if isinstance(e, RequestProcessed)]
        over_trigger = sum(e.tokens_after > TRIGGER for e in processed)
        if over_trigger >= 3:
            gate.set()

    # `on_call` reads the processor's event list through this name, bound here
    agent, provider, events, summarizer, processor = setup(fixtures_dir, Loop(40, on_call), gate)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    budget = processor.limits_for(provider.model()).budget
    assert over_trigger >= 3
    assert provider.peak_input_tokens <= budget
    for record in provider.requests:
        assert_valid_history(list(record.history))

    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    compactions = [e for e in events if isinstance(e, CompactionResult) and e.method == 'llm']
    assert compactions, [type(e).__name__ for e in events if not isinstance(e, RequestProcessed)]
    assert used, [type(e).__name__ for e in events if not isinstance(e, RequestProcessed)]
    first = compactions[0]
    assert first.background, first
    assert used[0].deferred_requests >= 3, used[0]
    assert used[0].ready, 'the event came once the summary was ready'
    assert used[0].waited_ms == 0.0
    # one summarizer call for the event: none started at the trigger
    assert used[0].summarizer_calls == first.summarizer_calls == 1
    assert len([c for c in summarizer.calls if c.answer in first.summary]) == 1


@needs_run_hook
async def test_a_run_that_ends_before_its_trigger_cancels_its_background_work(fixtures_dir: Path) -> None:
    gate = anyio.Event()  # never set: the summarizer would run forever
    # 24 pages: the first two events end with stubs alone (no summary starts ahead of them), the third would
    # summarize: its summary starts, and the run ends a request before that trigger
    agent, _, events, summarizer, processor = setup(fixtures_dir, Loop(24), gate, background_start=0.5)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert [e for e in events if isinstance(e, BackgroundSummaryStarted)], 'the run neared its trigger'
    assert [e.method for e in events if isinstance(e, CompactionResult)] == ['stubs', 'stubs']
    (discarded,) = [e for e in events if isinstance(e, BackgroundSummaryDiscarded)]
    assert discarded.reason == 'run_ended'
    assert not discarded.finished
    assert discarded.summarizer_calls == 0
    await anyio.sleep(0)
    await anyio.sleep(0)
    import asyncio

    assert [t for t in asyncio.all_tasks() if t.get_name() == TASK_NAME] == []
    # under load the run may end before the job reaches its call; one it made was cancelled, not left hanging
    assert summarizer.entered <= 1
    assert summarizer.cancelled == summarizer.entered, 'the summarizer call was cancelled, not left hanging'
    assert processor.stats().overall.background_summaries_discarded == 1


@needs_run_hook
async def test_a_request_that_crosses_the_trigger_with_nothing_under_way_starts_it_and_goes_out(
    fixtures_dir: Path,
) -> None:
    """A chat's next turn: the first run ends below `background_start` (0.99 of the trigger), and the second
    crosses the trigger with nothing under way. That request starts the summary in the background and goes
    out as it is (it fits the budget); the event comes with the next request and takes it (it used to
    summarize in the request path, the request waiting for it). The question (about 2,800 tokens) is larger
    than the verbatim tail's budget (1,000): the event reserves it outside that budget, and so does the
    start's room (it used to count it twice against the tail, and no summary started)."""
    agent, provider, events, summarizer, processor = setup(fixtures_dir, Loop(23), background_start=0.99)
    first = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    provider.respond = Loop(8)
    question = 'Now the dates too. ' + 'Every date counts, in whatever format. ' * 250
    second = await agent.run(
        question, message_history=first.all_messages(), usage_limits=UsageLimits(request_limit=None)
    )
    assert second.output == 'All pages done.'
    assert not provider.rejected
    assert provider.peak_input_tokens <= processor.limits_for(provider.model()).budget
    for record in provider.requests:
        assert_valid_history(list(record.history))
    summarized = [e for e in events if isinstance(e, CompactionResult) and e.method == 'llm']
    assert summarized, [type(e).__name__ for e in events if not isinstance(e, RequestProcessed)]
    assert all(e.background for e in summarized), 'no summary made in the request path'
    at_trigger = [e for e in events if isinstance(e, BackgroundSummaryStarted) and e.reason == 'trigger']
    assert at_trigger
    assert all(e.snapshot_tokens > TRIGGER for e in at_trigger), at_trigger
    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    assert len(used) == len(summarized)
    # (a summarizer and a model that answer at once: the event may wait the few loop turns its task takes)
    assert all(u.deferred_requests >= 1 for u in used), 'the request that started it went out as it was'
    assert len(summarizer.calls) == len(summarized)


@needs_run_hook
async def test_a_run_far_from_its_trigger_pays_for_no_summary(fixtures_dir: Path) -> None:
    """The history grows slowly (about 700 tokens a step): the run passes `background_start` and ends a few
    requests later, its trigger still six requests away. No summary starts and no summarizer call is paid
    for (one used to start at `background_start`, and was thrown away when the run ended)."""
    agent, provider, events, summarizer, _ = setup(fixtures_dir, Loop(18), page_lines=24)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    sizes = [e.tokens_after for e in events if isinstance(e, RequestProcessed)]
    assert sum(size > 0.6 * TRIGGER for size in sizes) >= 3, 'the run went on past background_start'
    assert sizes[-1] < TRIGGER
    assert TRIGGER - sizes[-1] > 3 * (sizes[-1] - sizes[-2]), 'further than a summary is expected to take'
    ahead = (BackgroundSummaryStarted, BackgroundSummaryDiscarded, CompactionResult)
    assert not [e for e in events if isinstance(e, ahead)]
    assert summarizer.calls == []
    assert summarizer.cancelled == 0


@needs_run_hook
async def test_the_start_waits_for_the_trigger_to_come_near_and_says_why(fixtures_dir: Path) -> None:
    """Before any summary was seen, one starts a few requests before the trigger (`UNMEASURED_REQUESTS`);
    once the summarizer's pace is known, as late as still leaves it that many requests before a request
    would have to wait (past the trigger the requests that fit go out as they are). Each is used."""
    agent, provider, events, summarizer, processor = setup(fixtures_dir, Loop(60), page_lines=24)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    limits = processor.limits_for(provider.model())
    started = [e for e in events if isinstance(e, BackgroundSummaryStarted)]
    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    assert len(started) >= 2, started
    first, later = started[0], started[1]
    assert first.snapshot_tokens > 0.6 * TRIGGER + 3 * first.tokens_per_step, 'later than background_start'
    assert (first.reason, first.expected_requests, first.needed_tokens) == ('lead', None, limits.trigger)
    assert first.requests_left <= 3
    assert later.expected_requests is not None, 'learned from the first'
    assert limits.trigger < later.needed_tokens <= limits.budget
    assert later.requests_left <= later.expected_requests or later.reason == 'trigger'
    assert len(used) == len(started) or len(used) == len(started) - 1, 'the last may end with the run'
    assert all(u.waited_ms == 0.0 for u in used), used
    assert len(summarizer.calls) == len(started)


@needs_run_hook
async def test_concurrent_runs_each_use_their_own(fixtures_dir: Path) -> None:
    loops = [Loop(30), Loop(30)]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        first = messages[0]
        assert isinstance(first, ModelRequest)
        prompt = next(p.content for p in first.parts if isinstance(p, UserPromptPart))
        return loops[int(str(prompt)[-1])](messages, info)

    agent, provider, events, summarizer, _ = setup(fixtures_dir, Loop(30))
    provider.respond = respond
    outputs: list[str] = []

    async def run(number: int) -> None:
        result = await agent.run(f'{TASK} Run {number}', usage_limits=UsageLimits(request_limit=None))
        outputs.append(result.output)

    async with anyio.create_task_group() as group:
        group.start_soon(run, 0)
        group.start_soon(run, 1)
    assert outputs == ['All pages done.', 'All pages done.']
    assert not provider.rejected
    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    compactions = [e for e in events if isinstance(e, CompactionResult) and e.background]
    assert len({e.run_id for e in used}) == 2, used
    # each run's event used its own run's summary: the same run id, and a summary of its own prompt
    for event in compactions:
        mine = [e for e in used if e.run_id == event.run_id]
        assert mine, event
    for call in summarizer.calls:
        assert ('Run 0' in call.prompt) != ('Run 1' in call.prompt), 'one run per summary'


@pytest.mark.skipif(not HAS_CAPABILITY_EVENTS, reason='capability events arrived with pydantic-ai 2.x')
async def test_spans_and_stream_events_say_what_became_of_each(fixtures_dir: Path) -> None:
    sdk = pytest.importorskip(
        'opentelemetry.sdk.trace', reason='opentelemetry-sdk is not installed (dev extra)'
    )
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from pydantic_ai_history.events import (
        BackgroundSummaryDiscardedEvent,
        BackgroundSummaryStartedEvent,
        BackgroundSummaryUsedEvent,
    )

    exporter = InMemorySpanExporter()
    tracer_provider = sdk.TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    # 45 pages: one event uses its background summary, and the run ends holding the next one
    agent, provider, events, _, _ = setup(fixtures_dir, Loop(45), tracer_provider=tracer_provider)
    streamed: list[Any] = []
    async with agent.run_stream_events(TASK, usage_limits=UsageLimits(request_limit=None)) as stream:
        async for event in stream:
            streamed.append(event)
    tracer_provider.shutdown()
    assert not provider.rejected

    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    assert used, [type(e).__name__ for e in events if not isinstance(e, RequestProcessed)]
    assert [e for e in streamed if isinstance(e, BackgroundSummaryStartedEvent)]
    used_events = [e for e in streamed if isinstance(e, BackgroundSummaryUsedEvent)]
    assert [(e.evicted_messages, e.summarizer_calls) for e in used_events] == [
        (e.evicted_messages, e.summarizer_calls) for e in used
    ]
    spans = [s for s in exporter.get_finished_spans() if s.name == 'background_compaction']
    outcomes = [(s.attributes or {}).get('pydantic_ai_history.background.outcome') for s in spans]
    assert outcomes.count('used') == len(used), outcomes
    discarded = [e for e in events if isinstance(e, BackgroundSummaryDiscarded)]
    assert outcomes.count('discarded') == len(discarded), outcomes
    # a discard during the run is streamed; the one at its end goes to `on_event` and the span only
    in_run = [e for e in discarded if e.reason != 'run_ended']
    assert len([e for e in streamed if isinstance(e, BackgroundSummaryDiscardedEvent)]) == len(in_run)


async def test_without_the_run_hook_the_summary_is_made_at_the_trigger(fixtures_dir: Path) -> None:
    """As a plain history processor (`ProcessHistory`, `history_processors=`) nothing would end background
    work with the run: no summary starts ahead, the event summarizes when it comes, as without the setting."""
    agent, provider, events, summarizer, _ = setup(fixtures_dir, Loop(40), plain=True)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    compactions = [e for e in events if isinstance(e, CompactionResult)]
    assert [e.method for e in compactions if e.method == 'llm'], compactions
    assert not [e for e in events if isinstance(e, (BackgroundSummaryStarted, BackgroundSummaryUsed))]
    assert not any(c.background for c in compactions)
    assert len(summarizer.calls) == sum(c.summarizer_calls for c in compactions)


async def chat(
    respond: Callable[[list[ModelMessage], AgentInfo], ModelResponse],
    summarize: Callable[[list[ModelMessage], AgentInfo], Awaitable[ModelResponse]],
    record: str,
    *,
    turns: int,
    question: str = '',
    limits: tuple[int, int] = (12_000, 4_000),
) -> list[HistoryEvent]:
    """A chat reloaded each turn (a run per user message, given the history the last one returned) on a
    strict provider, a 32K window, a 12K trigger and a 4K target (`limits`): the processor's events. `lookup`
    returns `record`, and each user message ends with `question`; every history is valid and no request is
    refused."""
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=32_000, max_tokens=limits[0], target_tokens=limits[1]),
        summarizer=SummarizerSettings(model=FunctionModel(summarize, model_name='gpt-4o-mini')),
        on_event=events.append,
    )
    provider = StrictProvider(respond, context_window=32_000)
    from pydantic_ai import Agent

    agent = Agent(provider.model(), capabilities=[processor])

    @agent.tool_plain
    def lookup(item: int) -> str:
        """Look an item up."""
        return f'item {item}: {record}'

    history: list[ModelMessage] = []
    for turn in range(turns):
        result = await agent.run(
            f'Question {turn}: what about item {turn}?{question}', message_history=history
        )
        history = result.all_messages()
        assert_valid_history(history, finished=True)
    assert not provider.rejected
    return events


@needs_run_hook
async def test_a_chat_whose_runs_end_first_pays_for_no_summary_it_throws_away() -> None:
    """A chat reloaded each turn: one run per user message (a lookup, then an answer), two requests a run.
    A summary started in the background would be thrown away when its run ends, paid for, and the next run's
    event would summarize again: once the runs' length is known, none starts, and every summarizer call is
    the one an event uses."""
    calls: list[int] = []

    async def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(len(messages))
        await anyio.sleep(0.01)
        usage = RequestUsage(input_tokens=100, output_tokens=20)
        return ModelResponse(parts=[TextPart('## Summary\nthe chat so far')], usage=usage)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1].parts[-1], UserPromptPart):
            call = ToolCallPart('lookup', {'item': len(messages)}, tool_call_id=f'call_{len(messages)}')
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart('What I found: ' + 'details of the item ' * 150)])

    events = await chat(respond, summarize, 'a field and its value ' * 40, turns=45)
    summaries = [e for e in events if isinstance(e, CompactionResult) and e.method == 'llm']
    assert len(summaries) >= 2, 'the chat reached its trigger more than once'
    assert not [e for e in events if isinstance(e, BackgroundSummaryDiscarded)], 'no summary thrown away'
    assert len(calls) == sum(e.summarizer_calls for e in summaries)


def twenty_lookups(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A long run: twenty `lookup` calls after the user's message, then an answer."""
    lookups = 0
    for message in reversed(messages):
        if any(isinstance(p, UserPromptPart) for p in message.parts):
            break
        lookups += isinstance(message, ModelRequest)
    if lookups >= 20:
        return ModelResponse(parts=[TextPart('Here is what I found. ' + 'answer words ' * 120)])
    call = ToolCallPart('lookup', {'item': len(messages)}, tool_call_id=f'call_{len(messages)}')
    return ModelResponse(parts=[call])


@needs_run_hook
async def test_a_summarizer_slower_than_the_runs_is_waited_for_not_paid_twice() -> None:
    """A chat of long runs (twenty lookups each) whose model answers at once, and a summarizer slower than
    the requests between a summary's start and its event. The requests that go out while it runs stop where
    its cut still serves the event (counted on the messages added, as its room is, with stubs' ids tokenizing
    a few tokens either way), so the event waits for it rather than throwing it away and paying again. A
    summary that is thrown away ends before the event makes its own: never two summarizer calls at once."""
    in_flight, most, calls = [0], [0], [0]

    async def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls[0] += 1
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        try:
            await anyio.sleep(0.05)
        finally:
            in_flight[0] -= 1
        usage = RequestUsage(input_tokens=100, output_tokens=100)
        return ModelResponse(parts=[TextPart('## Summary\nthe chat so far: ' + 'x ' * 200)], usage=usage)

    events = await chat(twenty_lookups, summarize, 'field value ' * 150, turns=10)
    summaries = [e for e in events if isinstance(e, CompactionResult) and e.method == 'llm']
    discarded = [e for e in events if isinstance(e, BackgroundSummaryDiscarded)]
    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    started = [e for e in events if isinstance(e, BackgroundSummaryStarted)]
    assert len(summaries) >= 8, 'every run but the first reached its trigger'
    assert len(discarded) <= 1, f'at most the first, before the pace is known: {discarded}'
    # a run that reaches its trigger fewer requests before its end than a summary takes summarizes there
    assert used
    assert len(started) == len(used) + len(discarded), 'the events took the summaries made ahead of them'
    assert calls[0] <= len(summaries) + len(discarded)
    assert most[0] == 1, 'a summary thrown away ends before its event summarizes'


@needs_run_hook
async def test_a_chat_of_long_questions_pays_for_no_summary_its_events_cannot_use() -> None:
    """Each question is about 2,000 tokens, with a 16K trigger and a 9K target: the event keeps the current
    question, the first one (in the head) and a summary, and its newest units whole up to its verbatim tail
    (about 1,100 tokens), so the summary made ahead must be started late enough for what the history adds
    until the event to fit beside them. The start plans that tail as the event does, unstubbed: the events
    use the summaries made ahead (it used to count the tail as stubbed, and nearly every summary made ahead
    was thrown away at its event and paid for again)."""
    calls = [0]

    async def summarize(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls[0] += 1
        await anyio.sleep(0.05)
        usage = RequestUsage(input_tokens=100, output_tokens=100)
        return ModelResponse(parts=[TextPart('## Summary\nthe chat so far: ' + 'x ' * 200)], usage=usage)

    question = ' Tell me its history too.' + ' and its history' * 660
    events = await chat(
        twenty_lookups, summarize, 'field value ' * 150, turns=12, question=question, limits=(16_000, 9_000)
    )
    summaries = [e for e in events if isinstance(e, CompactionResult) and e.method == 'llm']
    discarded = [e for e in events if isinstance(e, BackgroundSummaryDiscarded)]
    used = [e for e in events if isinstance(e, BackgroundSummaryUsed)]
    assert len(summaries) >= 10, 'every run but the first reached its trigger'
    assert len(discarded) <= 1, f'at most one summary thrown away: {[e.reason for e in discarded]}'
    assert calls[0] <= len(summaries) + 1
    assert len(used) >= len(summaries) - 2, 'the summaries were made ahead'

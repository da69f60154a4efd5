"""What a compacting run shows in pydantic-ai's own observability: its event stream and its trace.

A real `Agent` with the processor as a capability and a strict simulated provider; the run is instrumented
with an OpenTelemetry SDK tracer provider of its own (not the global one), the way
`Instrumentation(settings=InstrumentationSettings(tracer_provider=tp))` or `Agent(instrument=...)` sets it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.usage import UsageLimits

from _compaction import MAJOR, StubSummarizer, agent_with
from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    SummarizerSettings,
)
from pydantic_ai_history._compat import HAS_CAPABILITY_EVENTS, instrumented_agent_options, result_usage
from pydantic_ai_history.events import (
    CompactionFinishedEvent,
    CompactionStarted,
    CompactionStartedEvent,
    ContextUsageEvent,
    HistoryStreamEvent,
    RequestProcessed,
)
from pydantic_ai_history.testing import StrictProvider

sdk = pytest.importorskip('opentelemetry.sdk.trace', reason='opentelemetry-sdk is not installed (dev extra)')
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),
]

TRIGGER, TARGET, WINDOW = 4_000, 1_500, 6_000
STEPS = 14
PAGE = 'row,value\n' + '\n'.join(f'{i},{i * 37 % 1000}' for i in range(150))


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, Any]]:
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter, provider
    provider.shutdown()


def _run_setup(
    tracer_provider: Any, capabilities: Sequence[Any] = ()
) -> tuple[Agent[None, str], StrictProvider, StubSummarizer, list[HistoryEvent]]:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(provider.requests)
        if step >= STEPS:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('fetch', {'page': step}, tool_call_id=f'call_{step}')])

    provider = StrictProvider(respond, context_window=WINDOW)
    summarizer = StubSummarizer()
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        artifacts=False,
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=summarizer.model()),
        on_history_event=events.append,
    )
    options = instrumented_agent_options(InstrumentationSettings(tracer_provider=tracer_provider))
    if capabilities:
        options['capabilities'] = [*options.get('capabilities', ()), *capabilities]
    agent = agent_with(provider.model(), processor, **options)

    @agent.tool_plain
    def fetch(page: int) -> str:
        """Fetch one page."""
        return f'page {page}\n{PAGE}'

    return agent, provider, summarizer, events


@pytest.mark.skipif(MAJOR < 2, reason='capability events arrived with pydantic-ai 2.x')
async def test_the_event_stream_shows_context_usage_and_each_compaction(exporter: Any) -> None:
    assert HAS_CAPABILITY_EVENTS
    agent, provider, summarizer, events = _run_setup(exporter[1])
    streamed: list[HistoryStreamEvent] = []
    async with agent.run_stream_events(
        'Analyse every page.', usage_limits=UsageLimits(request_limit=None)
    ) as s:
        async for event in s:
            if isinstance(event, HistoryStreamEvent):
                streamed.append(event)

    usage = [e for e in streamed if isinstance(e, ContextUsageEvent)]
    assert len(usage) == len(provider.requests) == STEPS
    # what the stream says each request holds is what the processor computed, and every one fits the window
    assert all(e.utilization is not None and 0 < e.utilization <= 1 for e in usage)
    assert all(e.kind == 'pydantic_ai_history.context_usage' and e.capability_id for e in usage)

    results = [e for e in events if isinstance(e, CompactionResult)]
    assert results, 'the run compacted'
    started = [e for e in streamed if isinstance(e, CompactionStartedEvent)]
    finished = [e for e in streamed if isinstance(e, CompactionFinishedEvent)]
    assert len(started) == len(finished) == len(results) == summarizer.calls
    for begin, end, result in zip(started, finished, results, strict=True):
        assert begin.tokens_before == end.tokens_before == result.tokens_before > TRIGGER
        assert end.tokens_after == result.tokens_after < begin.tokens_before
        assert end.summary == result.summary
        assert end.method == 'llm'
    # the stream keeps the order of the processor's decisions: started, finished, then the request's usage
    order = [type(e).__name__ for e in streamed]
    first = order.index('CompactionStartedEvent')
    assert order[first : first + 3] == [
        'CompactionStartedEvent',
        'CompactionFinishedEvent',
        'ContextUsageEvent',
    ]
    assert len([e for e in events if isinstance(e, CompactionStarted)]) == len(results)


@pytest.mark.skipif(MAJOR < 2, reason='capability events arrived with pydantic-ai 2.x')
async def test_an_iter_run_and_its_handler_see_the_same_events(exporter: Any) -> None:
    agent, provider, _, _ = _run_setup(exporter[1])
    handled: list[str] = []

    async def handler(ctx: Any, stream: Any) -> None:
        async for event in stream:
            if isinstance(event, HistoryStreamEvent):
                handled.append(event.kind)

    await agent.run(
        'Analyse every page.', usage_limits=UsageLimits(request_limit=None), event_stream_handler=handler
    )
    assert handled.count('pydantic_ai_history.context_usage') == len(provider.requests)
    assert 'pydantic_ai_history.compaction_finished' in handled


async def test_the_runs_trace_holds_the_compaction_and_the_summarizer_request(exporter: Any) -> None:
    spans_out, tracer_provider = exporter
    agent, provider, summarizer, events = _run_setup(tracer_provider)
    result = await agent.run('Analyse every page.', usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'done'
    spans = spans_out.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}

    def ancestors(span: Any) -> list[str]:
        names = []
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            names.append(span.name)
        return names

    [run] = [s for s in spans if s.parent is None]
    processing = [s for s in spans if s.name == 'pydantic_ai_history.process']
    # only requests the processor changed leave a span: an idle one leaves none
    changed = [
        e
        for e in events
        if isinstance(e, RequestProcessed)
        and (e.messages_before, e.tokens_before) != (e.messages_after, e.tokens_after)
    ]
    assert 1 <= len(processing) == len(changed) < len(provider.requests)
    if MAJOR >= 2:
        # the capability's hook runs inside the run's span; 1.x calls history processors outside any
        # span of the run but still on the run's tracer
        assert all(run.name in ancestors(s) for s in processing)
    compactions = [s for s in spans if s.name == 'compact_messages']
    results = [e for e in events if isinstance(e, CompactionResult)]
    assert len(compactions) == len(results) >= 1
    for span, event in zip(compactions, results, strict=True):
        assert span.attributes['gen_ai.conversation.compacted'] is True
        assert span.attributes['pydantic_ai_history.tokens_after'] == event.tokens_after
        assert ancestors(span)[:2] == ['pydantic_ai_history.compactor', 'pydantic_ai_history.process']
    # the summarizer's request is a chat span under the compaction; every request's tokens are in the trace
    chats = [s for s in spans if s.name.startswith('chat ')]
    summaries = [s for s in chats if 'compact_messages' in ancestors(s)]
    assert len(summaries) == summarizer.calls == len(results)
    assert len(chats) == len(provider.requests) + summarizer.calls
    traced_input = sum(int(s.attributes.get('gen_ai.usage.input_tokens', 0)) for s in chats)
    assert traced_input == result_usage(result).input_tokens


@pytest.mark.skipif(MAJOR < 2, reason='capability events arrived with pydantic-ai 2.x')
async def test_ui_forwarding_puts_the_events_in_the_vercel_ai_stream(exporter: Any) -> None:
    """pydantic-ai's UI adapters keep capability events to the agent; `ui_forwarding()` hands them on."""
    from pydantic_ai.ui.vercel_ai import VercelAIEventStream

    from pydantic_ai_history.events import ui_forwarding

    async def chunks(forward: bool) -> list[Any]:
        agent, _, _, _ = _run_setup(exporter[1], [ui_forwarding()] if forward else [])
        async with agent.run_stream_events(
            'Analyse every page.', usage_limits=UsageLimits(request_limit=None)
        ) as events:
            return [c async for c in VercelAIEventStream().transform_stream(events)]

    without = [c for c in await chunks(False) if 'pydantic_ai_history' in getattr(c, 'type', '')]
    assert without == [], 'the adapter forwards no capability event by itself'
    data = [c for c in await chunks(True) if getattr(c, 'type', '') == 'data-pydantic_ai_history']
    kinds = [c.data['kind'] for c in data]
    assert kinds.count('pydantic_ai_history.context_usage') == STEPS
    finished = [c.data for c in data if c.data['kind'] == 'pydantic_ai_history.compaction_finished']
    assert finished
    assert all(f['tokens_after'] < f['tokens_before'] and f['method'] == 'llm' for f in finished)

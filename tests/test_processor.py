"""The processor: guarded stages, events, per-run stats under concurrency, the idle path, logging, spans."""

from __future__ import annotations

import errno
import logging
from typing import Any

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart

from _history import call, reply, result, system_user, user
from pydantic_ai_history import (
    ContentLost,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    RequestProcessed,
    SlidingWindow,
    StageFailed,
    WindowApplied,
    assert_valid_history,
    validate_history,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.messages.validate import StructureCheck
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.stages.window import note_transcript
from pydantic_ai_history.store import MemoryStore
from pydantic_ai_history.testing import StrictProvider

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings('ignore::DeprecationWarning')]

WINDOW = 6_000
FILLER = 'the quick brown fox jumps over the lazy dog while the cat sleeps ' * 60  # ~780 tokens


def _attach(processor: HistoryProcessor) -> dict[str, Any]:
    """The way this pydantic-ai takes a processor (capability where there are capabilities)."""
    return (
        {'capabilities': [processor.capability()]}
        if HAS_CAPABILITIES
        else {'history_processors': [processor]}
    )


def _tool_loop(calls: int) -> Any:
    state = {'n': 0}

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        state['n'] += 1
        if state['n'] <= calls:
            return ModelResponse(
                parts=[ToolCallPart('fetch', {'i': state['n']}, tool_call_id=f'c{state["n"]}')]
            )
        return ModelResponse(parts=[TextPart(f'done after {calls} calls')])

    return respond


def _agent(provider: StrictProvider, processor: HistoryProcessor) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(provider.model(), system_prompt='Be brief.', **_attach(processor))

    @agent.tool_plain
    def fetch(i: int) -> str:
        """Fetch a page."""
        return f'page {i}: {FILLER}'

    return agent


class Exploding:
    name = 'exploding'

    async def __call__(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
        raise RuntimeError('boom')


class Breaking:
    """Drops the tool returns of the current request: a stage bug that must never reach the model."""

    name = 'breaking'

    async def __call__(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
        return [*messages[:-1], user('lost the tool returns')] if len(messages) > 2 else messages


async def test_a_raising_stage_is_skipped_and_the_run_continues():
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[Exploding(), SlidingWindow()],
        on_history_event=events.append,
        policy=ContextPolicy(context_window=WINDOW),
    )
    provider = StrictProvider(_tool_loop(8), context_window=WINDOW)
    out = await _agent(provider, processor).run('go')
    assert out.output == 'done after 8 calls'
    failures = [e for e in events if isinstance(e, StageFailed)]
    assert len(failures) == 9
    assert {f.stage for f in failures} == {'exploding'}
    assert 'RuntimeError: boom' in failures[0].error
    assert [e for e in events if isinstance(e, WindowApplied)]  # the next stage still ran
    assert provider.rejected == []
    assert processor.stats().overall.stage_failures == 9


async def test_a_stage_that_breaks_the_history_is_discarded():
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[Breaking()], on_history_event=events.append, policy=ContextPolicy(context_window=WINDOW)
    )
    history = [system_user('sys', 'task'), call('fetch', 'c1'), result('fetch', 'c1', 'page')]
    out = await processor.process(history)
    assert out == history
    [failed] = [e for e in events if isinstance(e, StageFailed)]
    assert failed.stage == 'breaking'
    assert 'dangling_tool_call' in failed.error


async def test_an_on_event_callback_that_raises_does_not_break_the_run(caplog: pytest.LogCaptureFixture):
    def bad_handler(event: HistoryEvent) -> None:
        raise ValueError('handler bug')

    processor = HistoryProcessor(
        stages=[SlidingWindow()], on_history_event=bad_handler, policy=ContextPolicy(context_window=WINDOW)
    )
    provider = StrictProvider(_tool_loop(8), context_window=WINDOW)
    with caplog.at_level(logging.ERROR, logger='pydantic_ai_history'):
        out = await _agent(provider, processor).run('go')
    assert out.output == 'done after 8 calls'
    assert 'on_event callback raised' in caplog.text
    assert processor.stats().overall.requests == 9


async def test_twenty_concurrent_runs_have_separate_stats():
    processor = HistoryProcessor(stages=[SlidingWindow()], policy=ContextPolicy(context_window=WINDOW))
    providers: dict[int, StrictProvider] = {}
    outputs: dict[int, str] = {}

    async def one(i: int) -> None:
        provider = providers[i] = StrictProvider(_tool_loop(i % 7 + 1), context_window=WINDOW)
        outputs[i] = (await _agent(provider, processor).run(f'run {i}')).output

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(one, i)

    assert outputs == {i: f'done after {i % 7 + 1} calls' for i in range(20)}
    stats = processor.stats()
    assert len(stats.runs) == 20
    assert sorted(r.requests for r in stats.runs.values()) == sorted(i % 7 + 2 for i in range(20))
    # each run's token totals are its own: they match what its provider received, request by request
    per_run_sent = sorted(sum(1 for _ in p.requests) for p in providers.values())
    assert per_run_sent == sorted(r.requests for r in stats.runs.values())
    overall = stats.overall
    assert overall.requests == sum(r.requests for r in stats.runs.values())
    assert overall.tokens_in == sum(r.tokens_in for r in stats.runs.values())
    assert overall.tokens_out == sum(r.tokens_out for r in stats.runs.values())
    assert overall.window_applications == sum(r.window_applications for r in stats.runs.values()) > 0
    assert overall.peak_tokens_out == max(r.peak_tokens_out for r in stats.runs.values())
    assert all(not p.rejected for p in providers.values())


async def test_stats_are_snapshots_with_utilization_and_reduction():
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(context_window=10_000, budget_tokens=1_000),
    )
    history = [user('task'), reply(FILLER), user(FILLER), reply('ok'), user('now')]
    out = await processor.process(history)
    assert_valid_history(out, original=history)
    first = processor.stats()
    assert first.overall.requests == 1
    assert first.overall.window_applications == 1
    assert 0 < first.overall.reduction_percent < 100
    assert first.overall.last_utilization == pytest.approx(first.overall.tokens_out / 10_000)
    assert first.overall.peak_utilization == first.overall.last_utilization
    assert first.runs == {}  # no RunContext: counted overall only
    await processor.process(history)
    assert first.overall.requests == 1
    assert processor.stats().overall.requests == 2


async def test_idle_path_validates_only_the_new_messages_and_rebuilds_nothing(
    monkeypatch: pytest.MonkeyPatch,
):
    validated: list[int] = []
    real = StructureCheck.extend

    def counting(self: StructureCheck, messages: Any) -> None:
        validated.append(len(messages))
        real(self, messages)

    monkeypatch.setattr(StructureCheck, 'extend', counting)
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        on_history_event=events.append,
        policy=ContextPolicy(context_window=WINDOW),
    )
    history = [system_user('sys', 'task'), call('fetch', 'c1'), result('fetch', 'c1', 'a page')]
    for _ in range(5):
        out = await processor.process(history)
        assert out is history, 'a history that fits comes back itself: nothing copied'
        assert len(out) == len(history)
        history = [*out, reply('more?'), user('yes')]
    # the first input is checked whole; every later one only for the messages it adds
    assert validated == [3, 2, 2, 2, 2]
    assert [type(e) for e in events] == [RequestProcessed] * 5


async def test_invalid_input_is_reported_even_when_no_stage_acts():
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        on_history_event=events.append,
        policy=ContextPolicy(context_window=WINDOW),
    )
    history = [
        user('task'),
        call('fetch', 'c1'),
        user('the tool result never came'),
        reply('ok'),
        user('now'),
    ]
    out = await processor.process(history)
    assert out == history
    warnings = [e for e in events if isinstance(e, HistoryWarning)]
    assert [w.code for w in warnings] == ['invalid_input']
    assert 'dangling_tool_call' in warnings[0].details['violations'][0]
    # a continuation of a valid history that brings a broken pair is caught by the incremental check
    events.clear()
    valid = [system_user('sys', 'task'), call('fetch', 'c1'), result('fetch', 'c1', 'a page')]
    out = await processor.process(valid)
    broken = [*out, call('fetch', 'c2'), user('no result for c2'), reply('ok'), user('now')]
    await processor.process(broken)
    codes = [w.details['violations'] for w in events if isinstance(w, HistoryWarning)]
    assert len(codes) == 1
    assert 'dangling_tool_call' in codes[0][0]
    assert 'message 3' in codes[0][0]


class _FullStore(MemoryStore):
    """A store on a full disk: every write fails as the OS reports it."""

    async def _put(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, 'No space left on device')


@pytest.mark.parametrize('full', [False, True], ids=['store', 'full-store'])
async def test_invalid_input_is_reported_when_a_stage_changes_it(full: bool):
    events: list[HistoryEvent] = []
    store = _FullStore() if full else MemoryStore()
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        on_history_event=events.append,
        store=store,
        policy=ContextPolicy(budget_tokens=300),
    )
    history = [
        user('task'),
        result('fetch', 'orphan', 'the orphan fact 7731'),
        reply(FILLER),
        user(FILLER),
        reply('ok'),
        user('now'),
    ]
    out = await processor.process(history)
    assert_valid_history(out)  # the orphan was in the dropped part
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    if not full:  # what the window dropped is stored (the note names it): nothing is reported lost
        assert codes == ['invalid_input']
        with processor.marks():  # on 1.0 the note is known by its seal, keyed with the store's secret
            [artifact] = [a for a in map(note_transcript, out) if a is not None]
        assert '7731' in await read_artifact_text(processor.store, artifact)
        return
    assert codes == ['invalid_input', 'transcript_store_failed', 'window_dropped']
    [lost] = [e for e in events if isinstance(e, ContentLost)]
    assert lost.tool_calls == ('fetch#orphan',), 'what the window dropped is named'


async def test_window_decisions_are_logged(caplog: pytest.LogCaptureFixture):
    processor = HistoryProcessor(
        stages=[SlidingWindow()], model='gpt-4o', policy=ContextPolicy(budget_tokens=600)
    )
    with caplog.at_level(logging.INFO, logger='pydantic_ai_history'):
        await processor.process([user('task'), reply(FILLER), user(FILLER), reply('ok'), user('now')])
    assert any(
        r.name == 'pydantic_ai_history.window' and 'window: 5 -> ' in r.getMessage() for r in caplog.records
    )


async def test_empty_history_is_returned_with_a_warning():
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        on_history_event=events.append,
        policy=ContextPolicy(context_window=WINDOW),
    )
    assert await processor.process([]) == []
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['empty_history']


class _FakeSpan:
    def __init__(self) -> None:
        self.attributes: dict[str, Any] = {}

    def is_recording(self) -> bool:
        return True

    def set_attributes(self, attributes: dict[str, Any]) -> None:
        self.attributes.update(attributes)

    def end(self) -> None:
        return None

    def __enter__(self) -> _FakeSpan:
        return self

    def __exit__(self, *args: object) -> None:
        return None


class _FakeTracer:
    def __init__(self) -> None:
        self.spans: list[tuple[str, _FakeSpan]] = []

    def start_as_current_span(self, name: str, attributes: Any = None) -> _FakeSpan:
        span = _FakeSpan()
        self.spans.append((name, span))
        return span

    def start_span(self, name: str, start_time: int | None = None) -> _FakeSpan:
        return self.start_as_current_span(name)


async def test_a_span_per_request_carries_the_numbers():
    """The contract with the OpenTelemetry API, without the SDK (see the next test for a real exporter)."""
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(context_window=WINDOW, budget_tokens=600),
    )
    tracer = processor._tracer = _FakeTracer()
    await processor.process([user('task'), reply(FILLER), user(FILLER), reply('ok'), user('now')])
    # the request's span, and within it one per stage
    assert [name for name, _ in tracer.spans] == ['pydantic_ai_history.process', 'pydantic_ai_history.window']
    span = tracer.spans[0][1]
    assert span.attributes['pydantic_ai_history.messages_before'] == 5
    assert (
        span.attributes['pydantic_ai_history.tokens_after']
        < span.attributes['pydantic_ai_history.tokens_before']
    )
    assert span.attributes['pydantic_ai_history.context_window'] == WINDOW


async def test_span_with_the_opentelemetry_sdk():
    sdk = pytest.importorskip(
        'opentelemetry.sdk.trace', reason='opentelemetry-sdk is not installed (the dev extra has it)'
    )
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    processor = HistoryProcessor(
        stages=[SlidingWindow()], model='gpt-4o', policy=ContextPolicy(budget_tokens=600)
    )
    processor._tracer = provider.get_tracer('test')
    await processor.process([user('task'), reply(FILLER), user(FILLER), reply('ok'), user('now')])
    stage, span = exporter.get_finished_spans()
    assert span.name == 'pydantic_ai_history.process'
    assert stage.name == 'pydantic_ai_history.window'
    assert stage.parent.span_id == span.context.span_id
    assert span.attributes['pydantic_ai_history.messages_before'] == 5
    assert span.start_time <= stage.start_time <= stage.end_time <= span.end_time

    # a request that changes nothing leaves no span: an instrumented app's traces are not crowded
    exporter.clear()
    history = [user('task'), reply('ok'), user('now')]
    assert await processor.process(history) is history
    assert exporter.get_finished_spans() == ()


async def test_a_link_without_a_file_extension_does_not_break_the_run() -> None:
    """`ImageUrl.media_type` raises when the URL does not say; counting and every stage must cope."""
    from pydantic_ai.messages import ImageUrl

    from pydantic_ai_history import create_history_processor

    events: list[HistoryEvent] = []
    processor = create_history_processor(policy=ContextPolicy(context_window=WINDOW), on_event=events.append)
    provider = StrictProvider(_tool_loop(2), context_window=WINDOW)
    agent = _agent(provider, processor)
    result = await agent.run(['What is in this picture?', ImageUrl('https://cdn.example.com/i/abc123')])
    assert result.output == 'done after 2 calls'
    assert not [e for e in events if isinstance(e, StageFailed)]
    assert not provider.rejected


async def test_an_unexpected_error_outside_the_stages_passes_the_history_on(monkeypatch: pytest.MonkeyPatch):
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        on_history_event=events.append,
        policy=ContextPolicy(context_window=WINDOW),
    )
    counter = processor.counter_for('gpt-4o')

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError('a part type nobody foresaw')

    monkeypatch.setattr(counter, 'estimate', broken)
    monkeypatch.setattr(counter, 'upper_bound', broken)  # the bound reads every part too
    history = [system_user('sys', 'task'), call('fetch', 'c1'), result('fetch', 'c1', 'a page')]
    out = await processor.process(history)
    assert out == history
    failures = [e for e in events if isinstance(e, StageFailed)]
    assert [f.stage for f in failures] == ['processor']
    assert 'a part type nobody foresaw' in failures[0].error


async def test_context_utilization_applies_to_every_stage() -> None:
    """A third of a 30K window: the compactor triggers at 80% of 10K, not of 30K, so the window never has to
    drop what the compactor would have summarized."""
    from pydantic_ai_history import CompactionResult, SummarizerSettings, create_history_processor

    events: list[HistoryEvent] = []
    summaries: list[str] = []

    def summarize(messages: list[ModelMessage], info: Any) -> ModelResponse:
        summaries.append('called')
        return ModelResponse(parts=[TextPart('## Goal\nread pages\n## Current state\nreading')])

    from pydantic_ai.models.function import FunctionModel

    processor = create_history_processor(
        policy=ContextPolicy(context_window=30_000, utilization=1 / 3),
        summarizer=SummarizerSettings(model=FunctionModel(summarize)),
        on_event=events.append,
    )
    provider = StrictProvider(_tool_loop(25), context_window=30_000)
    await _agent(provider, processor).run('read every page')
    compactions = [e for e in events if isinstance(e, CompactionResult)]
    assert compactions, 'the compactor ran inside the reduced window'
    assert not [e for e in events if isinstance(e, WindowApplied)], 'the window never had to cut'
    assert provider.peak_input_tokens <= 10_000
    assert len(summaries) == sum(c.summarizer_calls for c in compactions)


async def test_manual_compaction_is_guarded_like_a_stage() -> None:
    class BrokenCompactor:
        name = 'compactor'

        async def __call__(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
            return messages

        async def compact_history(
            self, messages: list[ModelMessage], context: Any, *, focus: str | None = None
        ) -> Any:
            return [messages[-1], messages[0]]  # opens with a tool return: invalid

    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[BrokenCompactor()],
        model='gpt-4o',
        on_history_event=events.append,
        policy=ContextPolicy(context_window=WINDOW),
    )
    history = [system_user('sys', 'task'), call('fetch', 'c1'), result('fetch', 'c1', 'a page')]
    out = await processor.compact(history, focus='the pages')
    assert out == history
    assert [e.stage for e in events if isinstance(e, StageFailed)] == ['compactor']


async def test_incremental_input_check_sees_answers_and_frontiers_across_the_seam():
    """A call left open by the previous input may be answered by a message this input adds (a deferred
    result), or stop being the live frontier when a later response arrives: the incremental check agrees with
    a full validation at every step."""
    from pydantic_ai.messages import ToolReturnPart

    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        on_history_event=events.append,
        policy=ContextPolicy(context_window=WINDOW),
    )
    both = ModelResponse(
        parts=[
            ToolCallPart('delete_file', {'p': 'a'}, tool_call_id='a'),
            ToolCallPart('delete_file', {'p': 'b'}, tool_call_id='b'),
        ]
    )
    answer_a = ModelRequest(parts=[ToolReturnPart('delete_file', 'deleted a', 'a')])
    answer_b = ModelRequest(parts=[ToolReturnPart('delete_file', 'deleted b', 'b')])
    resumed = [user('task'), both, answer_a, answer_b]
    pending = [user('task'), both, answer_a, user('never mind')]
    for steps in (
        [resumed[:3], resumed, [*resumed, reply('done'), user('thanks')]],
        [pending, [*pending, reply('ok'), user('now')]],
    ):
        check = processor._input_check('incremental')
        fresh = HistoryProcessor(stages=[], model='gpt-4o')
        for messages in steps:
            incremental = check.check(messages).violations
            full = fresh._input_check('full-' + str(len(messages))).check(messages).violations
            assert incremental == full == validate_history(messages)
    assert [v.code for v in validate_history([*pending, reply('ok'), user('now')])] == ['dangling_tool_call']


def test_workflow_code_counts_with_the_runs_own_counter_begun_at_its_first_step() -> None:
    """A durable replay runs the workflow again from its first step: what the shared counter learned from the
    run's later requests must not change an early step's estimate (and so the operations it journals)."""
    import dataclasses

    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    processor = HistoryProcessor()
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    if not any(f.name == 'run_id' for f in dataclasses.fields(ctx)):
        pytest.skip('this pydantic-ai has no run ids (and no durable execution)')
    first = dataclasses.replace(ctx, run_id='run-1', run_step=1)
    later = dataclasses.replace(first, run_step=4)
    counter = processor._workflow_counter(first, 'gpt-4o')
    assert processor._workflow_counter(later, 'gpt-4o') is counter  # one run, one counter
    assert counter is not processor.counter_for('gpt-4o')  # not the counter every run shares
    assert processor._workflow_counter(first, 'gpt-4o') is not counter  # a replay begins afresh
    other = dataclasses.replace(later, run_id='run-2')
    assert processor._workflow_counter(other, 'gpt-4o') is not processor._workflow_counter(later, 'gpt-4o')


def test_workflow_clocks_pin_to_the_newest_model_response_not_to_requests() -> None:
    """Requests are stamped in workflow code with the system clock, which a replay reads again; responses
    come back from the model's durable operation. Pinned to a request, a replay drew other ids (and counted
    other tokens) than the first execution: Temporal's replay then failed as nondeterministic."""
    from datetime import UTC, datetime

    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from pydantic_ai_history.messages._clock import message_time, replay_safe, replay_safe_token

    answered = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    history = [
        ModelRequest(parts=[UserPromptPart('task')]),
        ModelResponse(parts=[TextPart('working')], timestamp=answered),
    ]
    # the same request stamped at two moments (on 1.0 a request's stamp is its part's)
    first = [
        *history,
        ModelRequest(parts=[UserPromptPart('next', timestamp=datetime(2026, 5, 1, tzinfo=UTC))]),
    ]
    replay = [
        *history,
        ModelRequest(parts=[UserPromptPart('next', timestamp=datetime(2026, 6, 1, tzinfo=UTC))]),
    ]
    assert message_time(first) == message_time(replay) == answered.timestamp()
    assert message_time(history[:1]) == 0.0  # nothing answered yet: the same on every replay
    with replay_safe(message_time(first)):
        drawn = replay_safe_token(8)
    with replay_safe(message_time(replay)):
        assert replay_safe_token(8) == drawn


async def test_a_durable_runs_own_counter_goes_with_the_run() -> None:
    """The workflow counter memoizes the run's history texts: kept past the run, a worker's tracked runs
    (up to `max_tracked_runs`) would each hold a whole history."""
    import dataclasses

    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    processor = HistoryProcessor()
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    fields = {f.name for f in dataclasses.fields(ctx)}
    if not {'run_id', '_durable_operations'} <= fields:
        pytest.skip('this pydantic-ai has no durable operations')
    durable = dataclasses.replace(
        ctx, run_id='run-1', run_step=1, _durable_operations={(processor.id, 'store_write'): object()}
    )
    assert processor.journaled(durable)

    async def run() -> object:
        return processor._workflow_counter(durable, 'gpt-4o')

    counter = await processor.wrap_run(durable, handler=run)
    assert counter is not None
    state = processor._runs.peek('run-1')
    assert state is not None
    assert state.workflow_counter is None

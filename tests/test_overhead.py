"""Invisible when it fits (issue 37): built once per processor, and a history far below its budget is neither
counted nor changed; one near its budget is counted exactly and processed as before."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history import (
    ContextPolicy,
    HistoryProcessor,
    SummarizerSettings,
    TokenCounter,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES

pytestmark = pytest.mark.anyio


def _history(turns: int, text: str = 'a short question about the weather') -> list[ModelMessage]:
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('task: ' + text)])]
    for i in range(turns):
        history.append(
            ModelResponse(
                parts=[ToolCallPart('lookup', {'item': i}, tool_call_id=f'c{i}')],
                usage=RequestUsage(input_tokens=50 + 30 * i, output_tokens=5),
            )
        )
        history.append(
            ModelRequest(parts=[ToolReturnPart('lookup', f'{text} {i} ü ✓ 天气', tool_call_id=f'c{i}')])
        )
    return history


def _processor(window: int, **settings: Any) -> Any:
    return create_history_processor(model='gpt-4o', policy=ContextPolicy(context_window=window), **settings)


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='capabilities arrived in pydantic-ai 2.x')
def test_the_toolset_is_built_once_per_processor_and_shared_by_agents():
    processor = _processor(128_000, compaction_tool=True)
    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('ok')]), model_name='gpt-4o')
    first = processor.get_toolset()
    assert processor.get_toolset() is first
    assert processor.readback_toolset() is processor.readback_toolset()
    for prompt in ('one', 'two'):  # two agents, two runs
        assert Agent(model, capabilities=[processor]).run_sync(prompt).output == 'ok'
    assert processor.get_toolset() is first


def test_a_changed_store_gets_a_toolset_of_its_own():
    from pydantic_ai_history.store import MemoryStore

    processor = _processor(128_000)
    before = processor.readback_toolset()
    processor.store = MemoryStore()
    assert processor.readback_toolset() is not before


async def test_a_history_far_below_the_budget_is_returned_without_loading_the_tokenizer():
    processor = _processor(128_000)
    history = _history(20)
    out = await processor.process(history)
    assert out is history
    assert all(a is b for a, b in zip(out, history, strict=True))
    assert not processor.counter_for('gpt-4o').loaded


async def test_a_history_near_the_budget_is_counted_exactly_and_processed_as_before():
    window = 4_000
    history = _history(60, 'a longer tool answer with several words in it, ' * 4)
    exact = TokenCounter('gpt-4o').estimate(history).total
    processor = _processor(window)
    assert exact > processor.limits_for('gpt-4o').budget  # near (past) the budget: the stages act
    out = await processor.process(history)
    assert processor.counter_for('gpt-4o').loaded
    assert out is not history
    assert TokenCounter('gpt-4o').estimate(out).total <= processor.limits_for('gpt-4o').budget


def test_the_byte_bound_is_never_below_the_count():
    counter = TokenCounter('gpt-4o')
    for history in (_history(5), _history(40, 'ü✓ 天气 ' * 30), _history(3, '{"a": [1, 2, 3]} ' * 50)):
        bound = counter.upper_bound(history)
        assert bound is not None
        assert bound.bounded
        exact = counter.estimate(history)
        assert bound.total >= exact.total
        assert all(b >= e for b, e in zip(bound.per_message, exact.per_message, strict=True))


def test_the_byte_bound_scales_with_the_correction_factor():
    plain = TokenCounter('gpt-4o').upper_bound(_history(10))
    corrected = TokenCounter('gpt-4o', correction=1.5).upper_bound(_history(10))
    assert plain is not None
    assert corrected is not None
    assert corrected.tokenizer >= 1.5 * plain.tokenizer - len(_history(10))


def test_a_notice_or_background_summary_that_starts_lower_lowers_what_counts_as_far_below() -> None:
    """The bound skips counting only below every start: a notice at 30% of the limit is still sent."""
    from pydantic_ai_history import CompactionSettings, NearLimitNotice
    from pydantic_ai_history.context._context import FAR_BELOW

    blocking = CompactionSettings(background_start=None)
    assert HistoryProcessor(compaction=blocking)._far_below() == FAR_BELOW
    default_start = CompactionSettings().background_start
    assert default_start is not None
    assert HistoryProcessor()._far_below() == min(FAR_BELOW, default_start)
    notice = NearLimitNotice(start=0.3)
    assert HistoryProcessor(compaction=blocking, near_limit_notice=notice)._far_below() == 0.3
    background = HistoryProcessor(compaction=CompactionSettings(background_start=0.2))
    assert background._far_below() == 0.2


def _converse(processor: Any, model: Any, gone: list[Any]) -> None:
    """One conversation in a frame of its own (pydantic builds schemas from a snapshot of the caller's locals,
    which would keep this history alive past a `del`)."""
    import weakref

    history = _history(30)
    result = Agent(model, capabilities=[processor]).run_sync('one more', message_history=history)
    gone += [weakref.ref(m) for m in [*history, *result.all_messages()]]


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='capabilities arrived in pydantic-ai 2.x')
def test_an_ended_run_keeps_no_message_of_a_history_the_app_let_go_of():
    """Per idle conversation the processor keeps no message: its counts hold them weakly once the run ended,
    and the run's input check goes with the run."""
    import gc

    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart('ok')]), model_name='gpt-4o')
    summarizer = SummarizerSettings(model=FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('gist')])))
    gone: list[Any] = []
    for window in (128_000, 1_500):  # far below the budget (byte bound), then counted and compacted
        processor = _processor(window, summarizer=summarizer)
        for _ in range(3):
            _converse(processor, model, gone)
    gc.collect()
    assert gone
    assert [r() for r in gone if r() is not None] == []


class _Counting:
    """A custom stage that records each call and changes nothing."""

    name = 'counting'

    def __init__(self, unchanged: Any = None) -> None:
        self.calls = 0
        if unchanged is not None:
            self.unchanged_when_fits = unchanged

    async def __call__(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
        self.calls += 1
        return messages


async def test_far_below_its_limit_a_stage_with_nothing_to_do_is_skipped():
    """Each built-in stage says it has nothing to do on a history proved far below its limit; a custom stage
    is asked the same, and runs when it does not say (or cannot)."""
    from pydantic_ai_history import ArtifactPlanner, Compactor, SlidingWindow

    history = _history(20)
    silent, skipped, broken = _Counting(), _Counting(lambda m, c: True), _Counting(lambda m, c: 1 / 0)
    stages = [ArtifactPlanner(), Compactor(), SlidingWindow(), silent, skipped, broken]
    processor = HistoryProcessor(model='gpt-4o', policy=ContextPolicy(context_window=128_000), stages=stages)
    context = processor.make_context(model='gpt-4o')
    assert context.prove_fits(history)
    assert all(stage.unchanged_when_fits(history, context) for stage in stages[:3])
    assert await processor.process(history) is history
    assert (silent.calls, skipped.calls, broken.calls) == (1, 0, 1)


async def test_far_below_its_limit_the_newest_request_is_still_read_for_what_any_room_changes():
    """What the artifact stage does whatever the room (an attachment, a return its reducer reads, one nested
    too deep to send) is not skipped on a history that fits; plain small returns are."""
    from pydantic_ai.messages import BinaryContent

    from pydantic_ai_history import ArtifactPlanner, ArtifactSettings

    def newest(part: Any) -> list[ModelMessage]:
        *history, _ = _history(3)
        return [*history, ModelRequest(parts=[part])]

    deep: Any = 'bottom'
    for _ in range(400):
        deep = [deep]
    reducer = ArtifactSettings(reducers={'lookup': lambda content: 'reduced'})
    for planner, messages, acts in (
        (ArtifactPlanner(), _history(3), False),
        (
            ArtifactPlanner(),
            newest(UserPromptPart(['see', BinaryContent(b'%PDF-1.4', media_type='application/pdf')])),
            True,
        ),
        (ArtifactPlanner(reducer), _history(3), True),
        (ArtifactPlanner(), newest(ToolReturnPart('lookup', {'a': deep}, tool_call_id='c2')), True),
    ):
        processor = HistoryProcessor(
            model='gpt-4o', policy=ContextPolicy(context_window=128_000), stages=[planner]
        )
        context = processor.make_context(model='gpt-4o')
        assert context.prove_fits(messages)
        assert planner.unchanged_when_fits(messages, context) is not acts


async def test_a_long_unread_history_is_read_off_the_event_loop_and_its_continuation_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chat reloaded with thousands of messages is read once per run: bounded by bytes and checked in a
    worker thread, so the event loop keeps serving other runs; the next request's few new messages are read in
    place (a thread hop would cost more than they do). The verdict is the same either way: a dangling call is
    reported, and the history is proved far below its limit, so it comes back as it is."""
    import threading

    from pydantic_ai_history import HistoryWarning
    from pydantic_ai_history.context._offload import LONG_HISTORY
    from pydantic_ai_history.messages import validate

    where: list[tuple[str, int, bool]] = []

    def recorded(name: str, method: Any) -> Any:
        def run(self: Any, messages: Any) -> Any:
            where.append((name, len(messages), threading.current_thread() is threading.main_thread()))
            return method(self, messages)

        return run

    monkeypatch.setattr(validate.StructureCheck, 'extend', recorded('check', validate.StructureCheck.extend))
    monkeypatch.setattr(TokenCounter, 'bound_messages', recorded('bound', TokenCounter.bound_messages))
    warnings: list[HistoryWarning] = []
    processor = create_history_processor(
        model='gpt-4o',
        policy=ContextPolicy(context_window=100_000_000),
        on_history_event=lambda e: warnings.append(e) if isinstance(e, HistoryWarning) else None,
    )
    history = _history(LONG_HISTORY // 2 + 10)
    dangling = ModelResponse(parts=[ToolCallPart('lookup', {'item': -1}, tool_call_id='lost')])
    history[5:5] = [dangling]  # a call whose return is gone: an invariant violation of the input
    out = await processor.process(history)
    assert out is history
    assert ('bound', len(history), False) in where, 'bounded by bytes in a worker thread'
    assert ('check', len(history), False) in where, 'checked in a worker thread'
    assert any(w.code == 'invalid_input' for w in warnings)
    assert not processor.counter_for('gpt-4o').loaded, 'far below its limit: not tokenized'

    where.clear()
    call = ToolCallPart('lookup', {'item': 'next'}, tool_call_id='next')
    answer = ToolReturnPart('lookup', 'the next item', tool_call_id='next')
    grown = [*out, ModelResponse(parts=[call]), ModelRequest(parts=[answer])]
    assert await processor.process(grown) is grown
    assert where == [('check', 2, True)], 'only the new messages, on the event loop'


async def test_a_long_unread_history_near_its_limit_is_tokenized_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not far below its limit, a reloaded long chat is counted by the tokenizer: all of it, once, in a worker
    thread (the estimate then finds every count memoized); the next request counts its new messages only."""
    import threading

    from pydantic_ai_history.context._offload import LONG_HISTORY

    where: list[tuple[int, bool]] = []
    count_messages = TokenCounter.count_messages

    def recorded(self: TokenCounter, messages: Any) -> int:
        messages = list(messages)
        where.append((len(messages), threading.current_thread() is threading.main_thread()))
        return count_messages(self, messages)

    monkeypatch.setattr(TokenCounter, 'count_messages', recorded)
    history = _history(LONG_HISTORY // 2 + 10)
    tokens = TokenCounter('gpt-4o').count_messages(history)
    where.clear()
    processor = _processor(int(tokens * 1.6))  # fits, but not far below: counted
    out = await processor.process(history)
    assert out is history, 'it fits: returned as it is'
    assert processor.counter_for('gpt-4o').loaded
    assert (len(history), False) in where, 'the whole history, tokenized in a worker thread'

    where.clear()
    call = ToolCallPart('lookup', {'item': 'next'}, tool_call_id='next')
    answer = ToolReturnPart('lookup', 'the next item', tool_call_id='next')
    grown = [*out, ModelResponse(parts=[call]), ModelRequest(parts=[answer])]
    assert await processor.process(grown) is grown
    assert all(on_loop for _, on_loop in where), 'the continuation: in place'


# ---- our tools beside the run's, not among them ------------------------------------------------------------


async def _definitions_and_task_groups(
    processor: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Any], int]:
    """A run of an agent with a tool of its own whose large returns are stubbed, then read back: the tool
    definitions the model was sent at each request, and how many anyio task groups the run started."""
    import anyio

    from pydantic_ai_history.testing import StrictProvider

    started = 0
    create = anyio.create_task_group

    def counted() -> Any:
        nonlocal started
        started += 1
        return create()

    monkeypatch.setattr(anyio, 'create_task_group', counted)
    sent: list[Any] = []

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        sent.append(info.function_tools)
        usage = RequestUsage(input_tokens=100, output_tokens=5)
        if len(sent) <= 2:
            return ModelResponse(
                parts=[ToolCallPart('page', {'n': len(sent)}, tool_call_id=f'p{len(sent)}')], usage=usage
            )
        if len(sent) == 3:  # read the first page back by the id its note gives
            note = str(messages[2].parts[0].content)  # type: ignore[union-attr]
            artifact = note.split("artifact_id='", 1)[1].split("'", 1)[0]
            call = ToolCallPart('read_artifact', {'artifact_id': artifact, 'limit': 50}, tool_call_id='r')
            return ModelResponse(parts=[call], usage=usage)
        read = messages[-1].parts[0]
        assert isinstance(read, ToolReturnPart), read
        assert 'lorem ipsum' in str(read.content), read
        return ModelResponse(parts=[TextPart('done')], usage=usage)

    agent: Agent[None, str] = Agent(
        StrictProvider(respond, context_window=20_000).model(), capabilities=[processor]
    )

    @agent.tool_plain
    def page(n: int) -> str:
        """One page."""
        return f'{n}: ' + 'lorem ipsum dolor sit amet consectetur adipiscing elit ' * 2_700

    assert (await agent.run('read all pages')).output == 'done'
    monkeypatch.undo()
    return sent, started


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='capabilities arrived in pydantic-ai 2.x')
async def test_our_tools_beside_the_run_tools_are_offered_and_called_as_among_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An agent with a tool of its own: our tools are asked after the run's, in the same task, where
    pydantic-ai's combined toolset would start a task group for every question. The model is sent the same
    definitions (names, toolset ids, metadata) either way, and calls both kinds of tool."""
    from pydantic_ai_history.pipeline._capability import HistoryCapability

    beside, beside_groups = await _definitions_and_task_groups(
        _processor(20_000, compaction_tool=True), monkeypatch
    )
    monkeypatch.setattr(HistoryCapability, 'get_wrapper_toolset', lambda self, toolset: None)
    among, among_groups = await _definitions_and_task_groups(
        _processor(20_000, compaction_tool=True), monkeypatch
    )
    assert [sorted(t.name for t in tools) for tools in beside] == [
        ['compact_context', 'page'],
        *[['compact_context', 'page', 'read_artifact']] * 3,
    ]
    assert beside == among
    # among them, each of the 4 steps asks for its toolsets and its tools (2.x: its instructions) in a group
    assert among_groups - beside_groups >= 4 * 2, (among_groups, beside_groups)


def test_a_shape_other_than_the_one_pydantic_ai_assembles_is_left_as_it_is() -> None:
    from pydantic_ai.toolsets import CombinedToolset, FunctionToolset, PreparedToolset

    from pydantic_ai_history.pipeline._beside import OwnToolsBeside, own_tools_beside

    ours, theirs, other = FunctionToolset(id='ours'), FunctionToolset(id='theirs'), FunctionToolset()

    def prepared(*members: Any) -> Any:
        return PreparedToolset(CombinedToolset(list(members)), lambda ctx, tools: tools)

    lifted = own_tools_beside(prepared(theirs, CombinedToolset([ours])), {'ours'})
    assert isinstance(lifted, OwnToolsBeside)
    assert lifted.own.toolsets == [ours]  # type: ignore[attr-defined]
    assert lifted.wrapped.wrapped.toolsets == [theirs]  # type: ignore[attr-defined]
    assert own_tools_beside(CombinedToolset([theirs, ours]), {'ours'}) is None  # not pydantic-ai's assembly
    assert own_tools_beside(prepared(CombinedToolset([ours])), {'ours'}) is None  # nothing beside ours
    assert own_tools_beside(prepared(theirs, CombinedToolset([ours, other])), {'ours'}) is None  # shared
    assert own_tools_beside(prepared(theirs, other), {'ours'}) is None  # ours not there


async def test_the_beside_toolset_enters_and_leaves_both_parts_as_a_combined_toolset_does() -> None:
    """Both parts entered in turn and left in reverse; a part that fails to enter leaves the other entered
    part closed, and the error reaches the run."""
    from pydantic_ai.toolsets import FunctionToolset

    from pydantic_ai_history.pipeline._beside import OwnToolsBeside

    log: list[str] = []

    class Logged(FunctionToolset[Any]):
        def __init__(self, name: str, *, fail: bool = False) -> None:
            super().__init__(id=name)
            self.name, self.fail = name, fail

        async def __aenter__(self) -> Any:
            if self.fail:
                raise OSError(f'{self.name} cannot start')
            log.append(f'enter {self.name}')
            return self

        async def __aexit__(self, *args: Any) -> bool | None:
            log.append(f'exit {self.name} {args[0].__name__ if args[0] else None}')
            return None

    beside = OwnToolsBeside(Logged('theirs'), own=Logged('ours'))
    async with beside:
        assert log == ['enter theirs', 'enter ours']
    assert log[2:] == ['exit ours None', 'exit theirs None']
    await beside.__aexit__(None, None, None)  # left already: nothing is left twice
    assert len(log) == 4

    log.clear()
    with pytest.raises(OSError, match='ours cannot start'):
        async with OwnToolsBeside(Logged('theirs'), own=Logged('ours', fail=True)):
            pass  # pragma: no cover
    assert log == ['enter theirs', 'exit theirs OSError']

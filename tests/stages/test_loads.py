"""The pure decision behind on-demand capabilities across cuts: which loads a cut unloaded, and the record
that loads them again (`stages/_loads.py`).

pydantic-ai's own readers of history are the oracle: `parse_loaded_capabilities` (which capabilities are
loaded) and `parse_discovered_tools` (which tools were revealed) must say the same of the history after the
cut and the record as of the history before it.
"""

from __future__ import annotations

from typing import Any

import pytest
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

from _pai_shapes import repair_changes
from pydantic_ai_history import validate_history
from pydantic_ai_history._compat import HAS_DEFERRED_CAPABILITIES
from pydantic_ai_history.stages._loads import (
    lost_loads,
    record_index,
    reload_record,
    reload_reserve,
    with_reloads,
)
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.skipif(
    not HAS_DEFERRED_CAPABILITIES,
    reason='this pydantic-ai has no on-demand capabilities (defer_loading, load_capability: 2.x only)',
)


def _m() -> Any:
    import pydantic_ai.messages as m

    return m


def _loaded(messages: list[ModelMessage]) -> set[str]:
    from pydantic_ai._deferred_capabilities import parse_loaded_capabilities

    return parse_loaded_capabilities(messages)


def _revealed(messages: list[ModelMessage]) -> set[str]:
    from pydantic_ai.toolsets._tool_search import parse_discovered_tools

    return parse_discovered_tools(messages)


def _page(i: int) -> list[ModelMessage]:
    return [
        ModelResponse(parts=[ToolCallPart('read_page', {'page': i}, tool_call_id=f'p{i}')]),
        ModelRequest(parts=[ToolReturnPart('read_page', f'page {i} ' * 50, tool_call_id=f'p{i}')]),
    ]


def _model_load(capability: str, tools: list[str], call_id: str) -> list[ModelMessage]:
    """The model's load, as pydantic-ai records it: the call, its return with the reveal, and on the request
    after it the statement of the capability's instructions (with the next tool round's return)."""
    m = _m()
    return [
        ModelResponse(parts=[m.LoadCapabilityCallPart(args={'id': capability}, tool_call_id=call_id)]),
        ModelRequest(
            parts=[
                m.LoadCapabilityReturnPart(content={'message': f'{capability} loaded'}, tool_call_id=call_id),
                m.ToolAvailabilityDeltaPart(tools_added=tools, tool_call_id=call_id),
            ]
        ),
    ]


def _statement(capability: str, text: str) -> Any:
    return _m().InstructionDeltaPart(id=f'capability:{capability}', content=text)


def _history() -> list[ModelMessage]:
    """System + task, a model load of `weather` (its instructions stated on the next request), a load from
    code of `maps`, then pages."""
    m = _m()
    messages: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart('You plan trips.'), UserPromptPart('Plan Lisbon.')]),
        *_model_load('weather', ['get_weather'], 'load1'),
    ]
    page = _page(1)
    page[1] = ModelRequest(parts=[*page[1].parts, _statement('weather', 'Use Celsius.')])
    messages += page
    messages += _page(2)
    code_load = ModelRequest(
        parts=[
            *messages[-1].parts,
            m.CapabilityLoadDeltaPart(loaded=['maps']),
            m.ToolAvailabilityDeltaPart(tools_added=['route']),
        ]
    )
    messages[-1] = code_load
    for i in range(3, 7):
        messages += _page(i)
    return messages


def _summary() -> ModelRequest:
    return ModelRequest(parts=[_m().CompactionPart(content='What happened so far.')])


def _compacted(messages: list[ModelMessage], keep_from: int) -> list[ModelMessage]:
    return [messages[0], _summary(), *messages[keep_from:]]


def test_a_compaction_that_removes_the_loads_records_them_again_after_the_summary() -> None:
    before = _history()
    assert _loaded(before) == {'weather', 'maps'}
    after = _compacted(before, len(before) - 4)
    assert _loaded(after) == set()  # what pydantic-ai sees without the record: both unloaded

    result, record = with_reloads(before, after, kept_from=2)

    assert record is not None
    assert result[2] is record  # right after the summary, inside the post-compaction window
    assert [result[0], result[1], *result[3:]] == after  # everything else is the same objects
    assert _loaded(result) == {'weather', 'maps'}
    assert _revealed(result) == _revealed(before) == {'get_weather', 'route'}
    m = _m()
    load, reveal, statement = record.parts
    assert isinstance(load, m.CapabilityLoadDeltaPart)
    assert load.loaded == ['weather', 'maps']  # load order
    assert isinstance(reveal, m.ToolAvailabilityDeltaPart)
    assert reveal.tools_added == ['get_weather', 'route']
    assert isinstance(statement, m.InstructionDeltaPart)
    assert (str(statement.id), statement.content, statement.base_hash) == (
        'capability:weather',
        'Use Celsius.',
        None,
    )
    assert validate_history(result) == []
    assert not repair_changes(result)


def test_no_tool_call_is_made_up() -> None:
    before = _history()
    result, record = with_reloads(before, _compacted(before, len(before) - 4), kept_from=2)
    assert record is not None
    calls = [
        p
        for msg in result
        if isinstance(msg, ModelResponse)
        for p in msg.parts
        if isinstance(p, ToolCallPart)
    ]
    assert all(p.tool_name == 'read_page' for p in calls)


def test_nothing_is_recorded_when_the_loads_are_kept() -> None:
    before = _history()
    after = [before[0], _summary(), *before[1:]]  # only the head was replaced... nothing loaded went
    result, record = with_reloads(before, after, kept_from=2)
    assert record is None
    assert result is after


def test_the_same_history_needs_no_record() -> None:
    before = _history()
    result, record = with_reloads(before, before, kept_from=1)
    assert (result, record) == (before, None)
    assert lost_loads(before, list(before)).empty()


def test_a_second_cut_records_again_what_the_first_record_held() -> None:
    before = _history()
    once, _ = with_reloads(before, _compacted(before, len(before) - 4), kept_from=2)
    # the next compaction replaces the summary and the record with a new summary
    twice, record = with_reloads(once, [once[0], _summary(), *once[-2:]], kept_from=2)
    assert record is not None
    assert _loaded(twice) == {'weather', 'maps'}
    assert _revealed(twice) == {'get_weather', 'route'}
    assert validate_history(twice) == []
    # applied to its own result, nothing more is recorded
    again, none = with_reloads(twice, list(twice), kept_from=2)
    assert none is None
    assert again == twice


def test_a_statement_still_in_the_kept_messages_is_not_repeated() -> None:
    before = _history()
    # cut right after the load: the statement (on the next request) is kept, the load is not
    after = _compacted(before, 3)
    result, record = with_reloads(before, after, kept_from=2)
    assert record is not None
    m = _m()
    assert not any(isinstance(p, m.InstructionDeltaPart) for p in record.parts)
    assert _loaded(result) == {'weather', 'maps'}


def test_loads_pydantic_ai_already_dropped_at_an_earlier_compaction_stay_dropped() -> None:
    """A load before an earlier summary is not loaded for pydantic-ai: a cut must not bring it back."""
    old = _history()
    before = [
        old[0],
        *_model_load('old', ['legacy'], 'load0'),
        ModelResponse(parts=[TextPart('Loaded.')]),
        _summary(),
        *_page(8),
        *_page(9),
    ]
    assert _loaded(before) == _revealed(before) == set()
    after = [before[0], _summary(), *before[-2:]]
    result, record = with_reloads(before, after, kept_from=2)
    assert record is None
    assert result is after


def test_without_a_summary_the_record_goes_where_the_kept_messages_start() -> None:
    """The window: a note (plain user text) stands for what it drops; the record follows it."""
    before = _history()
    note = ModelRequest(parts=[UserPromptPart('[earlier messages removed]')])
    after = [before[0], note, *before[-4:]]
    result, record = with_reloads(before, after, kept_from=2)
    assert record is not None
    assert result[2] is record
    assert _loaded(result) == {'weather', 'maps'}
    assert validate_history(result) == []
    assert not repair_changes(result)


def test_the_record_is_never_last_and_follows_a_provider_compaction() -> None:
    m = _m()
    current = ModelRequest(parts=[UserPromptPart('go on')])
    assert record_index([current], kept_from=5) == 0
    provider = ModelResponse(parts=[m.CompactionPart(content='opaque'), TextPart('ok')])
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('task')]),
        provider,
        ModelRequest(parts=[UserPromptPart('more')]),
        ModelResponse(parts=[TextPart('sure')]),
        current,
    ]
    # past the requests that follow the provider's compaction, before the next response
    assert record_index(history, kept_from=1) == 3
    request_summary: list[ModelMessage] = [history[0], _summary(), current]
    assert record_index(request_summary, kept_from=0) == 2


def test_the_reserve_covers_any_record() -> None:
    before = _history()
    counter = TokenCounter('gpt-4o')
    reserve = reload_reserve(before)
    assert reserve is not None
    for keep_from in range(1, len(before)):
        after = [before[0], _summary(), *before[keep_from:]]
        if validate_history(after):
            continue  # not a unit boundary
        record = reload_record(lost_loads(before, after))
        if record is not None:
            assert counter.count_message(record) <= counter.count_message(reserve)
    assert reload_reserve(_page(1)) is None


@pytest.mark.anyio
async def test_the_idle_path_does_no_load_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A history that fits comes back as the same list, and neither stage looks for loads."""
    from _compaction import context
    from pydantic_ai_history import Compactor, SlidingWindow
    from pydantic_ai_history.stages import _loads

    def never(messages: Any) -> Any:
        raise AssertionError('the load decision ran on a history that fits')

    monkeypatch.setattr(_loads, '_window_parts', never)
    history = _history()
    ctx, _ = context(context_window=200_000)
    assert await Compactor()(history, ctx) is history
    assert await SlidingWindow()(history, ctx) is history


@pytest.mark.anyio
async def test_a_window_cut_through_the_stage_keeps_the_loads() -> None:
    from _compaction import context
    from pydantic_ai_history import SlidingWindow

    history = _history()
    counter = TokenCounter('gpt-4o')
    # room for the head, the note, the record and the last few pages only
    ctx, _ = context(context_window=counter.count_messages(history[:1] + history[-4:]) + 1_300)
    result = await SlidingWindow()(history, ctx)
    assert len(result) < len(history)
    assert _loaded(result) == {'weather', 'maps'}
    assert _revealed(result) == {'get_weather', 'route'}
    assert validate_history(result) == []
    assert not repair_changes(result)

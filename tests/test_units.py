"""split_units / head_length / fit_suffix on real conversations, retries, and random valid histories."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_history.messages.units import (
    ToolPairing,
    Unit,
    fit_suffix,
    head_length,
    pair_tool_calls,
    split_units,
    tool_call_ids,
)
from pydantic_ai_history.messages.validate import validate_history


def _conversations(fixtures_dir: Path) -> dict[str, list[ModelMessage]]:
    return {
        p.name: ModelMessagesTypeAdapter.validate_json(p.read_bytes())
        for p in sorted((fixtures_dir / 'conversations').glob('*.json'))
    }


def _assert_cover(units: list[Unit], length: int) -> None:
    assert [i for u in units for i in range(u.start, u.end)] == list(range(length))


def test_units_cover_every_real_message_once_and_pair_calls(fixtures_dir: Path) -> None:
    for name, messages in _conversations(fixtures_dir).items():
        units = split_units(messages)
        _assert_cover(units, len(messages))
        for unit in units:
            first = messages[unit.start]
            if isinstance(first, ModelResponse) and tool_call_ids(first) and unit.start + 1 < len(messages):
                assert len(unit) == 2, (name, unit)
                answer = messages[unit.start + 1]
                assert {getattr(p, 'tool_call_id', None) for p in answer.parts} >= set(tool_call_ids(first))
            if unit.starts_with_request:
                assert isinstance(first, ModelRequest)


def _req(*parts: object) -> ModelRequest:
    return ModelRequest(parts=list(parts))  # type: ignore[arg-type]


def _call(call_id: str, name: str = 'lookup') -> ToolCallPart:
    return ToolCallPart(tool_name=name, args={'q': call_id}, tool_call_id=call_id)


@pytest.mark.filterwarnings('ignore::UserWarning')
def test_retries_stay_with_their_call() -> None:
    messages: list[ModelMessage] = [
        _req(SystemPromptPart(content='sys'), UserPromptPart(content='find it')),
        ModelResponse(parts=[_call('a')]),
        _req(RetryPromptPart(content='bad args', tool_name='lookup', tool_call_id='a')),
        ModelResponse(parts=[_call('b')]),
        _req(ToolReturnPart(tool_name='lookup', content='found', tool_call_id='b')),
        ModelResponse(parts=[TextPart(content='done')]),
        _req(RetryPromptPart(content='output invalid')),  # an output retry answers no call
    ]
    units = split_units(messages)
    assert [(u.start, u.end, u.starts_with_request) for u in units] == [
        (0, 1, True),
        (1, 3, False),
        (3, 5, False),
        (5, 6, False),
        (6, 7, True),
    ]


def test_dangling_call_at_the_end_is_its_own_unit(fixtures_dir: Path) -> None:
    messages = _conversations(fixtures_dir)['swe_gym_openhands_python__mypy-15976_0.json']
    assert isinstance(messages[-1], ModelResponse)
    assert split_units(messages)[-1] == Unit(len(messages) - 1, len(messages), False)


@pytest.mark.parametrize(
    ('costs', 'budget', 'at_least', 'expected'),
    [
        ([1, 1, 100, 1], 3, 1, 3),  # greedy fit would also keep the first two: it must not
        ([1, 1, 1, 1], 3, 1, 1),
        ([5, 5, 5], 100, 1, 0),
        ([5, 5, 50], 10, 1, 2),  # the last unit is kept whatever it costs
        ([5, 5, 50], 10, 2, 1),
        ([], 10, 1, 0),
        ([3, 3, 3], 6, 1, 1),  # exactly at the budget fits
    ],
)
def test_fit_suffix(costs: list[int], budget: int, at_least: int, expected: int) -> None:
    assert fit_suffix(costs, budget, at_least=at_least) == expected


def test_head_length(fixtures_dir: Path) -> None:
    tau = _conversations(fixtures_dir)['tau_bench_airline_task13_trial0.json']
    units = split_units(tau)
    first_user = next(i for i, m in enumerate(tau) if any(isinstance(p, UserPromptPart) for p in m.parts))
    assert head_length(tau, units, keep_first_user_message=True) == first_user + 1
    assert head_length(tau, units, keep_first_user_message=False) == 1

    short = [_req(SystemPromptPart(content='sys'), UserPromptPart(content='only turn'))]
    assert (
        head_length(short, split_units(short), keep_first_user_message=True) == 0
    )  # never the current request
    no_system = [
        _req(UserPromptPart(content='q')),
        ModelResponse(parts=[TextPart(content='a')]),
        _req(UserPromptPart(content='q2')),
    ]
    assert head_length(no_system, split_units(no_system), keep_first_user_message=False) == 0
    assert head_length(no_system, split_units(no_system), keep_first_user_message=True) == 1


# ---- property: random valid histories ----------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[ModelMessage]:
    counter = iter(range(10_000))
    messages: list[ModelMessage] = [_req(SystemPromptPart(content='sys'), UserPromptPart(content='task'))]
    for _ in range(draw(st.integers(0, 12))):
        calls = draw(st.integers(0, 3))
        if calls:
            ids = [f'c{next(counter)}' for _ in range(calls)]
            text = [TextPart(content='thinking aloud')] if draw(st.booleans()) else []
            messages.append(ModelResponse(parts=[*text, *(_call(i) for i in ids)]))
            returns = []
            for i in ids:
                if draw(st.booleans()):
                    returns.append(ToolReturnPart(tool_name='lookup', content='ok', tool_call_id=i))
                else:
                    with warnings.catch_warnings():
                        warnings.simplefilter('ignore')
                        returns.append(RetryPromptPart(content='retry', tool_name='lookup', tool_call_id=i))
            messages.append(_req(*returns))
        else:
            messages.append(ModelResponse(parts=[TextPart(content='answer')]))
            messages.append(_req(UserPromptPart(content='follow-up')))
    return messages


@settings(max_examples=200, deadline=None)
@given(histories())
def test_every_unit_boundary_is_a_valid_cut(messages: list[ModelMessage]) -> None:
    assert validate_history(messages) == []
    units = split_units(messages)
    _assert_cover(units, len(messages))
    head = messages[:1]
    for unit in units[1:]:
        tail = messages[unit.start :]
        # keep the head request, drop everything before this unit: pairing must survive the cut
        codes = {v.code for v in validate_history([*head, *tail])}
        assert not codes & {'dangling_tool_call', 'orphan_tool_return'}, (unit, codes)
        if unit.starts_with_request:
            assert validate_history(tail) == []


# ---- pydantic-ai's shapes: pairing by call id -----------------------------------------------------------


def _shapes() -> dict[str, list[ModelMessage]]:
    from _pai_shapes import handbuilt

    return handbuilt()


def _valid() -> frozenset[str]:
    from _pai_shapes import VALID

    return VALID


def _unit_of(units: list[Unit], index: int) -> Unit:
    return next(u for u in units if u.start <= index < u.end)


@pytest.mark.parametrize('name', sorted(_shapes()))
def test_every_call_shares_its_unit_with_every_answer(name: str) -> None:
    messages = _shapes()[name]
    units = split_units(messages)
    _assert_cover(units, len(messages))
    pairing = pair_tool_calls(messages)
    for response, last_answer in pairing.reach.items():
        assert _unit_of(units, response) == _unit_of(units, last_answer), (name, response, last_answer)
    for unit in units:
        if unit.starts_with_request:
            assert isinstance(messages[unit.start], ModelRequest)


def test_split_returns_form_one_unit() -> None:
    """Human approval resumed: the returns of one response come in two requests; all three are one unit."""
    messages = _shapes()['hitl_resume_continued']
    assert [(u.start, u.end) for u in split_units(messages)] == [(0, 1), (1, 4), (4, 5), (5, 6)]


def test_a_return_across_an_intervening_response_binds_both_responses() -> None:
    messages = _shapes()['across_intervening_response']
    assert [(u.start, u.end) for u in split_units(messages)] == [(0, 1), (1, 4), (4, 5)]


def test_a_duplicate_result_stays_with_the_call_it_repeats() -> None:
    """pydantic-ai keeps a second result for an answered call (its id was called): so must its unit."""
    messages = _shapes()['reused_id_answered_twice']
    assert [(u.start, u.end) for u in split_units(messages)] == [(0, 1), (1, 3), (3, 5), (5, 6), (6, 7)]
    pairing = pair_tool_calls(messages)
    assert pairing.dangling() == []
    assert pairing.orphans == []
    assert pairing.repeated_returns == []


def test_the_live_frontier_is_open_and_its_answered_part_is_a_unit() -> None:
    messages = _shapes()['deferred_frontier']
    pairing = pair_tool_calls(messages)
    assert pairing.dangling() == [(1, 'call_file')]
    assert pairing.last_response == 1
    assert [(u.start, u.end, u.starts_with_request) for u in split_units(messages)] == [
        (0, 1, True),
        (1, 3, False),
        (3, 4, True),
    ]


def test_pairing_matches_pydantic_ai_on_shadowed_and_early_results() -> None:
    shadowed = pair_tool_calls(_shapes()['shadowed_open_call'])
    assert shadowed.shadowed == [(1, 'call_1')]
    assert shadowed.reach == {3: 4}
    early = pair_tool_calls(_shapes()['result_before_call'])
    assert early.orphans == [(1, 'call_1')]  # before its call: pydantic-ai drops it
    assert early.dangling() == [(2, 'call_1')]


def test_pairing_is_incremental() -> None:
    messages = _shapes()['parallel_deferred_continued']
    whole = pair_tool_calls(messages)
    pieces = ToolPairing().extend(messages[:3]).extend(messages[3:])
    assert pieces == whole


@pytest.mark.parametrize('name', sorted(n for n in _shapes() if n.removesuffix('_long') in _valid()))
def test_every_unit_boundary_of_a_shape_is_a_cut_pydantic_ai_accepts(name: str) -> None:
    """Keeping the head and the units from any boundary on never needs pydantic-ai's repair where the
    whole history did not (a kept return always has its call, a kept call all of its returns)."""
    from _pai_shapes import repair_changes

    messages = _shapes()[name]
    units = split_units(messages)
    head = head_length(messages, units, keep_first_user_message=True)
    for unit in units:
        if unit.start < head:
            continue
        cut = [*messages[:head], *messages[unit.start :]]
        assert not repair_changes(cut), (name, unit)
        assert [v for v in validate_history(cut) if v.severity == 'error'] == [], (name, unit)


def test_head_keeps_the_first_user_message_after_a_malformed_start() -> None:
    """A history that opens with a response and its returns (the request that asked is lost) still has an
    original task: the first user message is the head."""
    messages: list[ModelMessage] = [
        ModelResponse(parts=[_call('a')]),
        _req(ToolReturnPart(tool_name='lookup', content='found', tool_call_id='a')),
        ModelResponse(parts=[TextPart(content='done')]),
        _req(UserPromptPart(content='THE TASK')),
        ModelResponse(parts=[TextPart(content='ok')]),
        _req(UserPromptPart(content='now')),
    ]
    units = split_units(messages)
    assert head_length(messages, units, keep_first_user_message=True) == 4
    assert head_length(messages, units, keep_first_user_message=False) == 0

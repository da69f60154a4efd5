"""validate_history on every real conversation and on deliberately broken histories."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_history.messages.units import tool_call_ids
from pydantic_ai_history.messages.validate import (
    HistoryValidationError,
    Violation,
    assert_valid_history,
    validate_history,
)
from pydantic_ai_history.tokens import TokenCounter


def _conversations(fixtures_dir: Path) -> dict[str, list[ModelMessage]]:
    return {
        p.name: ModelMessagesTypeAdapter.validate_json(p.read_bytes())
        for p in sorted((fixtures_dir / 'conversations').glob('*.json'))
    }


def _codes(violations: list[Violation]) -> list[tuple[str, int]]:
    return sorted((v.code, v.index) for v in violations)


def test_real_conversations_ending_with_a_request_are_valid(fixtures_dir: Path) -> None:
    valid = [m for m in _conversations(fixtures_dir).values() if isinstance(m[-1], ModelRequest)]
    assert len(valid) >= 7  # 12 in ../shared/fixtures, 7 in tests/fixtures
    for messages in valid:
        assert validate_history(messages) == []
        assert_valid_history(messages, original=messages)


def test_swe_runs_ending_with_an_unanswered_call(fixtures_dir: Path) -> None:
    """A stored run stopping at a tool call is not a valid model input: both facts are reported at its end."""
    runs = {k: m for k, m in _conversations(fixtures_dir).items() if isinstance(m[-1], ModelResponse)}
    assert runs
    for messages in runs.values():
        last = len(messages) - 1
        expected = [('not_ending_with_request', last)] + [('dangling_tool_call', last)] * len(
            tool_call_ids(messages[-1])
        )
        violations = validate_history(messages)
        assert _codes(violations) == sorted(expected)
        [end] = [v for v in violations if v.code == 'not_ending_with_request']
        assert end.severity == 'error'
        assert 'tool calls are unanswered' in end.reason
        # `finished=True`: a run that ended with deferred tool calls, whose calls stay warnings
        assert {(v.code, v.severity) for v in validate_history(messages, finished=True)} <= {
            ('dangling_tool_call', 'warning')
        }
        # the run up to its last request is valid
        assert validate_history(messages[:-1]) == []


@pytest.fixture
def tau(fixtures_dir: Path) -> list[ModelMessage]:
    return _conversations(fixtures_dir)['tau_bench_airline_task2_trial1.json']


def _first_call_unit(messages: list[ModelMessage]) -> int:
    return next(i for i, m in enumerate(messages) if isinstance(m, ModelResponse) and tool_call_ids(m))


def test_orphan_tool_return(tau: list[ModelMessage]) -> None:
    i = _first_call_unit(tau)
    broken = tau[:i] + tau[i + 1 :]  # drop the response, keep its returns
    # the request before the orphan returns stays; index i now holds the returns
    assert ('orphan_tool_return', i) in _codes(validate_history(broken))


def test_dangling_tool_call(tau: list[ModelMessage]) -> None:
    i = _first_call_unit(tau)
    broken = tau[: i + 1] + tau[i + 2 :]  # drop the returns
    assert ('dangling_tool_call', i) in _codes(validate_history(broken))


def test_starts_with_response_or_tool_return(tau: list[ModelMessage]) -> None:
    i = _first_call_unit(tau)
    assert _codes(validate_history(tau[i:]))[0] == ('starts_with_response', 0)
    assert ('starts_with_tool_return', 0) in _codes(validate_history(tau[i + 1 :]))


def test_empty_and_not_ending_with_request(tau: list[ModelMessage]) -> None:
    assert _codes(validate_history([])) == [('empty', -1)]
    with pytest.raises(HistoryValidationError) as info:
        assert_valid_history([])
    assert info.value.violations[0].code == 'empty'
    j = max(i for i, m in enumerate(tau) if isinstance(m, ModelResponse) and not tool_call_ids(m))
    # a response without tool calls at the end is a finished run: valid as it is
    assert validate_history(tau[: j + 1]) == []
    assert_valid_history(tau[: j + 1])
    # `finished=False` asks for a request at the end (the next one to send)
    assert _codes(validate_history(tau[: j + 1], finished=False)) == [('not_ending_with_request', j)]


def test_duplicate_tool_call_id() -> None:
    """Calls sharing an id are answered in order (pydantic-ai's FIFO): a warning while each has its return, an
    error for the one left without."""
    call = ToolCallPart(tool_name='f', args='{}', tool_call_id='same')
    ret = ToolReturnPart(tool_name='f', content='ok', tool_call_id='same')
    later = [
        ModelResponse(parts=[TextPart(content='done')]),
        ModelRequest(parts=[UserPromptPart(content='more')]),
    ]
    opening = ModelRequest(parts=[UserPromptPart(content='go')])
    twice = ModelResponse(parts=[call, dataclasses.replace(call, args='{"x":1}')])
    answered: list[ModelMessage] = [opening, twice, ModelRequest(parts=[ret, ret]), *later]
    violations = validate_history(answered)
    assert _codes(violations) == [('duplicate_tool_call_id', 1)]
    assert violations[0].severity == 'warning'
    assert violations[0].tool_call_id == 'same'
    one_short: list[ModelMessage] = [opening, twice, ModelRequest(parts=[ret]), *later]
    assert _codes(validate_history(one_short)) == [('dangling_tool_call', 1), ('duplicate_tool_call_id', 1)]
    assert [v.severity for v in validate_history(one_short) if v.code == 'dangling_tool_call'] == ['error']


def test_empty_message_is_a_warning() -> None:
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content='go')]),
        ModelResponse(parts=[]),
        ModelRequest(parts=[UserPromptPart(content='again')]),
    ]
    violations = validate_history(messages)
    assert _codes(violations) == [('empty_message', 1)]
    assert violations[0].severity == 'warning'
    assert_valid_history(messages)
    with pytest.raises(HistoryValidationError):
        assert_valid_history(messages, allow_warnings=False)


def test_system_prompt_lost_and_current_request_changed(tau: list[ModelMessage]) -> None:
    assert isinstance(tau[0].parts[0], SystemPromptPart)
    without_system = [
        ModelRequest(parts=[p for p in tau[0].parts if not isinstance(p, SystemPromptPart)]),
        *tau[1:],
    ]
    assert _codes(validate_history(without_system, original=tau)) == [('system_prompt_lost', -1)]

    last = tau[-1]
    changed = dataclasses.replace(last, parts=[*last.parts, UserPromptPart(content='injected')])
    assert _codes(validate_history([*tau[:-1], changed], original=tau)) == [
        ('current_request_changed', len(tau) - 1)
    ]


def test_signed_thinking_altered() -> None:
    signed = ModelResponse(
        parts=[ThinkingPart(content='let me think', signature='abc'), TextPart(content='answer')]
    )
    original: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content='q')]),
        signed,
        ModelRequest(parts=[UserPromptPart(content='q2')]),
    ]
    assert validate_history(original, original=original) == []
    altered = dataclasses.replace(
        signed, parts=[dataclasses.replace(signed.parts[0], content='edited'), signed.parts[1]]
    )
    assert _codes(validate_history([original[0], altered, original[2]], original=original)) == [
        ('signed_thinking_altered', 1)
    ]
    unsigned = ModelResponse(parts=[ThinkingPart(content='edited'), TextPart(content='answer')])
    assert validate_history([original[0], unsigned, original[2]], original=original) == []


def test_over_budget(tau: list[ModelMessage]) -> None:
    counter = TokenCounter('openai:gpt-4o')
    used = counter.count_messages(tau)
    assert validate_history(tau, budget=used, count_tokens=counter.count_messages) == []
    violations = validate_history(tau, budget=used - 1, count_tokens=counter.count_messages)
    assert _codes(violations) == [('over_budget', -1)]
    assert f'{used:,}' in violations[0].reason
    assert 'over_budget' in str(violations[0])


# ---- pydantic-ai's shapes: invalid exactly where its pre-send repair would change the history -------------


def _shapes() -> dict[str, list[ModelMessage]]:
    from _pai_shapes import agent_histories, handbuilt

    return {**handbuilt(), **agent_histories()}


@pytest.mark.parametrize('name', sorted(_shapes()))
def test_errors_exactly_where_pydantic_ai_would_repair(name: str) -> None:
    from _pai_shapes import VALID, repair_changes, repair_functions

    messages = _shapes()[name]
    errors = [v for v in validate_history(messages) if v.severity == 'error']
    expected_valid = name.removesuffix('_long') in VALID or name.startswith('agent_')
    assert (errors == []) == expected_valid, errors
    if repair_functions() is not None:  # 2.x: the repair itself decides
        assert (errors == []) == (not repair_changes(messages)), errors


def test_split_returns_and_returns_across_a_response_are_valid() -> None:
    shapes = _shapes()
    for name in ('hitl_resume', 'parallel_deferred_resume', 'across_intervening_response'):
        assert validate_history(shapes[name]) == [], name


def test_the_live_frontier_is_a_warning_and_an_earlier_dangling_call_an_error() -> None:
    frontier = validate_history(_shapes()['deferred_frontier'])
    assert [(v.code, v.index, v.severity, v.tool_call_id) for v in frontier] == [
        ('dangling_tool_call', 1, 'warning', 'call_file')
    ]
    assert_valid_history(_shapes()['deferred_frontier'])
    mid = validate_history(_shapes()['dangling_mid_history'])
    assert [(v.code, v.index, v.severity) for v in mid] == [('dangling_tool_call', 1, 'error')]


def test_a_repeated_result_is_a_warning() -> None:
    violations = validate_history(_shapes()['duplicate_result'])
    assert [(v.code, v.index, v.severity) for v in violations] == [('duplicate_tool_return', 2, 'warning')]


def test_shadowed_call_and_result_before_its_call_are_errors() -> None:
    assert _codes(validate_history(_shapes()['shadowed_open_call'])) == [('dangling_tool_call', 1)]
    assert _codes(validate_history(_shapes()['result_before_call'])) == [
        ('dangling_tool_call', 2),
        ('orphan_tool_return', 1),
    ]

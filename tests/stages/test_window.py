"""The sliding window: greedy-fit stop rule, head, system prompt, pinning, over-budget and invalid input."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, SystemPromptPart, ToolReturnPart

from _history import call, is_suffix_by_identity, reply, result, system_user, user
from pydantic_ai_history import (
    ContextPolicy,
    ContextWindowUnknownError,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SlidingWindow,
    WindowApplied,
    assert_valid_history,
    pin,
    pin_tool_errors,
    validate_history,
)
from pydantic_ai_history.messages._marks import marker_kind
from pydantic_ai_history.messages.pinning import PinPredicate
from pydantic_ai_history.stages.window import dropped_count, window_note
from pydantic_ai_history.store import MemoryStore, artifact_id
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio

COUNTER = TokenCounter('gpt-4o')
HAS_MESSAGE_METADATA = 'metadata' in {f.name for f in dataclasses.fields(ModelRequest)}
HAS_OUTCOME = 'outcome' in {f.name for f in dataclasses.fields(ToolReturnPart)}
WORDS = 'the quick brown fox jumps over the lazy dog while the cat sleeps '


def text(tokens: int) -> str:
    """Plain English of roughly `tokens` tokens (13 tokens per sentence)."""
    return WORDS * max(tokens // 13, 1)


def cost(*messages: ModelMessage) -> int:
    return COUNTER.count_messages(messages)


NOTE = cost(window_note([user('x')], None, transcript=artifact_id(b'a stored transcript'))) + 20
"""Room for the window's note naming its stored transcript (a keyed id of the same length), with margin."""


async def run_window(
    messages: list[ModelMessage],
    *,
    budget: int,
    keep_first_user_message: bool = True,
    pin: PinPredicate | None = None,
) -> tuple[list[ModelMessage], list[HistoryEvent]]:
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=budget),
        keep_first_user_message=keep_first_user_message,
        pin=pin,
        on_history_event=events.append,
    )
    before = copy.deepcopy(messages)
    out = await processor.process(messages)
    assert messages == before, 'the input was mutated'
    assert_valid_history(out, original=messages)
    return out, events


def notes(messages: list[ModelMessage]) -> list[ModelMessage]:
    return [m for m in messages if marker_kind(m) == 'window']


async def test_greedy_fit_stops_at_the_first_unit_that_does_not_fit():
    m1, m2 = user('first question ' + text(200)), reply('first answer ' + text(200))
    huge, after = user('a pasted log ' + text(5_000)), reply('noted')
    m4 = user('and now?')
    history = [m1, m2, huge, after, m4]
    budget = cost(after, m4) + cost(m1, m2) + 80  # m1+m2 fit beside the tail, huge does not
    assert cost(huge) > budget
    out, events = await run_window(history, budget=budget, keep_first_user_message=False)
    assert m2 not in out
    assert m1 not in out
    assert out[1:] == [after, m4]
    assert is_suffix_by_identity(out[1:], history)
    assert notes(out) == [out[0]]
    assert cost(*out) <= budget
    [applied] = [e for e in events if isinstance(e, WindowApplied)]
    assert applied.units_dropped == 3
    assert applied.budget == budget
    assert applied.tokens_after <= budget

    out, _ = await run_window(history, budget=budget)  # default: the first user message is the preserved head
    assert out[0] is m1
    assert m2 not in out
    assert huge not in out
    assert out[2:] == [after, m4]


async def test_greedy_fit_with_a_huge_tool_return_in_the_middle():
    head = system_user('You are a careful agent.', 'Summarise the repository.')
    early = [call('ls', 'c1'), result('ls', 'c1', 'README.md\nsrc/'), reply('Listing done.'), user('go on')]
    big = [call('cat', 'c2', {'path': 'data.json'}), result('cat', 'c2', text(6_000))]
    tail = [call('wc', 'c3'), result('wc', 'c3', '42 lines')]
    history = [head, *early, *big, *tail]
    budget = cost(head, *early, *tail) + 100
    out, _ = await run_window(history, budget=budget)
    assert out[0] is head
    assert out[2:] == tail
    assert marker_kind(out[1]) == 'window'
    assert not any(m in out for m in early)


async def test_idle_path_returns_the_same_messages_and_no_event():
    history = [system_user('sys', 'hi'), reply('hello'), user('bye')]
    out, events = await run_window(history, budget=10_000)
    assert len(out) == 3
    assert all(a is b for a, b in zip(out, history, strict=False))
    assert not [e for e in events if isinstance(e, (WindowApplied, HistoryWarning))]


async def test_keep_first_user_message_on_and_off():
    first = user('THE ORIGINAL TASK: ' + text(100))
    middle = [reply(text(300)), user(text(300)), reply(text(300))]
    current = user('latest')
    history = [first, *middle, current]
    budget = cost(first, current) + 60
    kept, _ = await run_window(history, budget=budget)
    assert kept[0] is first
    assert kept[-1] is current
    dropped, _ = await run_window(history, budget=budget, keep_first_user_message=False)
    assert first not in dropped
    assert dropped[-1] is current


async def test_system_prompt_is_carried_over_when_its_message_is_dropped():
    first = system_user('SYSTEM: always answer in French.', 'task ' + text(400))
    history = [first, reply(text(400)), user(text(400)), reply('ok'), user('current')]
    out, _ = await run_window(history, budget=cost(*history[-2:]) + 80, keep_first_user_message=False)
    assert first not in out
    [note] = notes(out)
    assert out[0] is note
    assert [p.content for p in note.parts if isinstance(p, SystemPromptPart)] == [
        'SYSTEM: always answer in French.'
    ]
    assert not [v for v in validate_history(out, original=history) if v.code == 'system_prompt_lost']


async def test_system_prompt_in_a_dropped_middle_message_survives():
    late_system = ModelRequest(parts=[SystemPromptPart('Dynamic rule 7'), *user(text(500)).parts])
    history = [user('task'), reply(text(300)), late_system, reply(text(300)), user('now')]
    out, _ = await run_window(history, budget=cost(history[0], *history[-2:]) + 100)
    assert late_system not in out
    assert any(
        isinstance(p, SystemPromptPart) and p.content == 'Dynamic rule 7' for m in out for p in m.parts
    )


async def test_current_request_alone_over_budget_is_cut_to_fit_and_stored():
    """The window never drops the current request; when even dropping everything else leaves it over the
    budget, its content (never its structure) is cut to what is left, the original stored and named."""
    prompt = 'here is everything: ' + text(3_000)
    history = [user('task'), reply(text(300)), user(prompt)]
    store = MemoryStore()
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=500),
        store=store,
        on_history_event=events.append,
    )
    out = await processor.process(history)
    assert_valid_history(out, original=history)
    assert out[0] is history[0]
    assert processor.counter_for('gpt-4o').estimate(out).total <= 500
    assert not [e for e in events if isinstance(e, HistoryWarning) and e.code == 'over_budget']
    [reduced] = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'user_prompt_reduced']
    stored = await store.get(reduced.details['artifact_id'])
    assert stored == prompt.encode()
    assert reduced.details['artifact_id'] in str(out[-1].parts[0].content)  # type: ignore[union-attr]


async def test_nothing_droppable_over_budget_is_cut_and_still_warns():
    """A budget smaller than any note: the request is cut as far as it goes, and still reported over."""
    history = [user('only the current request ' + text(2_000))]
    out, events = await run_window(history, budget=100)
    assert len(out) == 1
    assert TokenCounter('gpt-4o').count_messages(out) < TokenCounter('gpt-4o').count_messages(history)
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert codes == ['user_prompt_reduced', 'over_budget']


def _failed_return(kind: str) -> ModelRequest:
    if kind == 'retry-prompt':
        return ModelRequest(
            parts=[RetryPromptPart('region must be one of eu, us', tool_name='deploy', tool_call_id='c1')]
        )
    if not HAS_OUTCOME:
        pytest.skip('ToolReturnPart.outcome is 2.x only')
    part: Any = ToolReturnPart('deploy', 'region must be one of eu, us', 'c1', outcome=kind)  # type: ignore[call-arg]
    return ModelRequest(parts=[part])


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
@pytest.mark.parametrize('kind', ['retry-prompt', 'retried', 'failed'])
async def test_pin_tool_errors_keeps_an_old_failed_call_ahead_of_older_units(kind: str):
    failed = [call('deploy', 'c1'), _failed_return(kind)]
    older = [reply(text(300)), user(text(300))]
    newer = [reply(text(300)), user(text(300)), reply(text(300))]
    current = user('try again')
    history = [user('deploy the app'), *older, *failed, *newer, current]
    budget = cost(history[0], *failed, current) + cost(*newer[-1:]) + 80
    plain, _ = await run_window(history, budget=budget)
    assert failed[0] not in plain
    out, events = await run_window(history, budget=budget, pin=pin_tool_errors)
    assert out[2:4] == failed  # head, note, the pinned unit, then the recent suffix
    assert not any(m in out for m in older)
    assert [e.pinned_kept for e in events if isinstance(e, WindowApplied)] == [1]


async def test_user_predicate_pins_messages():
    important = user('REMEMBER: the customer id is 4711 ' + text(50))
    history = [
        user('task'),
        reply(text(400)),
        important,
        reply(text(400)),
        user(text(400)),
        reply('ok'),
        user('now'),
    ]
    budget = cost(history[0], important, *history[-2:]) + NOTE

    def remember(message: ModelMessage) -> bool:
        return isinstance(message, ModelRequest) and 'REMEMBER' in str(message.parts[0].content)

    out, _ = await run_window(history, budget=budget, pin=remember)
    assert important in out
    assert history[3] not in out


async def test_a_pinned_unit_that_does_not_fit_is_not_kept():
    important = user('REMEMBER ' + text(2_000))
    history = [user('task'), important, reply('ok'), user('now')]
    out, events = await run_window(
        history, budget=cost(history[0], *history[-2:]) + 100, pin=lambda m: m is important
    )
    assert important not in out
    assert [e.pinned_kept for e in events if isinstance(e, WindowApplied)] == [0]


async def test_pin_a_tool_return_part():
    part = pin(ToolReturnPart('lookup', 'account 4711 is frozen', 'c1'))
    assert part is not None
    pinned = [call('lookup', 'c1'), ModelRequest(parts=[part])]
    history = [user('task'), *pinned, reply(text(500)), user(text(500)), reply('ok'), user('now')]
    out, _ = await run_window(history, budget=cost(history[0], *pinned, *history[-2:]) + NOTE)
    assert out[2:4] == pinned


@pytest.mark.skipif(
    not HAS_MESSAGE_METADATA, reason='pydantic-ai 1.0 has no message metadata: pin messages with a predicate'
)
async def test_pin_a_message():
    important = pin(user('the deadline is Friday'))
    history = [
        user('task'),
        reply(text(500)),
        important,
        reply(text(500)),
        user(text(500)),
        reply('ok'),
        user('now'),
    ]
    out, _ = await run_window(history, budget=cost(history[0], important, *history[-2:]) + NOTE)
    assert important in out
    assert history[1] not in out
    assert history[3] not in out


def test_pin_without_metadata_raises_type_error():
    from pydantic_ai.messages import TextPart

    with pytest.raises(TypeError, match='pin predicate'):
        pin(TextPart('no metadata on text parts'))


async def test_repeated_windowing_keeps_one_note_and_counts_every_dropped_message():
    history: list[ModelMessage] = [user('task')]
    processor = HistoryProcessor(
        stages=[SlidingWindow()], model='gpt-4o', policy=ContextPolicy(budget_tokens=1_500)
    )
    for turn in range(12):
        history = [*history, reply(f'answer {turn} ' + text(200)), user(f'question {turn + 1} ' + text(200))]
        history = await processor.process(history)
        assert_valid_history(history)
        assert len(notes(history)) <= 1
        assert cost(*history) <= 1_500
    [note] = notes(history)
    total = 1 + 2 * 12
    remaining = len([m for m in history if marker_kind(m) != 'window'])
    assert f' {total - remaining} earlier messages were removed' in note.parts[-1].content  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ('utilization', 'expected'), [(0.33, 33_000), (0.66, 66_000), (1.0, 100_000 - 1_024)]
)
def test_budget_from_context_window_utilization_and_reserve(utilization: float, expected: int):
    """The window enforces the policy's budget: the usable window, less the reserve where the reserve does
    not fit in the unused part of the window (utilization and reserve no longer multiply)."""

    def budget(**policy: Any) -> int:
        processor = HistoryProcessor(stages=[SlidingWindow()], model='gpt-4o', policy=ContextPolicy(**policy))
        return processor.make_context().limits.budget

    assert budget(context_window=100_000, utilization=utilization) == expected
    assert budget(context_window=100_000, utilization=utilization, reserve_tokens=0) == int(
        100_000 * utilization
    )
    assert budget(context_window=100_000, utilization=utilization, budget_tokens=5_000) == 5_000


def test_bad_utilization_is_rejected():
    with pytest.raises(ValueError, match='utilization'):
        ContextPolicy(utilization=1.5)


def test_the_window_takes_no_settings():
    with pytest.raises(TypeError):
        SlidingWindow(object())  # type: ignore[misc]


async def test_context_window_from_the_processor_sets_the_budget():
    history = [user('task'), *[m for i in range(6) for m in (reply(text(400)), user(text(400)))]]
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(context_window=4_000, utilization=0.5),
        on_history_event=events.append,
    )
    out = await processor.process(history)
    assert_valid_history(out, original=history)
    assert cost(*out) <= 4_000 * 0.5
    assert [e.budget for e in events if isinstance(e, WindowApplied)] == [2_000]


async def test_unknown_context_window_falls_back_with_a_warning():
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()], model='my-local-model', on_history_event=events.append
    )
    history = [user('task ' + text(100_000)), reply(text(40_000)), user('now')]
    out = await processor.process(history)
    assert_valid_history(out, original=history)
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['context_window_fallback']
    [applied] = [e for e in events if isinstance(e, WindowApplied)]
    assert applied.budget == ContextPolicy().fallback_context_window - 1_024
    assert applied.tokens_after <= applied.budget


def test_unknown_context_window_is_a_configuration_error_when_strict():
    with pytest.raises(ContextWindowUnknownError):
        HistoryProcessor(stages=[SlidingWindow()], model='my-local-model', policy=ContextPolicy(strict=True))


async def test_invalid_input_is_reported_and_not_made_worse():
    orphan = result('search', 'gone', text(300))  # its call was lost before we saw the history
    dangling = call('fetch', 'never-answered')
    history = [
        user('task'),
        reply(text(300)),
        orphan,
        reply(text(300)),
        dangling,
        user(text(300)),
        reply('ok'),
        user('now'),
    ]
    errors_in = [v for v in validate_history(history) if v.severity == 'error']
    assert {v.code for v in errors_in} == {'orphan_tool_return', 'dangling_tool_call'}
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=cost(history[0], *history[-2:]) + 300),
        on_history_event=events.append,
    )
    out = await processor.process(history)
    errors_out = [v for v in validate_history(out) if v.severity == 'error']
    assert len(errors_out) <= len(errors_in)
    assert 'invalid_input' in [e.code for e in events if isinstance(e, HistoryWarning)]
    assert [e for e in events if isinstance(e, WindowApplied)]
    assert out[-1] is history[-1]


def _without_metadata(message: ModelRequest) -> ModelRequest:
    """The note as a version without message metadata (1.0) writes it: recognised by its text alone."""
    return dataclasses.replace(message, metadata=None) if HAS_MESSAGE_METADATA else message  # type: ignore[call-arg]


def test_dropped_count_answers_only_for_our_own_notes():
    carried = SystemPromptPart('Summarize the 7 earlier messages were removed lines as they come.')
    dropped = [ModelRequest(parts=[carried, *user('a').parts]), reply('b'), user('c')]
    note = window_note(dropped, None)
    assert dropped_count(note) == 3
    assert dropped_count(_without_metadata(note)) == 3, 'the carried system prompt is not the note'
    assert dropped_count(user('By the way, 12 earlier messages were removed from my notes.')) is None
    assert dropped_count(dropped[0]) is None
    # a note of notes adds their counts
    again = window_note([note, reply('d'), user('e')], None)
    assert dropped_count(_without_metadata(again)) == 5

"""The sliding window keeps the current run's question: mandatory like the head and the current request."""

from __future__ import annotations

import pytest
from pydantic_ai.messages import ModelMessage, UserPromptPart

from _history import call, reply, result, system_user
from pydantic_ai_history import (
    ContextLimits,
    HistoryEvent,
    SlidingWindow,
    WindowApplied,
    assert_valid_history,
)
from pydantic_ai_history._compat import make_request, message_run_id
from pydantic_ai_history.context._context import HistoryContext
from pydantic_ai_history.messages.units import split_units
from pydantic_ai_history.stages.window import select_window
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio

COUNTER = TokenCounter('gpt-4o')
WORDS = 'the quick brown fox jumps over the lazy dog while the cat sleeps '
QUESTION = 'Turn 2: which regions had the slowest latency, and why?'
RUN = 'run-2'


def _history(run_id: str | None = RUN) -> list[ModelMessage]:
    """An earlier turn, the run's question, then eight tool rounds of 600 tokens each."""
    messages: list[ModelMessage] = [
        system_user('You are careful.', 'Turn 1: summarize the report.'),
        reply('Done: ' + WORDS * 40),
        make_request([UserPromptPart(QUESTION)], run_id=run_id),
    ]
    for i in range(8):
        messages.append(call('search', f'c{i}', {'n': i}))
        messages.append(result('search', f'c{i}', f'RESULT-{i} ' + WORDS * 46))
    return messages


def _asked(messages: list[ModelMessage]) -> bool:
    return any(isinstance(p, UserPromptPart) and p.content == QUESTION for m in messages for p in m.parts)


async def _window(
    messages: list[ModelMessage], run_id: str | None
) -> tuple[list[ModelMessage], list[HistoryEvent]]:
    events: list[HistoryEvent] = []
    budget = COUNTER.estimate(messages).total // 3
    context = HistoryContext(
        counter=COUNTER, limits=ContextLimits.fixed(budget=budget), run_id=run_id, emit_event=events.append
    )
    out = await SlidingWindow()(messages, context)
    assert_valid_history(out, original=messages)
    assert COUNTER.estimate(out).total <= budget
    return out, events


async def test_the_window_keeps_the_question_of_the_run() -> None:
    history = _history()
    out, events = await _window(history, RUN)
    assert any(isinstance(e, WindowApplied) for e in events)
    assert any(m is history[2] for m in out), 'the question left the window'
    assert 'RESULT-0' not in str(out), 'the steps right after the question were dropped'


async def test_outside_a_run_the_window_drops_the_question_like_any_older_unit() -> None:
    out, _ = await _window(_history(), None)
    assert not _asked(out)


async def test_a_question_of_an_earlier_run_may_be_dropped() -> None:
    history = _history('run-1')
    if message_run_id(history[2]) is None:
        pytest.skip('messages carry no run id on this pydantic-ai version: the latest prompt is the question')
    out, _ = await _window(history, RUN)
    assert not _asked(out)


def test_select_window_names_the_question_it_keeps() -> None:
    history = _history()
    units = split_units(history)
    per_message = COUNTER.estimate(history).per_message
    budget = COUNTER.estimate(history).total // 3
    kept = select_window(history, units, per_message, budget, run_id=RUN)
    assert kept.question == 2
    assert 2 in kept.kept_units
    assert 3 in kept.dropped_units  # the first tool round after it
    plain = select_window(history, units, per_message, budget)
    assert plain.question is None
    assert 2 in plain.dropped_units

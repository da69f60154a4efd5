"""Never make it worse: a history that fits stays as it is, one over budget never grows, the guard compares
what a stage changed (not violation counts), and the over-budget warning says what is true."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _history import call, reply, result, system_user, user
from pydantic_ai_history import (
    CompactionResult,
    ContextLimits,
    ContextPolicy,
    HistoryContext,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SlidingWindow,
    StageFailed,
    SummarizerSettings,
    WindowApplied,
    assert_valid_history,
    create_history_processor,
    validate_history,
)
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio

COUNTER = TokenCounter('gpt-4o')
WORDS = 'the quick brown fox jumps over the lazy dog while the cat sleeps '


def text(tokens: int) -> str:
    return WORDS * max(tokens // 13, 1)


def tokens(messages: list[ModelMessage]) -> int:
    return COUNTER.estimate(messages).total


def long_summarizer(words: int) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(content=' '.join(['detail'] * words))])

    return FunctionModel(respond, model_name='summarizer')


def _fitting_history() -> list[ModelMessage]:
    return [user('task ' + text(260)), reply('ok fine'), user('more ' + text(500))]


async def test_issue_example_a_fitting_history_comes_out_unchanged() -> None:
    """Issue 12: with a window of 811, an 811-token input came out at 832. The compaction trigger
    (80%) replaced a 6-token response with a longer summary, then the window swapped that for a note, and the
    warning claimed that the mandatory part did not fit, which the input did."""
    history = _fitting_history()
    budget = tokens(history)  # the input fits exactly
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        model='gpt-4o',
        policy=ContextPolicy(context_window=100_000, budget_tokens=budget, max_tokens=int(budget * 0.8)),
        summarizer=SummarizerSettings(model=long_summarizer(900)),
        artifacts=False,
        on_event=events.append,
    )
    out = await processor.process(history)
    assert all(a is b for a, b in zip(out, history, strict=True))
    assert tokens(out) <= budget
    assert not [
        e for e in events if isinstance(e, (HistoryWarning, StageFailed, CompactionResult, WindowApplied))
    ]


async def test_a_compaction_that_would_not_shrink_is_skipped_before_any_guard() -> None:
    from pydantic_ai_history.stages.compactor import CompactionSettings, Compactor

    history = _fitting_history()
    size = tokens(history)
    limits = ContextLimits.fixed(budget=100_000, trigger=size // 2, target=size // 4)
    stage = Compactor(CompactionSettings())
    events: list[HistoryEvent] = []
    context = HistoryContext(
        counter=COUNTER,
        limits=limits,
        summarizer=SummarizerSettings(model=long_summarizer(900)),
        emit_event=events.append,
    )
    out = await stage(history, context)
    assert out is history
    assert not [e for e in events if isinstance(e, CompactionResult)]
    # a short summary does shrink it: the same stage compacts
    stage = Compactor(CompactionSettings())
    longer = [*history, reply(text(300)), user('and then?')]
    context = HistoryContext(
        counter=COUNTER, limits=limits, summarizer=SummarizerSettings(model=long_summarizer(5))
    )
    out = await stage(longer, context)
    assert out is not longer
    assert tokens(out) < tokens(longer)


async def test_the_window_cuts_the_current_request_when_the_head_and_it_do_not_fit() -> None:
    """The only droppable unit is smaller than the note that would stand for it, and the head with the current
    request is over the budget: the current request's content is cut (stored, and named in what is left),
    never its structure, and the history fits instead of going out over the budget."""
    history = [user('THE TASK ' + text(400)), reply('ok'), user('k'), reply('fine'), user('now ' + text(400))]
    size = tokens(history)
    budget = tokens([history[0], history[-1]]) - 20
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=budget),
        on_history_event=events.append,
    )
    out = await processor.process(history)
    assert_valid_history(out, original=history)
    assert tokens(out) <= min(size, budget)
    assert out[0] is history[0]
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert codes == ['user_prompt_reduced']


async def test_the_current_request_is_cut_to_make_room_for_the_note() -> None:
    """The head and the current request fit, but not with the note a cut needs: the current request gives
    up the room (its original stored), rather than the history going out over the budget."""
    history = [user('THE TASK ' + text(300)), reply('ok'), user('k'), reply('fine'), user('now ' + text(300))]
    head_and_current = tokens([history[0], history[-1]])
    budget = head_and_current + 3  # the head and the current request fit; with any note they do not
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=budget),
        on_history_event=events.append,
    )
    out = await processor.process(history)
    assert_valid_history(out, original=history)
    assert tokens(out) <= budget
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['user_prompt_reduced']


class _Stage:
    """A stage that returns a fixed history."""

    def __init__(self, output: list[ModelMessage]) -> None:
        self.output = output
        self.name = 'fixed'

    async def __call__(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
        return self.output


async def test_the_guard_rejects_a_broken_pair_even_when_the_violation_count_goes_down() -> None:
    """The input has two orphan returns; the stage drops both but also drops a call whose return it keeps.
    One violation instead of two: a count comparison let this through; a pair was broken."""
    opening = system_user('sys', 'task')
    orphans = ModelRequest(parts=[*result('f', 'ghost1', 'x').parts, *result('f', 'ghost2', 'y').parts])
    history = [
        opening,
        reply('hm'),
        orphans,
        call('f', 'c1'),
        result('f', 'c1', 'data'),
        reply('ok'),
        user('now'),
    ]
    assert len([v for v in validate_history(history) if v.severity == 'error']) == 2
    broken = [opening, reply('hm'), result('f', 'c1', 'data'), reply('ok'), history[-1]]
    assert len([v for v in validate_history(broken) if v.severity == 'error']) == 1
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(stages=[_Stage(broken)], model='gpt-4o', on_history_event=events.append)
    out = await processor.process(history)
    assert all(a is b for a, b in zip(out, history, strict=True))
    [failed] = [e for e in events if isinstance(e, StageFailed)]
    assert 'orphan_tool_return' in failed.error

    # dropping the orphans alone (no pair broken) is accepted
    fixed = [opening, reply('hm'), *history[3:]]
    processor = HistoryProcessor(stages=[_Stage(fixed)], model='gpt-4o')
    assert await processor.process(history) == fixed


async def test_the_processor_never_turns_a_fitting_history_into_one_that_does_not_fit() -> None:
    history = [system_user('sys', 'task'), reply('ok'), user('now')]
    bigger = [history[0], reply(text(2_000)), history[-1]]
    budget = tokens(history) + 50
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[_Stage(bigger)],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=budget),
        on_history_event=events.append,
    )
    out = await processor.process(history)
    assert all(a is b for a, b in zip(out, history, strict=True))
    [failed] = [e for e in events if isinstance(e, StageFailed)]
    assert failed.stage == 'processor'
    assert 'fitted' in failed.error


async def test_a_stage_may_grow_the_history_when_a_later_one_brings_it_within_budget() -> None:
    """The budget is the pipeline's promise, not each stage's: a stage that grows the history (a file
    converted for a model that cannot read it) stands when the window then makes it fit."""
    history = [system_user('sys', 'task'), reply(text(300)), user(text(300)), reply('ok'), user('now')]
    bigger = [history[0], reply(text(2_000)), *history[2:]]
    budget = tokens(history) + 20
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[_Stage(bigger), SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=budget),
        on_history_event=events.append,
    )
    out = await processor.process(history)
    assert tokens(out) <= budget
    assert bigger[1] not in out
    assert not [e for e in events if isinstance(e, StageFailed)]


async def test_a_stage_may_not_add_a_violation_where_there_was_none() -> None:
    history = [system_user('sys', 'task'), reply('ok'), user('now')]
    with_empty = [history[0], ModelResponse(parts=[]), history[-1]]
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(stages=[_Stage(with_empty)], model='gpt-4o', on_history_event=events.append)
    out = await processor.process(history)
    assert all(a is b for a, b in zip(out, history, strict=True))
    [failed] = [e for e in events if isinstance(e, StageFailed)]
    assert 'empty_message' in failed.error


async def test_a_history_starting_with_a_response_keeps_its_first_user_message() -> None:
    """Malformed input (the request that asked for the first tool call is lost): the window still keeps the
    first user message, and does not make the history worse."""
    history = [
        call('lookup', 'a'),
        result('lookup', 'a', 'found ' + text(50)),
        reply('done'),
        user('THE ORIGINAL TASK'),
        reply(text(600)),
        user(text(600)),
        reply('ok'),
        user('now'),
    ]
    budget = tokens([*history[:4], *history[-2:]]) + 60
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        stages=[SlidingWindow()],
        model='gpt-4o',
        policy=ContextPolicy(budget_tokens=budget),
        on_history_event=events.append,
    )
    out = await processor.process(history)
    assert history[3] in out
    assert tokens(out) <= budget
    assert not [e for e in events if isinstance(e, StageFailed)]

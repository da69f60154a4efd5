"""Property tests: random valid and broken histories through every stage and the full processor.

For any valid history and any budget the output is valid against the input (pairing, system prompts, signed
thinking, current request), ends with the unchanged current request, leaves the input untouched, and fits the
budget whenever the preserved head and the current request fit. Broken input never makes things worse and is
reported.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence

import pytest
from helpers import Behaviour, RecordingStore, fake_model
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from strategies import (
    MARKER,
    RELIABILITY,
    broken_histories,
    dump,
    error_count,
    errors,
    histories,
    markers_in,
    needs_repair,
    text_of,
)

from pydantic_ai_history import (
    ContextLimits,
    ContextPolicy,
    HistoryEvent,
    HistoryWarning,
    SlidingWindow,
    StageFailed,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.cache import MemoryCache
from pydantic_ai_history.context._context import HistoryContext
from pydantic_ai_history.messages.pinning import question_unit
from pydantic_ai_history.messages.units import head_length, split_units
from pydantic_ai_history.stages._pieces import is_processed
from pydantic_ai_history.stages.artifacts import ARTIFACT_MARKER, ArtifactPlanner, ArtifactSettings
from pydantic_ai_history.stages.compactor import CompactionSettings, Compactor
from pydantic_ai_history.tokens import TokenCounter

# The strategies build the deprecated 2.x `RetryPromptPart` on purpose: stored histories still hold it.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings('ignore:`RetryPromptPart` is deprecated')]

_NOTE_ALLOWANCE = 60
"""Room for the window's note (its text is about 30 tokens; the window reserves 40)."""


def _floor(messages: Sequence[ModelMessage], counter: TokenCounter) -> int:
    """The least any valid output can cost: preserved head, current request, overhead and the window note."""
    estimate = counter.estimate(messages)
    units = split_units(messages)
    head = head_length(messages, units, keep_first_user_message=True)
    current = units[-1]
    kept = set(range(head)) | set(range(current.start, current.end))
    overhead = estimate.total - estimate.tokenizer
    return sum(estimate.per_message[i] for i in kept) + overhead + _NOTE_ALLOWANCE


def _check(
    inp: list[ModelMessage],
    before: bytes,
    snapshot: list[ModelMessage],
    out: list[ModelMessage],
    *,
    artifacts: bool = False,
) -> None:
    """Valid against the input, current request kept, input untouched, nothing pydantic-ai's pre-send
    repair would change. The current request may differ only in parts a stage replaced with its own note: the
    artifact planner (a large fresh tool output or an attached file is reduced before any provider sees it),
    or the window when even the current request alone is over the budget (its content is cut, never its
    structure)."""
    assert not needs_repair(out)
    found = errors(out, original=inp)
    if artifacts:
        found = [e for e in found if 'current_request_changed' not in e]
    _only_artifact_changes(out[-1], inp[-1])
    assert found == []
    assert dump(inp) == before, 'the input history was mutated'
    assert inp == snapshot, 'the input history was mutated'


def _only_artifact_changes(new: ModelMessage, old: ModelMessage) -> None:
    if new is old or new == old:
        return
    assert len(new.parts) == len(old.parts)
    for new_part, old_part in zip(new.parts, old.parts, strict=False):
        if new_part is not old_part and new_part != old_part:
            assert ARTIFACT_MARKER in text_of(new_part) or is_processed(new_part), new_part


def _budget(messages: list[ModelMessage], fraction: float) -> tuple[int, TokenCounter]:
    counter = TokenCounter('gpt-4o')
    return max(int(counter.estimate(messages).total * fraction), 1), counter


@settings(RELIABILITY, max_examples=40)
@given(histories())
def test_generated_histories_are_valid(messages: list[ModelMessage]) -> None:
    """The strategy itself: what it calls valid, the validator and pydantic-ai's pre-send repair accept (and
    the framework serializes)."""
    assert errors(messages) == []
    assert not needs_repair(messages)
    assert dump(messages)


@settings(RELIABILITY, max_examples=30)
@given(broken_histories())
def test_broken_histories_are_broken(messages: list[ModelMessage]) -> None:
    assert messages[-1].kind == 'request'
    assert error_count(messages) > 0
    if _has_repair():  # what the validator calls broken, pydantic-ai's repair would change
        assert needs_repair(messages) or _only_unrepaired_codes(messages)


def _has_repair() -> bool:
    import pydantic_ai.messages as pai_messages

    return hasattr(pai_messages, '_drop_orphaned_tool_results')


def _only_unrepaired_codes(messages: list[ModelMessage]) -> bool:
    """Errors pydantic-ai's repair does not touch: the history's opening (a response, or returns first)."""
    codes = {e.split('[')[1].split(']')[0] for e in errors(messages)}
    return codes <= {'starts_with_response', 'starts_with_tool_return'}


@settings(RELIABILITY, max_examples=60)
@given(histories(), st.floats(0.05, 1.3))
def test_window_stage(messages: list[ModelMessage], fraction: float) -> None:
    budget, counter = _budget(messages, fraction)
    before, snapshot = dump(messages), copy.deepcopy(messages)
    context = HistoryContext(counter=counter, limits=ContextLimits.fixed(budget=budget))
    stage = SlidingWindow()
    out = asyncio.run(stage(messages, context))
    _check(messages, before, snapshot, out)
    if _floor(messages, TokenCounter('gpt-4o')) <= budget:
        assert TokenCounter('gpt-4o').estimate(out).total <= budget


@settings(RELIABILITY, max_examples=60)
@given(histories(), st.floats(0.05, 1.3), st.booleans())
def test_full_processor(messages: list[ModelMessage], fraction: float, keep_first: bool) -> None:
    """The factory's processor (every stage it wires) at a random budget; its own output processed again stays
    valid and in budget (a stored history goes through the processor on every later request)."""
    budget, _ = _budget(messages, fraction)
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        # counted as the checks below count (without a model the processor counts conservatively, and a
        # floor that fits by gpt-4o's count need not fit by its)
        model='gpt-4o',
        policy=ContextPolicy(
            context_window=1_000_000,
            budget_tokens=budget,
            max_tokens=budget + 1,
            target_tokens=max(budget // 2, 1),
        ),
        summarizer=SummarizerSettings(model=fake_model(Behaviour('echo'))),
        keep_first_user_message=keep_first,
        on_event=events.append,
    )
    before, snapshot = dump(messages), copy.deepcopy(messages)
    out = asyncio.run(processor.process(messages))
    _check(messages, before, snapshot, out, artifacts=True)
    assert not [e for e in events if isinstance(e, StageFailed)]
    fits = _floor(messages, TokenCounter('gpt-4o')) <= budget
    if fits and keep_first:
        assert TokenCounter('gpt-4o').estimate(out).total <= budget
    again = asyncio.run(processor.process(out))
    # with keep_first_user_message=False the window moves the system prompt into its note: the next pass's
    # compactor evicts that note and must carry the system prompt on
    assert errors(again, original=out) == []
    counter = TokenCounter('gpt-4o')
    if counter.estimate(out).total <= budget:
        # an output that fits is left as it is: the same objects, so the next request's prefix is the same
        assert [id(m) for m in again] == [id(m) for m in out]
    else:
        # one that does not fit (nothing could make it fit) may be planned again, never made larger: the
        # question a reduction is planned around can be gone with the messages the window dropped
        assert counter.estimate(again).total <= counter.estimate(out).total


@settings(RELIABILITY, max_examples=60)
@given(broken_histories(), st.floats(0.05, 1.3))
def test_broken_input_is_not_made_worse(messages: list[ModelMessage], fraction: float) -> None:
    budget, _ = _budget(messages, fraction)
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(
            context_window=1_000_000,
            budget_tokens=budget,
            max_tokens=budget + 1,
            target_tokens=max(budget // 2, 1),
        ),
        summarizer=SummarizerSettings(model=fake_model(Behaviour('echo'))),
        on_event=events.append,
    )
    before, snapshot = dump(messages), copy.deepcopy(messages)
    out = asyncio.run(processor.process(messages))
    assert out, 'an empty history is rejected by pydantic-ai'
    _only_artifact_changes(out[-1], messages[-1])
    assert error_count(out) <= error_count(messages)
    assert dump(messages) == before
    assert messages == snapshot
    if error_count(messages):
        warnings = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'invalid_input']
        assert warnings, 'the processor did not report the invalid input'


@pytest.mark.anyio
async def test_invalid_input_reported_when_no_stage_acts() -> None:
    messages = [
        ModelResponse(parts=[TextPart(content='a reply whose request is lost')]),
        ModelRequest(parts=[UserPromptPart(content='MARK-x-1 hello')]),
    ]
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        policy=ContextPolicy(context_window=100_000, budget_tokens=100_000), on_event=events.append
    )
    out = await processor.process(messages)
    assert out == messages
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['invalid_input']


# ---- the compactor and the artifact planner on their own ---------------------------------------------------


@settings(RELIABILITY, max_examples=40)
@given(histories(), st.floats(0.05, 1.3), st.sampled_from(['echo', 'raise', 'empty']))
def test_compactor_stage(messages: list[ModelMessage], fraction: float, mode: str) -> None:
    trigger, counter = _budget(messages, fraction)
    target = max(trigger // 2, 1)
    summary_cap = 400
    stage = Compactor(CompactionSettings(summary_max_tokens=summary_cap))
    context = HistoryContext(
        counter=counter,
        limits=ContextLimits.fixed(budget=10**9, trigger=trigger + 1, target=target),
        summarizer=SummarizerSettings(model=fake_model(Behaviour(mode))),
        cache=MemoryCache(),
    )
    before, snapshot = dump(messages), copy.deepcopy(messages)
    out = asyncio.run(stage(messages, context))
    _check(messages, before, snapshot, out)
    over_trigger = TokenCounter('gpt-4o').estimate(messages).total > trigger + 1
    if over_trigger and _floor(messages, TokenCounter('gpt-4o')) + summary_cap + 40 <= target:
        assert TokenCounter('gpt-4o').estimate(out).total <= target


# ---- the current run's question ----------------------------------------------------------------------------

_RUN = 'run-q'
"""The run the stages work for: generated messages carry no run id, so their latest prompt is its question."""


def _question(messages: Sequence[ModelMessage]) -> tuple[list[ModelMessage], int]:
    """The messages of the run's question outside the head and the current request (none when either holds
    it), and what they cost."""
    units = split_units(messages)
    index = question_unit(messages, units, _RUN)
    head = head_length(messages, units, keep_first_user_message=True)
    if index is None or index == len(units) - 1 or units[index].start < head:
        return [], 0
    unit = units[index]
    per_message = TokenCounter('gpt-4o').estimate(messages).per_message
    return list(messages[unit.start : unit.end]), sum(per_message[unit.start : unit.end])


def _kept(question: list[ModelMessage], out: list[ModelMessage]) -> bool:
    return all(any(m is kept for kept in out) for m in question)


@settings(RELIABILITY, max_examples=60)
@given(histories(), st.floats(0.05, 1.3))
def test_window_stage_keeps_the_question_of_the_run(messages: list[ModelMessage], fraction: float) -> None:
    budget, counter = _budget(messages, fraction)
    before, snapshot = dump(messages), copy.deepcopy(messages)
    context = HistoryContext(counter=counter, limits=ContextLimits.fixed(budget=budget), run_id=_RUN)
    out = asyncio.run(SlidingWindow()(messages, context))
    _check(messages, before, snapshot, out)
    question, cost = _question(messages)
    assert _kept(question, out), 'the window dropped the question of the run'
    if _floor(messages, TokenCounter('gpt-4o')) + cost <= budget:
        assert TokenCounter('gpt-4o').estimate(out).total <= budget


@settings(RELIABILITY, max_examples=40)
@given(histories(), st.floats(0.05, 1.3), st.sampled_from(['echo', 'raise']))
def test_compactor_stage_keeps_the_question_of_the_run(
    messages: list[ModelMessage], fraction: float, mode: str
) -> None:
    trigger, counter = _budget(messages, fraction)
    target = max(trigger // 2, 1)
    summary_cap = 400
    context = HistoryContext(
        counter=counter,
        limits=ContextLimits.fixed(budget=10**9, trigger=trigger + 1, target=target),
        summarizer=SummarizerSettings(model=fake_model(Behaviour(mode))),
        cache=MemoryCache(),
        run_id=_RUN,
    )
    before, snapshot = dump(messages), copy.deepcopy(messages)
    out = asyncio.run(Compactor(CompactionSettings(summary_max_tokens=summary_cap))(messages, context))
    _check(messages, before, snapshot, out)
    question, cost = _question(messages)
    assert _kept(question, out), 'the compactor summarized the question of the run'
    over_trigger = TokenCounter('gpt-4o').estimate(messages).total > trigger + 1
    if over_trigger and _floor(messages, TokenCounter('gpt-4o')) + cost + summary_cap + 40 <= target:
        assert TokenCounter('gpt-4o').estimate(out).total <= target


@settings(RELIABILITY, max_examples=40)
@given(histories(), st.floats(0.05, 1.3))
def test_artifact_stage(messages: list[ModelMessage], fraction: float) -> None:
    """Valid, input untouched; the current request changes only where a large artifact was reduced, and
    every reduced original is in the store."""
    budget, counter = _budget(messages, fraction)
    store = RecordingStore()
    context = HistoryContext(
        counter=counter, limits=ContextLimits.fixed(budget=budget * 2), cache=MemoryCache(), store=store
    )
    stage = ArtifactPlanner(ArtifactSettings(artifact_budget_tokens=budget))
    before, snapshot = dump(messages), copy.deepcopy(messages)
    out = asyncio.run(stage(messages, context))
    assert errors(out) == []
    assert [e for e in errors(out, original=messages) if 'current_request_changed' not in e] == []
    assert dump(messages) == before
    assert messages == snapshot
    assert len(out) == len(messages)
    for new, old in zip(out, messages, strict=False):
        if new is old:
            continue
        assert len(new.parts) == len(old.parts)
        for new_part, old_part in zip(new.parts, old.parts, strict=False):
            if new_part is not old_part:
                reduced = ARTIFACT_MARKER in text_of(new_part) or is_processed(new_part)
                assert reduced or isinstance(new_part.content, list)
    assert markers_in(messages) <= markers_in(out) | set(MARKER.findall(store.text()))

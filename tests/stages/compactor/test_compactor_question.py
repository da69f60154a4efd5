"""The current run's question and the compactor: kept verbatim for as long as its run lasts.

When the summary takes the steps that followed the question, the question's request follows the summary as it
was; the summarizer never reads it; a later run may summarize it. A compaction that ends over its target says
why in its `CompactionResult.over_target`.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

from _compaction import SetupCompactor, StubSummarizer, compaction_setup, context, text, tool_loop
from _history import call, reply, result
from pydantic_ai_history import CompactionResult, HistoryEvent, HistoryWarning, assert_valid_history
from pydantic_ai_history._compat import make_request, message_run_id
from pydantic_ai_history.messages._marks import marker_kind
from pydantic_ai_history.messages.pinning import question_unit
from pydantic_ai_history.messages.units import split_units
from pydantic_ai_history.stages.compactor._plan import plan_cut

pytestmark = pytest.mark.anyio

TRIGGER, TARGET = 20_000, 8_000
QUESTION = 'Turn 2: which of the migrated tables still lack an index, and why?'
RUN = 'run-2'


def _question(run_id: str | None = RUN) -> ModelRequest:
    return make_request([UserPromptPart(QUESTION)], run_id=run_id)


def _rounds(first: int, count: int, tokens: int = 1_000, tag: str = 'now') -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for i in range(first, first + count):
        messages.append(call('fetch', f'{tag}{i}', {'page': i}))
        messages.append(result('fetch', f'{tag}{i}', text(tokens, f'{tag.upper()}-{i:03d}')))
    return messages


def _history(question: ModelRequest, after: int = 30) -> list[ModelMessage]:
    """An earlier turn (ten tool rounds and an answer), then the run's question and `after` tool rounds."""
    return [*tool_loop(10, tag='old'), reply('The first turn is done.'), question, *_rounds(0, after)]


def _compactor(stub: StubSummarizer, **kwargs: Any) -> SetupCompactor:
    return SetupCompactor(
        compaction_setup(
            max_tokens=TRIGGER,
            target_tokens=TARGET,
            summarizer_model=stub.model(),
            stub_tool_results=False,
            **kwargs,
        )
    )


def _compactions(events: list[HistoryEvent]) -> list[CompactionResult]:
    return [e for e in events if isinstance(e, CompactionResult)]


async def test_the_question_follows_the_summary_verbatim_when_the_summary_takes_the_steps_after_it() -> None:
    stub = StubSummarizer()
    question = _question()
    full = _history(question)
    ctx, events = context(run_id=RUN)
    out = await _compactor(stub)(full, ctx)

    assert_valid_history(out, original=full)
    assert _compactions(events), 'no compaction: the case was not exercised'
    at = next(i for i, m in enumerate(out) if m is question)  # the same object: verbatim
    assert marker_kind(out[at - 1]) == 'summary', 'the question follows the summary'
    assert 'NOW-000' not in ''.join(str(p) for m in out[at:] for p in m.parts), (
        'the steps after the question were summarized'
    )
    assert stub.prompts, 'no summary was asked for'
    assert all(QUESTION not in p for p in stub.prompts), 'the summarizer read the question'
    assert ctx.estimate(out).total <= TARGET


async def test_the_question_stays_through_every_compaction_of_its_run() -> None:
    stub = StubSummarizer()
    question = _question()
    compactor = _compactor(stub)
    ctx, events = context(run_id=RUN)
    history = _history(question)
    for step in range(3):
        history = await compactor([*history, *_rounds(100 + 20 * step, 20, tag=f's{step}x')], ctx)
        assert any(m is question for m in history), f'compaction {step}: the question left the history'
        assert sum(marker_kind(m) == 'summary' for m in history) == 1
    assert len(_compactions(events)) >= 3


async def test_a_question_of_an_earlier_run_may_be_summarized() -> None:
    if message_run_id(_question()) is None:
        pytest.skip('messages carry no run id on this pydantic-ai version: the latest prompt is the question')
    stub = StubSummarizer()
    full = _history(_question('run-1'))
    ctx, _ = context(run_id=RUN)  # a later run, begun without a prompt of its own
    out = await _compactor(stub)(full, ctx)
    assert_valid_history(out, original=full)
    assert all(QUESTION not in str(p) for m in out for p in m.parts if isinstance(p, UserPromptPart))


async def test_outside_a_run_the_latest_prompt_is_no_question_to_keep() -> None:
    """`compact()` outside a run (no run id) keeps the behaviour before runs had a question: this also shows
    the run's question is kept for being the run's, not by chance."""
    stub = StubSummarizer()
    full = _history(_question(None))
    ctx, _ = context()
    out = await _compactor(stub)(full, ctx)
    assert_valid_history(out, original=full)
    assert not any(isinstance(p, UserPromptPart) and p.content == QUESTION for m in out for p in m.parts)


def test_question_unit_is_the_latest_prompt_of_the_run() -> None:
    question = _question()
    full = _history(question)
    units = split_units(full)
    index = question_unit(full, units, RUN)
    assert index is not None
    assert full[units[index].start] is question
    assert question_unit(full, units, None) is None
    if message_run_id(question) is not None:
        assert question_unit(full, units, 'run-3') is None


def test_plan_cut_reserves_the_question_wherever_the_cut_falls() -> None:
    costs = [500] * 20
    costs[3] = 300  # the question
    plain = plan_cut(
        unit_costs=costs, body_first=1, target=4_000, fixed_cost=100, summary_reserve=500, pinned={}
    )
    kept = plan_cut(
        unit_costs=costs,
        body_first=1,
        target=4_000,
        fixed_cost=100,
        summary_reserve=500,
        pinned={},
        question=4,
    )
    assert plain.unit is not None
    assert kept.unit is not None
    assert kept.pinned_reserve == plain.pinned_reserve + 300
    assert kept.tail_budget == plain.tail_budget - 300


async def test_a_compaction_over_its_target_says_why() -> None:
    stub = StubSummarizer()
    question = _question()
    # the last unit (a read-back, say) is over the target alone: nothing the compactor may take helps
    full = [
        *_history(question, after=20),
        call('read_artifact', 'big'),
        result('read_artifact', 'big', text(9_000)),
    ]
    ctx, events = context(run_id=RUN)
    out = await _compactor(stub)(full, ctx)
    assert_valid_history(out, original=full)
    assert any(m is question for m in out)
    (event,) = _compactions(events)
    assert event.tokens_after > TARGET
    assert event.over_target is not None
    assert 'the verbatim tail with the current request' in event.over_target
    assert "the current run's question" in event.over_target
    warning = next(e for e in events if isinstance(e, HistoryWarning) and e.code == 'compaction_over_target')
    assert event.over_target in warning.message


async def test_a_compaction_within_its_target_has_no_reason_to_give() -> None:
    stub = StubSummarizer()
    ctx, events = context(run_id=RUN)
    await _compactor(stub)(_history(_question()), ctx)
    (event,) = _compactions(events)
    assert event.tokens_after <= TARGET
    assert event.over_target is None

"""Recall (`CompactionSettings.recall_chars`): a new question after a compaction carries, in its own request,
the stored passages that match it; nothing else changes, and nothing changes with it off."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from _compaction import SYSTEM, StubSummarizer, agent_with
from _history import call, result, system_user, user
from pydantic_ai_history import (
    CompactionSettings,
    ContextPolicy,
    HistoryEvent,
    PassagesRecalled,
    SummarizerSettings,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history.messages._marks import OPENINGS, part_kinds
from pydantic_ai_history.stages.compactor._recall import recall_question, with_recall
from pydantic_ai_history.store import MemoryStore

pytestmark = pytest.mark.anyio

CITIES = ['Lisbon', 'Oslo', 'Quito', 'Hanoi', 'Dakar', 'Perth', 'Tbilisi', 'Lima', 'Accra', 'Riga']
FILLER = 'the carrier scans every parcel at the dock and the manifest lists weights and seals. ' * 40


def orders_session(rounds: int = 10) -> list[ModelMessage]:
    """A task, then `rounds` lookups: each return names one order's city among filler text."""
    messages: list[ModelMessage] = [system_user(SYSTEM, 'Audit the shipping manifests for the last week.')]
    for i in range(rounds):
        messages.append(call('lookup', f'c{i}', {'order': f'ORD-{i:04d}'}))
        body = f'{FILLER}\nOrder ORD-{i:04d} ships from the {CITIES[i]} warehouse.\n{FILLER}'
        messages.append(result('lookup', f'c{i}', body))
    messages.append(ModelResponse(parts=[TextPart('The audit is done: all ten orders ship on time.')]))
    return messages


def processor(
    recall_chars: int, events: list[HistoryEvent], store: MemoryStore | None = None, **policy: Any
) -> Any:
    return create_history_processor(
        policy=ContextPolicy(
            context_window=policy.get('window', 60_000),
            max_tokens=policy.get('max_tokens', 6_000),
            target_tokens=policy.get('target_tokens', 2_500),
            reserve_tokens=0,
        ),
        summarizer=SummarizerSettings(model=StubSummarizer().model()),
        compaction=CompactionSettings(recall_chars=recall_chars, stub_tool_results=False),
        artifacts=False,
        store=store or MemoryStore(),
        scope=lambda ctx: '',  # the runs read what the compaction outside any run stored
        on_history_event=events.append,
    )


def recalled(message: ModelMessage) -> list[str]:
    kinds = part_kinds(message)
    return [p.content for p, k in zip(message.parts, kinds, strict=True) if k == 'recall']  # type: ignore[misc]


async def compacted_session(recall_chars: int = 4_000) -> tuple[Any, list[ModelMessage], list[HistoryEvent]]:
    events: list[HistoryEvent] = []
    history_processor = processor(recall_chars, events)
    session = orders_session()
    compacted = await history_processor.compact(session, model='openai:gpt-4o')
    assert len(compacted) < len(session)
    assert 'Tbilisi' not in str(compacted[:-2])  # the order asked about below is in the replaced part
    return history_processor, compacted, events


async def test_a_question_after_a_compaction_carries_the_passages_that_answer_it():
    history_processor, compacted, events = await compacted_session()
    question = user('Which warehouse does order ORD-0006 ship from?')
    history = [*compacted, question]

    out = await history_processor.process(history, model='openai:gpt-4o')

    assert all(a is b for a, b in zip(out[:-1], history[:-1], strict=True)), 'only the newest request changes'
    newest = out[-1]
    assert isinstance(newest, ModelRequest)
    (text,) = recalled(newest)
    assert text.startswith(OPENINGS['recall'])
    assert 'Order ORD-0006 ships from the Tbilisi warehouse.' in text
    assert 'read_artifact(artifact_id="' in text  # where it is stored, and how to read on
    assert len(text) < 4_000 + 200
    assert newest.parts[-1] is question.parts[-1], 'the question stays last, itself'
    assert_valid_history(out)
    (event,) = [e for e in events if isinstance(e, PassagesRecalled)]
    assert event.artifacts
    assert event.tokens_added > 0
    # the next request of the run finds the recall in place: nothing more is searched or changed
    again = await history_processor.process(out, model='openai:gpt-4o')
    assert again is out
    assert len([e for e in events if isinstance(e, PassagesRecalled)]) == 1


async def test_recall_is_off_by_default_and_a_fitting_history_comes_back_itself():
    history_processor, compacted, events = await compacted_session(recall_chars=0)
    history = [*compacted, user('Which warehouse does order ORD-0006 ship from?')]
    assert await history_processor.process(history, model='openai:gpt-4o') is history
    assert not [e for e in events if isinstance(e, PassagesRecalled)]


async def test_nothing_is_recalled_without_a_compaction_or_a_match():
    events: list[HistoryEvent] = []
    history_processor = processor(4_000, events)
    short = [*orders_session(2), user('Which warehouse does order ORD-0001 ship from?')]
    assert await history_processor.process(short, model='openai:gpt-4o') is short  # nothing was replaced
    history_processor, compacted, events = await compacted_session()
    unrelated = [*compacted, user('zzyzx qwv?')]
    assert await history_processor.process(unrelated, model='openai:gpt-4o') is unrelated
    assert not [e for e in events if isinstance(e, PassagesRecalled)]


async def test_recall_stays_within_the_room_under_the_trigger():
    events: list[HistoryEvent] = []
    history_processor = processor(4_000, events)
    compacted = await history_processor.compact(orders_session(), model='openai:gpt-4o')
    history = [*compacted, user('Which warehouse does order ORD-0006 ship from?')]
    tokens = history_processor.counter_for('openai:gpt-4o').estimate(history).total
    # a trigger 150 tokens above the history: less room than a passage takes
    tight = processor(4_000, events, history_processor.store, max_tokens=tokens + 150, target_tokens=100)
    assert await tight.process(history, model='openai:gpt-4o') is history
    roomy = processor(4_000, events, history_processor.store, max_tokens=tokens + 1_000, target_tokens=100)
    out = await roomy.process(history, model='openai:gpt-4o')
    assert recalled(out[-1])
    assert roomy.counter_for('openai:gpt-4o').estimate(out).total <= tokens + 1_000


def test_the_question_is_found_only_in_a_new_user_turn_after_a_replacement():
    summary_like = user('no summary of ours')
    assert recall_question([summary_like, user('a question?')]) is None  # nothing of ours was replaced
    tool_step = result('lookup', 'c1', 'output')
    assert recall_question([tool_step]) is None
    assert recall_question([]) is None


def test_the_recall_part_goes_before_the_question():
    request = ModelRequest(parts=[UserPromptPart('first'), UserPromptPart('the question')])
    out = with_recall(request, 'passages')
    assert [p.content for p in out.parts] == ['first', 'passages', 'the question']  # type: ignore[attr-defined]


def test_a_negative_recall_size_fails_at_construction():
    with pytest.raises(ValueError, match=r'CompactionSettings\.recall_chars must not be negative'):
        CompactionSettings(recall_chars=-1)


async def test_a_run_sees_the_passages_on_every_step_and_its_prefix_never_changes():
    """Through an `Agent`: the model reads the passages with the question, calls a tool, and answers; the
    request with the question is the same on both steps (the prompt cache keeps it)."""
    history_processor, compacted, _ = await compacted_session()
    seen: list[list[ModelMessage]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        usage = RequestUsage(input_tokens=1_000, output_tokens=10)
        if len(seen) == 1:
            return ModelResponse(
                parts=[ToolCallPart('check', {'order': 'ORD-0006'}, tool_call_id='k1')], usage=usage
            )
        return ModelResponse(parts=[TextPart('Tbilisi')], usage=usage)

    agent = agent_with(FunctionModel(answer), history_processor)

    @agent.tool_plain
    def check(order: str) -> str:
        return f'{order} is on schedule'

    run = await agent.run('Which warehouse does order ORD-0006 ship from?', message_history=compacted)
    assert run.output == 'Tbilisi'
    first, second = seen
    asked = next(m for m in reversed(first) if isinstance(m, ModelRequest))
    assert any('Tbilisi warehouse' in text for text in recalled(asked))
    same = next(m for m in second if isinstance(m, ModelRequest) and recalled(m))
    assert recalled(same) == recalled(asked)
    assert second[: len(first)] == first  # the second request extends the first one's history
    assert_valid_history(run.all_messages())

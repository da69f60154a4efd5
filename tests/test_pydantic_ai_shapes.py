"""Harvest: pydantic-ai's own history shapes through window-only, compaction-only and the full pipeline.

Every history is built the way pydantic-ai's tests build it (deferred tools, approvals, transcript-repair
cases, every part type; also recorded from real approval and deferred-tool runs) and run at a ladder of
budgets. Across all of them: no output that pydantic-ai's pre-send repair would change (2.x, where it exists),
no output over budget from an input that fitted, no input mutated, and under a huge window the output is the
input, the same objects.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from _pai_shapes import VALID, agent_histories, handbuilt, repair_changes, repair_functions
from pydantic_ai_history import (
    ContextPolicy,
    HistoryProcessor,
    SlidingWindow,
    StageFailed,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.stages.compactor import CompactionSettings, Compactor
from pydantic_ai_history.tokens import TokenCounter

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings('ignore:`RetryPromptPart` is deprecated')]

FRACTIONS = (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.0, 1.3)
"""Budgets as fractions of each input's own size."""
COUNTER = TokenCounter('gpt-4o')


def _summarizer(words: int) -> FunctionModel:
    """A scripted summarizer: `words` words of summary, whatever it is shown."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(content='Summary: ' + ' '.join(['fact'] * words))])

    return FunctionModel(respond, model_name='summarizer')


def _histories() -> dict[str, list[ModelMessage]]:
    from _pai_shapes import _long  # the same padding the hand-built long variants get

    found = {n: m for n, m in handbuilt().items() if n.removesuffix('_long') in VALID}
    for name, messages in agent_histories().items():
        found[name] = messages
        if len(messages) > 1:
            found[f'{name}_long'] = _long(messages)
    return found


HISTORIES = _histories()


def _tokens(messages: list[ModelMessage]) -> int:
    return COUNTER.estimate(messages).total


def _window_only(budget: int, _: int) -> HistoryProcessor:
    return HistoryProcessor(
        stages=[SlidingWindow()], model='gpt-4o', policy=ContextPolicy(budget_tokens=budget)
    )


def _compaction_only(budget: int, words: int) -> HistoryProcessor:
    policy = ContextPolicy(budget_tokens=budget, max_tokens=max(budget, 4), target_tokens=max(budget // 3, 1))
    return HistoryProcessor(
        stages=[Compactor(CompactionSettings())],
        model='gpt-4o',
        policy=policy,
        summarizer=SummarizerSettings(model=_summarizer(words)),
    )


def _full(budget: int, words: int) -> HistoryProcessor:
    return create_history_processor(
        model='gpt-4o',
        policy=ContextPolicy(
            context_window=10_000_000, budget_tokens=budget, max_tokens=max(int(budget * 0.8), 1)
        ),
        summarizer=SummarizerSettings(model=_summarizer(words)),
    )


PIPELINES: dict[str, Callable[[int, int], HistoryProcessor]] = {
    'window': _window_only,
    'compaction': _compaction_only,
    'full': _full,
}


def _is_repair_free(messages: list[ModelMessage]) -> bool:
    return not repair_changes(messages)


@pytest.mark.parametrize('pipeline', sorted(PIPELINES))
def test_harvest_at_a_ladder_of_budgets(pipeline: str) -> None:
    found: dict[str, list[str]] = {'repair': [], 'over_budget': [], 'grew': [], 'mutated': [], 'failed': []}
    runs = 0
    for name, messages in HISTORIES.items():
        size = _tokens(messages)
        for fraction in FRACTIONS:
            for words in (5, 400):  # a short summary, and one longer than much of what it replaces
                budget = max(int(size * fraction), 1)
                events: list[Any] = []
                processor = PIPELINES[pipeline](budget, words)
                processor.on_history_event = events.append
                before = ModelMessagesTypeAdapter.dump_json(messages)
                snapshot = copy.deepcopy(messages)
                out = asyncio.run(processor.process(messages))
                runs += 1
                where = f'{name} at {fraction} ({budget}), summary {words} words'
                if _is_repair_free(messages) and not _is_repair_free(out):
                    found['repair'].append(where)
                after = _tokens(out)
                if size <= budget < after:
                    found['over_budget'].append(f'{where}: {size} -> {after}')
                if size > budget and after > size:
                    found['grew'].append(f'{where}: {size} -> {after}')
                if ModelMessagesTypeAdapter.dump_json(messages) != before or messages != snapshot:
                    found['mutated'].append(where)
                found['failed'].extend(f'{where}: {e.error}' for e in events if isinstance(e, StageFailed))
    assert runs == len(HISTORIES) * len(FRACTIONS) * 2
    assert found == {k: [] for k in found}


def test_the_pre_send_repair_check_can_fail() -> None:
    """The harvest's repair check is real on versions that have the repair: a broken pair is caught."""
    if repair_functions() is None:
        pytest.skip('this pydantic-ai has no pre-send repair (_drop_orphaned_tool_results): 2.x only')
    messages = handbuilt()['hitl_resume_continued']
    assert _is_repair_free(messages)
    assert not _is_repair_free([messages[0], *messages[2:]])  # the call dropped, its returns kept


@pytest.mark.parametrize('name', sorted(HISTORIES))
def test_output_is_the_input_under_a_huge_window(name: str) -> None:
    messages = HISTORIES[name]
    processor = create_history_processor(
        model='gpt-4o',
        policy=ContextPolicy(context_window=10_000_000),
        summarizer=SummarizerSettings(model=_summarizer(5)),
    )
    out = asyncio.run(processor.process(messages))
    assert len(out) == len(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))

"""The drop-in paths: `history_processors=[processor]` (1.x), `ProcessHistory(processor)` and
`processor.capability()` (versions with capabilities), all with the same processor object."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart

from pydantic_ai_history import (
    ArtifactSettings,
    ContextPolicy,
    HistoryProcessor,
    SlidingWindow,
    assert_valid_history,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES, ProcessHistory

try:
    from pydantic_ai.capabilities import AbstractCapability
except ImportError:  # pydantic-ai 1.0
    AbstractCapability = object  # type: ignore[assignment,misc]
from pydantic_ai_history.testing import StrictProvider

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings('ignore::DeprecationWarning')]

WINDOW = 5_000
PAGE = 'lorem ipsum dolor sit amet consectetur adipiscing elit ' * 90


def _history_processors_supported() -> bool:
    try:
        Agent('test', history_processors=[])
    except TypeError:
        return False
    return True


def _respond(calls: int) -> Any:
    state = {'n': 0}

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        state['n'] += 1
        if state['n'] <= calls:
            return ModelResponse(
                parts=[ToolCallPart('page', {'n': state['n']}, tool_call_id=f'p{state["n"]}')]
            )
        return ModelResponse(parts=[TextPart('finished')])

    return respond


async def _run(**agent_kwargs: Any) -> tuple[StrictProvider, HistoryProcessor]:
    processor = agent_kwargs.pop('processor')
    provider = StrictProvider(_respond(12), context_window=WINDOW)
    agent: Agent[None, str] = Agent(provider.model(), instructions='Read the pages.', **agent_kwargs)

    @agent.tool_plain
    def page(n: int) -> str:
        """One page."""
        return f'{n}: {PAGE}'

    result = await agent.run('read all pages')
    assert result.output == 'finished'
    assert not provider.rejected
    assert len(provider.requests) == 13
    assert provider.peak_input_tokens <= WINDOW
    for record in provider.requests:
        assert_valid_history(list(record.history))
    assert processor.stats().overall.window_applications > 0
    return provider, processor


@pytest.mark.skipif(not _history_processors_supported(), reason='2.x removed history_processors=')
async def test_history_processors():
    processor = HistoryProcessor(stages=[SlidingWindow()], policy=ContextPolicy(context_window=WINDOW))
    await _run(processor=processor, history_processors=[processor])


@pytest.mark.skipif(_history_processors_supported(), reason='only 2.x rejects history_processors=')
def test_history_processors_is_a_type_error_on_2x():
    processor = HistoryProcessor(stages=[SlidingWindow()], policy=ContextPolicy(context_window=WINDOW))
    with pytest.raises(TypeError):
        Agent('test', history_processors=[processor])


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='pydantic-ai 1.0 has no capabilities')
async def test_process_history_capability():
    processor = HistoryProcessor(stages=[SlidingWindow()], policy=ContextPolicy(context_window=WINDOW))
    await _run(processor=processor, capabilities=[ProcessHistory(processor)])


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='pydantic-ai 1.0 has no capabilities')
async def test_own_capability():
    processor = HistoryProcessor(stages=[SlidingWindow()], policy=ContextPolicy(context_window=WINDOW))
    _provider, _ = await _run(processor=processor, capabilities=[processor.capability()])


@pytest.mark.skipif(HAS_CAPABILITIES, reason='this version has capabilities')
def test_capability_explains_itself_on_1_0():
    with pytest.raises(RuntimeError, match='history_processors'):
        HistoryProcessor(stages=[SlidingWindow()]).capability()


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='pydantic-ai 1.0 has no capabilities')
async def test_context_window_from_the_model_profile_where_it_has_one():
    """On 2.x the StrictProvider's model carries `context_window` in its profile: no override needed."""
    processor = HistoryProcessor(stages=[SlidingWindow()])
    provider = StrictProvider(_respond(12), context_window=WINDOW)
    if not isinstance(provider.model().profile, dict):
        pytest.skip('1.x profiles have no context window')
    await _run(processor=processor, capabilities=[processor.capability()])


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='this version has no capabilities')
async def test_the_capability_counts_tool_definitions_before_any_usage_is_known() -> None:
    """The first request has no provider usage yet: its estimate must include the tools it sends."""
    from pydantic_ai_history import RequestProcessed

    events: list[RequestProcessed] = []
    processor = HistoryProcessor(
        stages=[],
        on_history_event=lambda e: events.append(e) if isinstance(e, RequestProcessed) else None,
        policy=ContextPolicy(context_window=WINDOW),
    )
    provider = StrictProvider(_respond(0), context_window=WINDOW)
    agent: Agent[None, str] = Agent(provider.model(), capabilities=[processor.capability()])
    description = 'Looks a product up in the catalogue by its exact name and returns every known field. ' * 20

    @agent.tool_plain(description=description)
    def lookup(name: str) -> str:
        return name

    await agent.run('hello')
    first = events[0]
    counter = processor.counter_for(provider.model())
    tools_cost = counter.count_text(description)
    assert first.tokens_before >= first.tokenizer_tokens_after + tools_cost
    # and counting the tools brings the estimate much closer to what the provider counted
    real = provider.requests[0].input_tokens
    assert abs(first.tokens_before - real) < 0.25 * abs(first.tokenizer_tokens_after - real)


def _recording(calls: int, tools_seen: list[list[str]]) -> Any:
    respond = _respond(calls)

    def record(messages: list[ModelMessage], info: Any) -> ModelResponse:
        tools_seen.append(sorted(t.name for t in info.function_tools))
        return respond(messages, info)

    return record


async def _tool_lists(
    capabilities: list[Any], *, calls: int, page: str, window: int = 1_000_000
) -> list[list[str]]:
    seen: list[list[str]] = []
    provider = StrictProvider(_recording(calls, seen), context_window=window)
    agent: Agent[None, str] = Agent(provider.model(), capabilities=capabilities)

    @agent.tool_plain(name='page')
    def read_page(n: int) -> str:
        """One page."""
        return f'{n}: {page}'

    await agent.run('read all pages')
    return seen


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='pydantic-ai 1.0 has no capabilities')
async def test_a_run_that_never_spills_sends_the_tool_lists_it_would_without_us() -> None:
    from pydantic_ai_history import create_history_processor

    for page in (PAGE, PAGE * 30):  # small returns, and large ones (~150,000 characters) let in whole
        processor = create_history_processor(
            policy=ContextPolicy(context_window=1_000_000),
            artifacts=ArtifactSettings(max_artifact_tokens=None),
            compaction=False,
        )
        with_us = await _tool_lists([processor.capability()], calls=3, page=page)
        without = await _tool_lists([], calls=3, page=page)
        assert with_us == without == [['page']] * 4
        assert set(processor.stats().overall.artifacts_by_strategy) <= {'include_full'}


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='pydantic-ai 1.0 has no capabilities')
async def test_a_run_that_spills_is_offered_read_artifact_with_the_first_note() -> None:
    """The first page is too large for the artifact budget: its return is reduced to a note naming
    `read_artifact`, and the request that carries the note offers the tool, as does every later one.
    (tests/e2e/test_artifacts_e2e.py reads an original back through it.)"""
    from pydantic_ai_history import create_history_processor

    processor = create_history_processor(policy=ContextPolicy(context_window=20_000), compaction=False)
    seen = await _tool_lists([processor.capability()], calls=3, page=PAGE * 30, window=20_000)
    assert seen == [['page'], *[['page', 'read_artifact']] * 3]


@pytest.mark.skipif(
    not hasattr(AbstractCapability, 'for_agent'), reason='capabilities are told of their agent from 2.x'
)
def test_the_early_1x_toolset_beside_the_capability_is_refused_when_the_agent_is_built() -> None:
    """`capabilities=[p]` brings `read_artifact`; adding `toolsets=[p.readback_toolset()]` as early 1.x did
    would clash at the first large output: refused at once, with what to write instead."""
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.models.test import TestModel

    processor = HistoryProcessor()
    with pytest.raises(UserError, match=r'remove processor\.readback_toolset\(\)'):
        Agent(TestModel(), capabilities=[processor], toolsets=[processor.readback_toolset()])
    Agent(TestModel(), capabilities=[processor])  # the capability alone is what to write

"""Each stage is a capability of its own: alone on an agent, beside pydantic-ai's and harness's capabilities,
and (on early 1.x) a history processor; every request it shapes fits a strict provider and stays valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.usage import UsageLimits

from _compaction import MAJOR, StubSummarizer
from pydantic_ai_history import (
    ArtifactPlanner,
    ArtifactProcessed,
    CompactionResult,
    CompactionSettings,
    Compactor,
    ContextPolicy,
    HistoryEvent,
    SlidingWindow,
    SummarizerSettings,
    WindowApplied,
    assert_valid_history,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),  # deprecated on late 1.x
]

WINDOW = 12_000
needs_capabilities = pytest.mark.skipif(not HAS_CAPABILITIES, reason='this pydantic-ai has no capabilities')


def pages(fixtures_dir: Path) -> list[str]:
    """Real tool outputs (CSV rows) cut into pages of about 1,500 tokens."""
    text = (fixtures_dir / 'tool_outputs' / 'vega_datasets' / 'airports.csv').read_text().splitlines()
    return ['\n'.join(text[i : i + 40]) for i in range(0, len(text), 40)]


def tool_loop(provider_steps: int, data: list[str]) -> tuple[StrictProvider, Any]:
    """A provider that fetches one page per step, then answers; and the `fetch` tool."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = len(provider.requests)
        if step >= provider_steps:
            return ModelResponse(parts=[TextPart('done')])
        return ModelResponse(parts=[ToolCallPart('fetch', {'page': step}, tool_call_id=f'call_{step}')])

    provider = StrictProvider(respond, context_window=WINDOW)

    def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        return data[page % len(data)]

    return provider, fetch


def agent_for(model: Any, stage: Any, fetch: Any, *others: Any) -> Agent[None, str]:
    if HAS_CAPABILITIES:
        agent = Agent(model, capabilities=[*others, stage])
    else:
        agent = Agent(model, history_processors=[stage])
    agent.tool_plain(fetch)
    return agent


async def test_the_sliding_window_alone_keeps_a_long_tool_loop_inside_the_window(fixtures_dir: Path) -> None:
    events: list[HistoryEvent] = []
    window = SlidingWindow(policy=ContextPolicy(context_window=WINDOW), on_history_event=events.append)
    provider, fetch = tool_loop(40, pages(fixtures_dir))
    result = await agent_for(provider.model(), window, fetch).run(
        'Read every page.', usage_limits=UsageLimits(request_limit=None)
    )
    assert result.output == 'done'
    assert not provider.rejected
    assert provider.peak_input_tokens <= WINDOW
    assert any(isinstance(e, WindowApplied) for e in events)
    for record in provider.requests:
        assert_valid_history(list(record.history))
    assert window.id == 'pydantic_ai_history.window'


@needs_capabilities
async def test_the_compactor_alone_after_pydantic_ais_file_understanding(fixtures_dir: Path) -> None:
    from pydantic_ai.models.test import TestModel

    try:
        from pydantic_ai.capabilities import FileUnderstanding
    except ImportError:  # late 1.x: the compactor alone
        others: tuple[Any, ...] = ()
    else:
        others = (FileUnderstanding(fallback_subagent_model=TestModel()),)
    events: list[HistoryEvent] = []
    summarizer = StubSummarizer()
    compactor = Compactor(
        CompactionSettings(stub_tool_results=False),
        policy=ContextPolicy(context_window=WINDOW, max_tokens=8_000, target_tokens=3_000),
        summarizer=SummarizerSettings(model=summarizer.model()),
        on_history_event=events.append,
    )
    provider, fetch = tool_loop(30, pages(fixtures_dir))
    result = await agent_for(provider.model(), compactor, fetch, *others).run(
        'Read every page.', usage_limits=UsageLimits(request_limit=None)
    )
    assert result.output == 'done'
    assert not provider.rejected
    compactions = [e for e in events if isinstance(e, CompactionResult)]
    assert compactions
    assert summarizer.calls == sum(c.summarizer_calls for c in compactions) > 0
    assert all(c.tokens_after <= 3_000 for c in compactions)
    for record in provider.requests:
        assert_valid_history(list(record.history))


@needs_capabilities
async def test_the_artifact_planner_alone_stubs_a_large_return_and_offers_its_read_back(
    fixtures_dir: Path,
) -> None:
    big = (fixtures_dir / 'tool_outputs' / 'vega_datasets' / 'airports.csv').read_text()
    events: list[HistoryEvent] = []
    planner = ArtifactPlanner(policy=ContextPolicy(context_window=WINDOW), on_history_event=events.append)
    tools: list[set[str]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tools.append({t.name for t in info.function_tools})
        if len(tools) == 1:
            return ModelResponse(parts=[ToolCallPart('fetch', {'page': 0}, tool_call_id='call_0')])
        return ModelResponse(parts=[TextPart('done')])

    provider = StrictProvider(respond, context_window=WINDOW)

    def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        return big

    result = await agent_for(provider.model(), planner, fetch).run('Read the table.')
    assert result.output == 'done'
    assert not provider.rejected
    (processed,) = [e for e in events if isinstance(e, ArtifactProcessed)]
    assert processed.strategy != 'include'
    # the model received the stub, which names the stored original and the tool that reads it back
    stub = str(provider.requests[-1].history[-1].parts[0].content)  # type: ignore[union-attr]
    assert len(stub) < len(big) // 4
    assert processed.artifact_id in stub
    assert planner.readback_tool_name in stub
    assert planner.readback_tool_name in tools[-1]
    assert planner.id == 'pydantic_ai_history.artifacts'


@needs_capabilities
def test_two_of_our_capabilities_on_one_agent_are_refused_naming_the_composition() -> None:
    from pydantic_ai.exceptions import UserError

    if MAJOR < 2:
        pytest.skip('the agent is checked when built only where pydantic-ai has for_agent (2.x)')
    with pytest.raises(UserError, match='stages='):
        Agent('test', capabilities=[ArtifactPlanner(), Compactor()])


@needs_capabilities
async def test_our_artifact_planner_with_harness_compaction(fixtures_dir: Path) -> None:
    harness = pytest.importorskip('pydantic_ai_harness', reason='pydantic-ai-harness is not installed')
    compaction = harness.SummarizingCompaction(model=StubSummarizer().model(), max_tokens=8_000)
    planner = ArtifactPlanner(policy=ContextPolicy(context_window=WINDOW))
    provider, fetch = tool_loop(30, pages(fixtures_dir))
    result = await agent_for(provider.model(), planner, fetch, compaction).run(
        'Read every page.', usage_limits=UsageLimits(request_limit=None)
    )
    assert result.output == 'done'
    assert not provider.rejected
    for record in provider.requests:
        assert_valid_history(list(record.history))

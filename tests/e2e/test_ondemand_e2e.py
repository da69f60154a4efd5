"""On-demand capabilities (`defer_loading=True`) stay loaded when the history is compacted or windowed.

A real `Agent` against the strict simulated provider: the model loads a deferred capability through
pydantic-ai's own `load_capability` tool, reads pages long enough to make the processor cut the history
(a compaction, or separately a window cut), then calls the capability's tool. It must be offered to the
model and run, and every history the processor returns must be valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo

from _compaction import StubSummarizer
from _pai_shapes import repair_changes
from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    SlidingWindow,
    SummarizerSettings,
    WindowApplied,
    assert_valid_history,
)
from pydantic_ai_history._compat import HAS_DEFERRED_CAPABILITIES
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.skipif(
        not HAS_DEFERRED_CAPABILITIES,
        reason='this pydantic-ai has no on-demand capabilities (defer_loading, load_capability: 2.x only)',
    ),
]

SYSTEM = 'You are a travel agent. Read every page of the brochure, then check the weather.'
TASK = 'Plan a trip to Lisbon.'
PAGES = 14
WEATHER = 'Sunny in Lisbon, 24 degrees.'
CAPABILITY = 'weather'
FOLLOW_UP = 'And tomorrow?'
INSTRUCTIONS = 'Quote temperatures in degrees Celsius.'


def _pages(fixtures_dir: Path) -> list[str]:
    lines = (fixtures_dir / 'tool_outputs' / 'vega_datasets' / 'airports.csv').read_text().splitlines()
    return ['\n'.join(lines[i * 60 : (i + 1) * 60]) for i in range(PAGES)]


class _Script:
    """The model: load the capability, read every page, call the capability's tool, answer."""

    def __init__(self) -> None:
        self.step = 0
        self.offered_at_the_end: list[str] = []
        self.offered_next_turn: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts
        if any(isinstance(p, UserPromptPart) and p.content == FOLLOW_UP for p in last):
            self.offered_next_turn = [t.name for t in info.function_tools]
            call = ToolCallPart('get_weather', {'city': 'Lisbon'}, tool_call_id='weather2')
            return ModelResponse(parts=[call])
        if any(isinstance(p, ToolReturnPart) and p.tool_call_id == 'weather2' for p in last):
            return ModelResponse(parts=[TextPart('Still sunny.')])
        self.step += 1
        if self.step == 1:
            load = ToolCallPart('load_capability', {'id': CAPABILITY}, tool_call_id='load')
            return ModelResponse(parts=[load])
        if self.step <= PAGES + 1:
            page = self.step - 1
            read = ToolCallPart('read_page', {'page': page}, tool_call_id=f'p{page}')
            return ModelResponse(parts=[TextPart(f'Page {page}.'), read])
        if self.step == PAGES + 2:
            self.offered_at_the_end = [t.name for t in info.function_tools]
            call = ToolCallPart('get_weather', {'city': 'Lisbon'}, tool_call_id='weather')
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart('Go in May.')])


def _agent(provider: StrictProvider, processor: HistoryProcessor, pages: list[str]) -> Agent[None, str]:
    from pydantic_ai.capabilities import Toolset
    from pydantic_ai.toolsets import FunctionToolset

    weather_tools = FunctionToolset[None](instructions=INSTRUCTIONS)

    @weather_tools.tool_plain
    def get_weather(city: str) -> str:
        """Today's weather in a city."""
        return WEATHER if city == 'Lisbon' else 'unknown'

    weather = Toolset(weather_tools, id=CAPABILITY, description='Weather forecasts.', defer_loading=True)
    agent: Agent[None, str] = Agent(provider.model(), system_prompt=SYSTEM, capabilities=[processor, weather])

    @agent.tool_plain
    def read_page(page: int) -> str:
        """One page of the brochure."""
        return pages[page - 1]

    return agent


def _weather_result(messages: list[ModelMessage], call_id: str = 'weather') -> Any:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, (ToolReturnPart, RetryPromptPart)) and part.tool_call_id == call_id:
                    return part
    return None


@dataclass
class _Outcome:
    result: Any
    script: _Script
    events: list[HistoryEvent]
    outputs: list[list[ModelMessage]]
    agent: Agent[None, str]


async def _run(fixtures_dir: Path, window: int, **processor: Any) -> _Outcome:
    """Run the script; every history the processor returns and the provider receives must be valid, and
    pydantic-ai's pre-send repair must find nothing to repair in what the processor returns."""
    script = _Script()
    provider = StrictProvider(script, context_window=window)
    events: list[HistoryEvent] = []
    outputs: list[list[ModelMessage]] = []

    class Checked(HistoryProcessor):
        async def process(self, messages: Any, **kwargs: Any) -> list[ModelMessage]:
            out = await super().process(messages, **kwargs)
            assert_valid_history(out)
            assert not repair_changes(list(out))
            outputs.append(list(out))
            return out

    agent = _agent(provider, Checked(on_history_event=events.append, **processor), _pages(fixtures_dir))
    result = await agent.run(TASK)
    assert provider.rejected == []
    for record in provider.requests:
        assert_valid_history(list(record.history))
    return _Outcome(result, script, events, outputs, agent)


def _reloaded(outputs: list[list[ModelMessage]]) -> bool:
    """Whether some history the processor returned holds the load as pydantic-ai records a load from code."""
    from pydantic_ai.messages import CapabilityLoadDeltaPart

    return any(
        isinstance(p, CapabilityLoadDeltaPart) and p.loaded == [CAPABILITY]
        for out in outputs
        for m in out
        for p in m.parts
    )


async def test_a_loaded_capability_survives_a_compaction(fixtures_dir: Path) -> None:
    summarizer = StubSummarizer()
    run = await _run(
        fixtures_dir,
        30_000,
        artifacts=False,
        policy=ContextPolicy(context_window=30_000, max_tokens=6_000, target_tokens=3_000),
        summarizer=SummarizerSettings(model=summarizer.model()),
    )
    result, script, events, outputs = run.result, run.script, run.events, run.outputs
    assert [e for e in events if isinstance(e, CompactionResult)], 'the run never compacted'
    assert 'get_weather' in script.offered_at_the_end
    returned = _weather_result(result.all_messages())
    assert isinstance(returned, ToolReturnPart)
    assert returned.content == WEATHER
    assert _reloaded(outputs)
    assert result.output == 'Go in May.'
    await _next_turn(run)


async def test_a_loaded_capability_survives_a_window_cut(fixtures_dir: Path) -> None:
    run = await _run(
        fixtures_dir,
        6_000,
        stages=[SlidingWindow()],
        policy=ContextPolicy(context_window=6_000),
    )
    result, script, events, outputs = run.result, run.script, run.events, run.outputs
    assert [e for e in events if isinstance(e, WindowApplied)], 'the window never cut'
    assert 'get_weather' in script.offered_at_the_end
    returned = _weather_result(result.all_messages())
    assert isinstance(returned, ToolReturnPart)
    assert returned.content == WEATHER
    assert _reloaded(outputs)
    assert result.output == 'Go in May.'
    await _next_turn(run)


async def _next_turn(run: _Outcome) -> None:
    """The app saves the history and asks again in a new run: the capability is still loaded there."""
    follow_up = await run.agent.run(FOLLOW_UP, message_history=run.result.all_messages())
    assert 'get_weather' in run.script.offered_next_turn
    returned = _weather_result(follow_up.new_messages(), 'weather2')
    assert isinstance(returned, ToolReturnPart)
    assert returned.content == WEATHER
    assert follow_up.output == 'Still sunny.'

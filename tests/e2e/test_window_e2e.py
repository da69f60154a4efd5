"""A real `Agent` in a 35-request tool loop with large real tool outputs, against a strict provider.

The provider counts with the real tokenizer, rejects anything over its window and any broken tool
pairing. Every integration path the installed pydantic-ai offers is exercised; each run must finish
with every request valid and inside the window.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)

from _fixtures import need
from pydantic_ai_history import (
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    SlidingWindow,
    WindowApplied,
    assert_valid_history,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES, ProcessHistory
from pydantic_ai_history.testing import StrictProvider

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

WINDOW = 16_000
TOOL_CALLS = 34  # + the final answer: 35 model requests
SYSTEM = 'You are a research agent. Read every page you are given before answering.'
TASK = 'Go through the sources page by page and tell me what they have in common.'
SOURCES = (
    'tool_outputs/tau-bench_retail_products.json',
    'tool_outputs/octokit-fixtures/paginate-issues.raw-fixture.json',
    'tool_outputs/vega_datasets/airports.csv',
    'tool_outputs/readability-pages/nytimes-3/source.html',
    'tool_outputs/octokit-fixtures/rename-repository.raw-fixture.json',
    'tool_outputs/readability-pages/wikipedia-2/source.html',
)


class _Recorder:
    """A last stage that records what the processor hands back to pydantic-ai (2.x repairs only the
    outgoing copy, so the provider alone would not see a pairing we broke in the stored history)."""

    name = 'recorder'

    def __init__(self) -> None:
        self.outputs: list[list[ModelMessage]] = []

    async def __call__(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
        self.outputs.append(list(messages))  # pydantic-ai 1.0 appends to the list it is given back
        return messages


def _pages(fixtures_dir: Path) -> list[str]:
    """Real tool outputs, cut into pages of 12-30 KB (3-9K tokens): the tool returns one page per call."""
    pages: list[str] = []
    for index, name in enumerate(SOURCES):
        data = need(fixtures_dir / name).read_text(encoding='utf-8', errors='replace')
        size = 12_000 + 6_000 * (index % 4)
        pages.extend(data[start : start + size] for start in range(0, min(len(data), size * 8), size))
    return pages


def _responder() -> Callable[[list[ModelMessage], Any], ModelResponse]:
    calls = {'n': 0}

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        calls['n'] += 1
        if calls['n'] <= TOOL_CALLS:
            return ModelResponse(
                parts=[
                    TextPart(f'Reading page {calls["n"]}.'),
                    ToolCallPart('read_page', {'page': calls['n']}, tool_call_id=f'call_{calls["n"]}'),
                ]
            )
        return ModelResponse(parts=[TextPart('They are all real data sets.')])

    return respond


def _integrations() -> list[str]:
    ways = ['history_processors'] if not HAS_CAPABILITIES or _history_processors_allowed() else []
    if HAS_CAPABILITIES:
        ways += ['ProcessHistory', 'capability()', 'processor']
    return ways


def _history_processors_allowed() -> bool:
    try:
        Agent('test', history_processors=[])
    except TypeError:
        return False
    return True


def _agent(provider: StrictProvider, processor: HistoryProcessor, way: str) -> Agent[None, str]:
    model = provider.model()
    if way == 'history_processors':
        agent: Agent[None, str] = Agent(model, system_prompt=SYSTEM, history_processors=[processor])
    elif way == 'ProcessHistory':
        agent = Agent(model, system_prompt=SYSTEM, capabilities=[ProcessHistory(processor)])
    elif way == 'capability()':  # the 0.1.0 spelling, kept working
        agent = Agent(model, system_prompt=SYSTEM, capabilities=[processor.capability()])
    else:  # the processor is itself the capability
        agent = Agent(model, system_prompt=SYSTEM, capabilities=[processor])
    return agent


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
@pytest.mark.parametrize('way', _integrations())
async def test_long_tool_loop_stays_valid_and_inside_the_window(fixtures_dir: Path, way: str):
    pages = _pages(fixtures_dir)
    assert len(pages) >= TOOL_CALLS
    provider = StrictProvider(_responder(), context_window=WINDOW)
    events: list[HistoryEvent] = []
    recorder = _Recorder()
    processor = HistoryProcessor(
        stages=[SlidingWindow(), recorder],
        policy=ContextPolicy(context_window=WINDOW),
        on_history_event=events.append,
    )
    agent = _agent(provider, processor, way)

    @agent.tool_plain
    def read_page(page: int) -> str:
        """Return one page of the sources."""
        return pages[page - 1]

    result = await agent.run(TASK)

    assert result.output == 'They are all real data sets.'
    assert len(provider.requests) == TOOL_CALLS + 1 >= 30
    assert provider.rejected == []
    assert all(r.input_tokens <= WINDOW for r in provider.requests)
    assert provider.peak_input_tokens > WINDOW // 2  # the window was actually under pressure
    for record in provider.requests:
        history = list(record.history)
        assert_valid_history(history)
        # the system prompt and the original task reach the model on every request
        parts = [p for m in history if isinstance(m, ModelRequest) for p in m.parts]
        assert any(isinstance(p, SystemPromptPart) and p.content == SYSTEM for p in parts)
        assert any(isinstance(p, UserPromptPart) and p.content == TASK for p in parts)
    assert len(recorder.outputs) == TOOL_CALLS + 1
    for output in recorder.outputs:
        assert_valid_history(output)
    applied = [e for e in events if isinstance(e, WindowApplied)]
    assert len(applied) >= 5
    stats = processor.stats()
    assert stats.overall.requests == TOOL_CALLS + 1
    assert stats.overall.window_applications == len(applied)
    assert stats.overall.stage_failures == 0
    assert stats.overall.reduction_percent > 0
    [run] = stats.runs.values()
    assert run.requests == TOOL_CALLS + 1
    # every page the model asked for was delivered to it at least once, whole, in the request after the call
    delivered = {
        p.tool_call_id
        for r in provider.requests
        for m in r.history[-1:]
        if isinstance(m, ModelRequest)
        for p in m.parts
        if getattr(p, 'part_kind', '') == 'tool-return' and p.content in pages  # type: ignore[union-attr]
    }
    assert delivered == {f'call_{i}' for i in range(1, TOOL_CALLS + 1)}
    # the stored history is what the processor returned last (+ the final response)
    stored = result.all_messages()
    assert_valid_history(stored[:-1])


@pytest.mark.filterwarnings('ignore::DeprecationWarning')
async def test_without_the_processor_the_same_run_overflows(fixtures_dir: Path):
    """The control: the strict provider really does reject this run when nothing manages the history."""
    from pydantic_ai_history.testing import ProviderRejected

    pages = _pages(fixtures_dir)
    provider = StrictProvider(_responder(), context_window=WINDOW)
    agent: Agent[None, str] = Agent(provider.model(), system_prompt=SYSTEM)

    @agent.tool_plain
    def read_page(page: int) -> str:
        """Return one page of the sources."""
        return pages[page - 1]

    with pytest.raises(ProviderRejected, match='maximum context length'):
        await agent.run(TASK)
    assert provider.rejected

"""Each stage is a capability of its own: alone on an agent, beside pydantic-ai's and harness's capabilities,
and (on early 1.x) a history processor; every request it shapes fits a strict provider and stays valid.
Inside a `HistoryProcessor` a stage honours what it was given or is refused, naming the field."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
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
    HistoryProcessor,
    SlidingWindow,
    SummarizerSettings,
    WindowApplied,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.pipeline import HistoryCapability
from pydantic_ai_history.stages.artifacts import ArtifactSettings
from pydantic_ai_history.store import MemoryStore
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


# ---- inside a HistoryProcessor: honoured or refused, never ignored ----------------------------------------

SHARED = [f.name for f in dataclasses.fields(HistoryCapability) if f.init]
"""The settings every stage inherits from `HistoryCapability` (pydantic-ai's own fields included): inside a
processor only the processor's are read."""
STAGES = [ArtifactPlanner, Compactor, SlidingWindow]


def _default(name: str) -> Any:
    """The field's default, given explicitly: a stage given a shared setting is refused whatever its value."""
    (f,) = [f for f in dataclasses.fields(HistoryCapability) if f.name == name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_the_shared_settings_are_the_capabilitys_fields() -> None:
    assert {'id', 'model', 'policy', 'summarizer', 'store', 'cache', 'scope', 'on_history_event'} <= set(
        SHARED
    )


@pytest.mark.parametrize('stage_type', STAGES, ids=lambda t: t.__name__)
@pytest.mark.parametrize('name', SHARED)
def test_a_stage_given_a_shared_setting_inside_a_processor_is_refused_naming_it(
    stage_type: type[Any], name: str
) -> None:
    stage = stage_type(**{name: _default(name)})  # alone, a stage takes it
    kind = stage_type.__name__
    said = f'{kind}({name}=...) inside HistoryProcessor(stages=[...]): `{name}` is a setting of the whole'
    home = f'; write HistoryProcessor({name}=..., stages=[{kind}(...)])'
    message = f'^{re.escape(said)} processor, .*{re.escape(home)}$'
    with pytest.raises(TypeError, match=message):
        HistoryProcessor(stages=[stage])
    with pytest.raises(TypeError, match=message):
        create_history_processor(stages=[SlidingWindow(), stage])
    # where the message says, the setting is taken
    HistoryProcessor(**{name: _default(name)}, stages=[stage_type()])


def test_every_shared_setting_a_stage_was_given_is_named() -> None:
    stage = Compactor(CompactionSettings(), store=MemoryStore(), policy=ContextPolicy(), name='compact')
    with pytest.raises(TypeError) as raised:
        HistoryProcessor(stages=[stage])
    assert str(raised.value).startswith(
        'Compactor(policy=..., store=...) inside HistoryProcessor(stages=[...]): `policy` and `store` are '
        'settings of the whole processor'
    )
    assert str(raised.value).endswith(
        'write HistoryProcessor(policy=..., store=..., stages=[Compactor(...)])'
    )


def test_a_processor_is_not_a_stage() -> None:
    with pytest.raises(
        TypeError, match=re.escape('HistoryProcessor inside HistoryProcessor(stages=[...]) is not')
    ):
        HistoryProcessor(stages=[HistoryProcessor()])


def test_a_stages_own_settings_are_honoured_inside_a_processor() -> None:
    artifacts = ArtifactSettings(max_artifact_tokens=300)
    compaction = CompactionSettings(stub_tool_results=False)
    stages = [ArtifactPlanner(artifacts), Compactor(compaction, name='compact'), SlidingWindow(name='fit')]
    processor = HistoryProcessor(
        stages=stages, store=MemoryStore(), policy=ContextPolicy(context_window=WINDOW)
    )
    assert processor.history_stages == stages
    assert [s.name for s in processor.history_stages] == ['artifacts', 'compact', 'fit']
    assert stages[0].settings == artifacts
    assert stages[1].settings is compaction


async def test_the_processors_store_is_the_one_its_stages_write(fixtures_dir: Path) -> None:
    store = MemoryStore()
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        policy=ContextPolicy(context_window=WINDOW),
        store=store,
        on_history_event=events.append,
        stages=[SlidingWindow(name='fit')],
    )
    provider, fetch = tool_loop(40, pages(fixtures_dir))
    result = await agent_for(provider.model(), processor, fetch).run(
        'Read every page.', usage_limits=UsageLimits(request_limit=None)
    )
    assert result.output == 'done'
    assert not provider.rejected
    assert any(isinstance(e, WindowApplied) for e in events)
    assert len(store) > 0, "the dropped transcript went to the processor's store"


async def test_a_stage_alone_honours_its_shared_settings(fixtures_dir: Path) -> None:
    store = MemoryStore()
    events: list[HistoryEvent] = []
    summarizer = StubSummarizer()
    compactor = Compactor(
        policy=ContextPolicy(context_window=WINDOW, max_tokens=8_000, target_tokens=3_000),
        summarizer=SummarizerSettings(model=summarizer.model()),
        store=store,
        on_history_event=events.append,
    )
    provider, fetch = tool_loop(30, pages(fixtures_dir))
    result = await agent_for(provider.model(), compactor, fetch).run(
        'Read every page.', usage_limits=UsageLimits(request_limit=None)
    )
    assert result.output == 'done'
    assert not provider.rejected
    assert any(isinstance(e, CompactionResult) for e in events)
    assert len(store) > 0, 'the compactor stored its originals in the store it was given'


async def test_a_renamed_read_back_tool_is_exempt_from_a_planner_in_the_stages() -> None:
    """The processor's `readback_tool_name` reaches a planner in its stages (built with the default name)."""
    rows = '\n'.join(f'row {i}, value {i * 7}, city number {i}' for i in range(3_000))

    async def kept(tool: str, stages: list[Any] | None) -> int:
        processor = HistoryProcessor(
            policy=ContextPolicy(context_window=16_000), readback_tool_name='read_stored', stages=stages
        )
        history: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart('go')]),
            ModelResponse(parts=[ToolCallPart(tool, {}, tool_call_id='c1')]),
            ModelRequest(parts=[ToolReturnPart(tool, rows, tool_call_id='c1')]),
        ]
        out = await processor.process(history, model='gpt-4o')
        return len(str(out[-1].parts[0].content))

    planned = await kept('fetch', [ArtifactPlanner()])
    assert planned < 2_000  # an app's tool output is planned down to its share
    read_back = await kept('read_stored', [ArtifactPlanner()])
    assert read_back > 10 * planned  # a read-back is never planned (only fitted into the request)
    assert read_back == await kept('read_stored', None)  # as the built-in planner does

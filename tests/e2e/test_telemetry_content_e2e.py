"""What the package puts in a run's trace: its own spans hold counts, never content; the summarizer's and the
planner's model requests (pydantic-ai's own `chat` spans) hold content exactly when the run's
`InstrumentationSettings(include_content=...)` says so.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import filler
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from _compaction import StubSummarizer, agent_with
from pydantic_ai_history import ContextPolicy, HistoryProcessor, SummarizerSettings
from pydantic_ai_history._compat import instrumented_agent_options
from pydantic_ai_history.stages.artifacts import ArtifactSettings

sdk = pytest.importorskip('opentelemetry.sdk.trace', reason='opentelemetry-sdk is not installed (dev extra)')
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),
]

SECRET = 'TENANT-SECRET-7731'
STEPS = 10


def planner(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The artifact planner: the default strategy for every artifact, through its output tool."""
    planner.prompts.append(  # type: ignore[attr-defined]
        '\n'.join(
            p.content
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
    )
    args = json.dumps({'decisions': [], 'reasoning': 'the defaults will do'})
    return ModelResponse(
        parts=[ToolCallPart(info.output_tools[0].name, args)],
        usage=RequestUsage(input_tokens=50, output_tokens=9),
    )


planner.prompts = []  # type: ignore[attr-defined]


class Steps:
    def __init__(self) -> None:
        self.step = 0
        self.__name__ = 'steps'

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step, self.step = self.step, self.step + 1
        if step >= STEPS:
            return ModelResponse(parts=[TextPart('Done.')])
        return ModelResponse(parts=[ToolCallPart('fetch', {'page': step}, tool_call_id=f'c{step}')])


async def _trace(include_content: bool) -> tuple[list[Any], StubSummarizer]:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    summarizer = StubSummarizer()
    processor = HistoryProcessor(
        artifacts=ArtifactSettings(planner_model=FunctionModel(planner, model_name='planner')),
        policy=ContextPolicy(context_window=8_000, max_tokens=4_000, target_tokens=1_500),
        summarizer=SummarizerSettings(model=summarizer.model()),
    )
    settings = InstrumentationSettings(tracer_provider=provider, include_content=include_content)
    agent = agent_with(None, processor, **instrumented_agent_options(settings))

    @agent.tool_plain
    def fetch(page: int) -> str:
        """One page of the tenant's ledger."""
        size = 30_000 if page == 0 else 1_800
        return f'{SECRET} page {page}\n' + filler(size, seed=page)

    await agent.run(
        'Go through the ledger.', model=FunctionModel(Steps()), usage_limits=UsageLimits(request_limit=None)
    )
    spans = list(exporter.get_finished_spans())
    provider.shutdown()
    return spans, summarizer


def _texts(span: Any) -> str:
    return json.dumps(
        [dict(span.attributes or {}), [dict(e.attributes or {}) for e in span.events]], default=str
    )


@pytest.mark.parametrize('include_content', [False, True])
async def test_sub_requests_follow_the_runs_include_content(include_content: bool) -> None:
    planner.prompts.clear()  # type: ignore[attr-defined]
    spans, summarizer = await _trace(include_content)
    assert summarizer.calls >= 1, 'the run never compacted'
    assert planner.prompts, 'the planner was never asked'  # type: ignore[attr-defined]
    assert any(SECRET in p for p in summarizer.prompts)
    by_id = {s.context.span_id: s for s in spans}

    def under(span: Any, name: str) -> bool:
        while span.parent is not None and span.parent.span_id in by_id:
            span = by_id[span.parent.span_id]
            if span.name.startswith(name):
                return True
        return False

    ours = [s for s in spans if s.name.startswith('pydantic_ai_history.') or s.name == 'compact_messages']
    sub_requests = [s for s in spans if s.name.startswith('chat ') and under(s, 'pydantic_ai_history.')]
    assert ours
    assert {s.name for s in sub_requests} >= {'chat stub-summarizer', 'chat planner'}
    # the package's own spans carry figures only, whatever the setting
    assert not [s.name for s in ours if SECRET in _texts(s)]
    leaking = sorted({s.name for s in sub_requests if SECRET in _texts(s)})
    if include_content:
        assert 'chat stub-summarizer' in leaking  # the setting is what keeps it out: it is there when allowed
    else:
        assert leaking == []
        assert not [s.name for s in spans if SECRET in _texts(s)], 'content anywhere in the trace'

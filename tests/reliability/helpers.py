"""Agents, models and processors for the reliability suite, on every supported pydantic-ai version.

`full_processor` composes the three stages in the documented order (artifact planner, compactor, sliding
window) from their public settings, under one context policy and one summarizer, as
`create_history_processor` does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from strategies import MARKER, errors, text_of

from pydantic_ai_history import (
    ContextPolicy,
    HistoryContext,
    HistoryEvent,
    HistoryProcessor,
    SlidingWindow,
    SummarizerSettings,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES
from pydantic_ai_history.cache import MemoryCache, SummaryCache
from pydantic_ai_history.stages.artifacts import ArtifactPlanner, ArtifactSettings
from pydantic_ai_history.stages.compactor import CompactionSettings, Compactor
from pydantic_ai_history.store import ArtifactStore, MemoryStore, StoredArtifact
from pydantic_ai_history.testing import StrictProvider

_FILLER = (
    'The service handled the request and wrote a log line with the latency, the region and the status. '
    'Rows: id,name,total\n17,alpha,302.5\n18,beta,11.0\n'
)


def filler(chars: int, seed: int = 0) -> str:
    """Realistic-looking text of about `chars` characters (varied, so it tokenizes normally)."""
    out: list[str] = []
    n = 0
    i = seed
    while n < chars:
        line = f'{i:05d} {_FILLER}'
        out.append(line)
        n += len(line)
        i += 1
    return ''.join(out)[:chars]


class RecordingStore(MemoryStore):
    """A memory store that also remembers every put, so a test can check what went to the store."""

    def __init__(self) -> None:
        super().__init__()
        self.puts: dict[str, bytes] = {}

    async def _put(
        self,
        artifact_id: str,
        data: bytes,
        media_type: str,
        source: str,
        metadata: dict[str, str],
        scope: str,
    ) -> StoredArtifact:
        info = await super()._put(artifact_id, data, media_type, source, metadata, scope)
        if len(data) < 5_000_000:  # hostile-file tests put 100 MB here; their markers are not text
            self.puts[artifact_id] = data
        return info

    def text(self) -> str:
        return '\n'.join(d.decode('utf-8', errors='replace') for d in self.puts.values())


def full_processor(
    *,
    context_window: int,
    max_tokens: int | None = None,
    target_tokens: int | None = None,
    summarizer: Any = None,
    summarizer_timeout: float = 5.0,
    planner: Any = None,
    planner_timeout: float = 5.0,
    artifact_summarizer: Any = None,
    default_reduction: str = 'extract',
    cache: SummaryCache | None = None,
    store: ArtifactStore | None = None,
    on_event: Callable[[HistoryEvent], None] | None = None,
    window_budget: int | None = None,
    artifact_budget: int | None = None,
    stubs: bool = True,
) -> HistoryProcessor:
    artifacts = ArtifactSettings(
        llm_planning=planner is not None,
        planner_model=planner,
        planner_timeout=planner_timeout,
        default_reduction=default_reduction,  # type: ignore[arg-type]
        artifact_budget_tokens=artifact_budget,
        # artifacts kept whole while the budget allows, so these loops reach the compactor within a few turns
        max_artifact_tokens=None,
    )
    compaction = CompactionSettings(summary_max_tokens=400, stub_tool_results=stubs)
    artifact_stage: Any = ArtifactPlanner(artifacts)
    if artifact_summarizer is not None and artifact_summarizer is not summarizer:
        # One summarizer serves every stage; these tests make the artifact summaries fail on their own.
        artifact_stage = WithSummarizer(
            artifact_stage, SummarizerSettings(model=artifact_summarizer, timeout=summarizer_timeout)
        )
    return HistoryProcessor(
        stages=[artifact_stage, Compactor(compaction), SlidingWindow()],
        policy=ContextPolicy(
            context_window=context_window,
            max_tokens=max_tokens,
            target_tokens=target_tokens,
            budget_tokens=window_budget,
        ),
        summarizer=SummarizerSettings(model=summarizer, timeout=summarizer_timeout),
        cache=cache if cache is not None else MemoryCache(),
        store=store if store is not None else MemoryStore(),
        on_history_event=on_event,
    )


class WithSummarizer:
    """A stage run with its own `SummarizerSettings` (the processor's serve every other stage)."""

    def __init__(self, stage: Any, summarizer: SummarizerSettings) -> None:
        self.stage, self.summarizer, self.name = stage, summarizer, stage.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stage, name)

    async def __call__(self, messages: list[Any], context: HistoryContext) -> list[Any]:
        result: list[Any] = await self.stage(
            messages, dataclasses.replace(context, summarizer=self.summarizer)
        )
        return result


def make_agent(model: Any, processor: HistoryProcessor, **kwargs: Any) -> Agent[None, str]:
    """An agent with the processor plugged in the way this pydantic-ai version supports."""
    if HAS_CAPABILITIES:
        return Agent(model, capabilities=[processor], **kwargs)
    return Agent(model, history_processors=[processor], toolsets=[processor.readback_toolset()], **kwargs)


# ---- summarizer and planner models -------------------------------------------------------------------------


@dataclass
class Behaviour:
    """What a fake summarizer/planner does: 'echo' (a summary listing every marker it was shown),
    'raise', 'hang' (longer than any timeout in the suite), 'empty', 'huge', 'garbage' (junk)."""

    mode: str = 'echo'
    calls: int = 0
    prompts: list[str] = field(default_factory=list)


def _prompt_text(messages: Sequence[ModelMessage]) -> str:
    return text_of(list(messages))


def fake_model(behaviour: Behaviour, name: str = 'summarizer') -> FunctionModel:
    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        behaviour.calls += 1
        prompt = _prompt_text(messages)
        behaviour.prompts.append(prompt)
        mode = behaviour.mode
        usage = RequestUsage(input_tokens=max(len(prompt) // 4, 1), output_tokens=50)
        if mode == 'raise':
            raise RuntimeError('summarizer provider returned 500')
        if mode == 'hang':
            await asyncio.sleep(30)
        if mode == 'empty':
            return ModelResponse(parts=[TextPart(content='   ')], usage=usage)
        if mode == 'huge':
            return ModelResponse(parts=[TextPart(content=filler(60_000))], usage=usage)
        if mode == 'garbage':
            if info.output_tools:  # a planner: call the output tool with arguments that do not validate
                tool = info.output_tools[0]
                return ModelResponse(
                    parts=[ToolCallPart(tool_name=tool.name, args='{"decisions": "???', tool_call_id='g1')],
                    usage=usage,
                )
            return ModelResponse(parts=[TextPart(content='\x00\ufffd{{{ ]] <|im_end|>')], usage=usage)
        markers = sorted(set(MARKER.findall(prompt)))
        return ModelResponse(
            parts=[TextPart(content='Summary of the work so far. Facts seen: ' + ' '.join(markers))],
            usage=usage,
        )

    return FunctionModel(respond, model_name=name)


# ---- a scripted tool loop ----------------------------------------------------------------------------------


@dataclass
class ToolLoop:
    """The main model: calls `fetch` `steps` times (one call per step, or two in parallel), then answers."""

    steps: int
    parallel: bool = False
    done: int = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.done >= self.steps:
            self.done = 0
            return ModelResponse(parts=[TextPart(content='All done.')])
        self.done += 1
        calls = [ToolCallPart(tool_name='fetch', args={'n': self.done}, tool_call_id=f'c{self.done}a')]
        if self.parallel:
            calls.append(
                ToolCallPart(tool_name='fetch', args={'n': -self.done}, tool_call_id=f'c{self.done}b')
            )
        return ModelResponse(parts=calls)


def strict(steps: int, context_window: int, parallel: bool = False) -> StrictProvider:
    return StrictProvider(ToolLoop(steps, parallel), context_window=context_window)


def check_requests(provider: StrictProvider) -> None:
    """Every request the provider received was valid and accepted."""
    assert provider.requests
    assert not provider.rejected, provider.rejected[0].rejected
    for record in provider.requests:
        assert errors(record.history) == [], errors(record.history)


def lost_markers(
    planted: set[str],
    history: Sequence[ModelMessage],
    *,
    store: RecordingStore | None = None,
    summaries: Sequence[str] = (),
) -> set[str]:
    """Planted markers found neither in the history, nor in the store, nor in a summary."""
    found = set(MARKER.findall(text_of(list(history))))
    if store is not None:
        found |= set(MARKER.findall(store.text()))
    for summary in summaries:
        found |= set(re.findall(MARKER, summary))
    return planted - found


class PageSteps:
    """A model that calls the `page` tool `steps` times (one page a step), then answers 'Done.'."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.step = 0
        self.__name__ = 'steps'

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step, self.step = self.step, self.step + 1
        if step >= self.steps:
            return ModelResponse(parts=[TextPart('Done.')])
        return ModelResponse(parts=[ToolCallPart('page', {'n': step}, tool_call_id=f'c{step}')])

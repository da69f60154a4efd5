"""Shared builders for the artifact stage tests."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from _limits import artifact_policy
from pydantic_ai_history import SummarizerSettings
from pydantic_ai_history.cache import MemoryCache
from pydantic_ai_history.events import ArtifactProcessed, HistoryEvent
from pydantic_ai_history.messages._marks import MARKER_KEY
from pydantic_ai_history.processor import HistoryProcessor
from pydantic_ai_history.stages.artifacts import ArtifactPlanner, ArtifactSettings
from pydantic_ai_history.store import MemoryStore

TEST_SECRET = b'test-deployment-secret-0123456789'
ART_ID = re.compile(r'art_[0-9a-f]{32}')


def tool_history(
    question: str, tool_name: str, content: Any, *, args: dict[str, Any] | None = None
) -> list[ModelMessage]:
    """A user question, a tool call, and the tool's return as the current request."""
    return [
        ModelRequest(parts=[UserPromptPart(content=question)]),
        ModelResponse(
            parts=[ToolCallPart(tool_name=tool_name, args=args or {}, tool_call_id='call_1')],
            usage=RequestUsage(input_tokens=40, output_tokens=10),
        ),
        ModelRequest(parts=[ToolReturnPart(tool_name=tool_name, content=content, tool_call_id='call_1')]),
    ]


class Recorder:
    def __init__(self) -> None:
        self.events: list[HistoryEvent] = []

    def __call__(self, event: HistoryEvent) -> None:
        self.events.append(event)

    @property
    def artifacts(self) -> list[ArtifactProcessed]:
        return [e for e in self.events if isinstance(e, ArtifactProcessed)]

    def warnings(self, code: str) -> list[Any]:
        return [e for e in self.events if getattr(e, 'code', None) == code]


def make_processor(
    settings: ArtifactSettings | None = None,
    *,
    context_window: int = 16_000,
    model: Any = 'gpt-4o',
    cache: Any = None,
    store: Any = None,
    summarizer: SummarizerSettings | None = None,
    large_item_tokens: int | None = None,
    item_tokens: int | None = None,
) -> tuple[HistoryProcessor, Recorder]:
    recorder = Recorder()
    processor = HistoryProcessor(
        stages=[ArtifactPlanner(settings or ArtifactSettings())],
        model=model,
        policy=artifact_policy(context_window, large_item_tokens=large_item_tokens, item_tokens=item_tokens),
        summarizer=summarizer or SummarizerSettings(),
        cache=cache if cache is not None else MemoryCache(),
        # one secret for every processor of a test, as a deployment configures one: equal content, equal ids
        store=store if store is not None else MemoryStore(secret=TEST_SECRET),
        on_history_event=recorder,
    )
    return processor, recorder


def tool_returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    return [
        p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
    ]


def marker(part: Any) -> dict[str, Any]:
    return (getattr(part, 'metadata', None) or {}).get(MARKER_KEY) or {}


def planner_model(build: Callable[[list[str], str], Any], calls: list[str] | None = None) -> FunctionModel:
    """A FunctionModel that answers the planner's prompt through its output tool with `build(ids, prompt)`."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = '\n'.join(
            p.content
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        if calls is not None:
            calls.append(prompt)
        ids = list(dict.fromkeys(ART_ID.findall(prompt)))
        output = build(ids, prompt)
        if isinstance(output, Exception):
            raise output
        tool = info.output_tools[0].name
        args = output if isinstance(output, str) else json.dumps(output)
        return ModelResponse(
            parts=[ToolCallPart(tool_name=tool, args=args)],
            usage=RequestUsage(input_tokens=500, output_tokens=80),
        )

    return FunctionModel(respond, model_name='planner')


def summarizer_model(calls: list[str], *, fail: bool = False) -> FunctionModel:
    """A summarizer that reports the first line of what it was given (deterministic), counting its calls."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = '\n'.join(
            p.content
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str)
        )
        calls.append(prompt)
        if fail:
            raise RuntimeError('summarizer is down')
        body = prompt.split('<content>', 1)[-1].strip().splitlines()[0][:300]
        return ModelResponse(
            parts=[TextPart(f'Summary: {body}')],
            usage=RequestUsage(input_tokens=len(prompt) // 4, output_tokens=60),
        )

    return FunctionModel(respond, model_name='summarizer')


def artifact_tokens(processor: HistoryProcessor, messages: Sequence[ModelMessage]) -> int:
    counter = processor.counter_for(processor.model)
    return sum(counter.count_part(p) for p in tool_returns(messages))

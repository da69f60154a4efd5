"""A tool return nested 10,000 deep, through a real `Agent` on a strict provider: the processor reads it
without recursion (it ended the run with `StageFailed: RecursionError` before) and cuts it to what a provider
can be sent (its JSON down to 200 levels, the deeper part named, `ContentLost` saying so): the run completes,
where without the processor pydantic-ai itself cannot serialize the value on some versions."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import check_requests, make_agent
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo

from pydantic_ai_history import HistoryEvent, create_history_processor
from pydantic_ai_history.events import ContentLost, StageFailed
from pydantic_ai_history.testing import StrictProvider

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {'leaf': 'bottom'}
    for _ in range(depth):
        value = {'k': value}
    return value


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
        return ModelResponse(parts=[TextPart('done')])
    return ModelResponse(parts=[ToolCallPart('nested', {}, tool_call_id='c1')])


async def _run(agent: Agent[None, str]) -> tuple[str, Any]:
    @agent.tool_plain
    def nested() -> dict[str, Any]:
        """A deeply nested value."""
        return _nested(10_000)

    try:
        return 'completed', (await agent.run('go')).output
    except Exception as exc:
        return 'raised', type(exc)


async def test_a_tool_return_nested_10_000_deep_is_cut_to_what_can_be_sent_and_the_run_completes() -> None:
    events: list[HistoryEvent] = []
    provider = StrictProvider(_respond, context_window=128_000)
    outcome = await _run(
        make_agent(provider.model(), create_history_processor(on_history_event=events.append))
    )
    assert [e for e in events if isinstance(e, StageFailed)] == []
    assert outcome == ('completed', 'done')
    check_requests(provider)
    [lost] = [e for e in events if isinstance(e, ContentLost)]
    assert lost.code == 'content_cut'
    assert lost.tool_calls == ('nested#c1',)
    [sent] = [p for p in provider.requests[-1].history[-1].parts if isinstance(p, ToolReturnPart)]
    assert isinstance(sent.content, str)
    assert sent.content.startswith('{"k":{"k":')  # its JSON down to the depth any provider takes

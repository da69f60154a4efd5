"""An app with a tool of its own called `read_artifact`: the read-back tool is renamed, or the clash is said
at once with both names, never a run that dies on pydantic-ai's conflict halfway."""

from __future__ import annotations

import re
from typing import Any

import pytest
from helpers import filler, make_agent
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import ContextPolicy, HistoryProcessor, create_history_processor
from pydantic_ai_history._compat import HAS_CAPABILITIES, pydantic_ai_version

pytestmark = pytest.mark.anyio

MAJOR = int(pydantic_ai_version().split('.')[0])
STUB_ID = re.compile(r"read_stored\(artifact_id='(art_[0-9a-f]{32})'")


def read_artifact(name: str) -> str:
    """The app's own tool: reads one of the user's saved artifacts."""
    return f'the app artifact {name}'


class Reader:
    """Fetches a large page, then reads it back through the tool the stub names, then calls the app's tool."""

    def __init__(self) -> None:
        self.step = 0
        self.__name__ = 'reader'
        self.read_back: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        self.step += 1
        if self.step == 1:
            return ModelResponse(parts=[ToolCallPart('fetch', {}, tool_call_id='f1')])
        if self.step == 2:
            stub = str(returns[0].content)
            found = STUB_ID.search(stub)
            assert found is not None, stub
            return ModelResponse(
                parts=[
                    ToolCallPart('read_stored', {'artifact_id': found.group(1), 'query': 'PAGE-END'}, 'r1'),
                    ToolCallPart('read_artifact', {'name': 'invoice'}, 'a1'),
                ]
            )
        self.read_back = [str(p.content) for p in returns]
        return ModelResponse(parts=[TextPart('Done.')])


async def test_a_renamed_read_back_tool_lives_beside_the_apps_own() -> None:
    processor = create_history_processor(
        policy=ContextPolicy(context_window=16_000), compaction=False, readback_tool_name='read_stored'
    )
    agent = make_agent(None, processor, tools=[read_artifact])

    @agent.tool_plain
    def fetch() -> str:
        """A large page."""
        return filler(60_000, seed=3) + '\nPAGE-END marker line'

    reader = Reader()
    result = await agent.run('Read the page.', model=FunctionModel(reader))
    assert result.output == 'Done.'
    stored, own = reader.read_back
    assert 'PAGE-END' in stored
    assert own == 'the app artifact invoice'
    # every note names the renamed tool; the app's tool output was never planned as ours
    texts = [str(getattr(p, 'content', '')) for m in result.all_messages() for p in m.parts]
    assert not [t for t in texts if "read_artifact(artifact_id='" in t]


@pytest.mark.skipif(MAJOR < 2, reason='pydantic-ai binds capabilities to their agent when it is built on 2.x')
def test_a_clash_fails_when_the_agent_is_built_naming_both() -> None:
    processor = HistoryProcessor(policy=ContextPolicy(context_window=16_000))
    with pytest.raises(
        UserError, match=r"already has a tool named 'read_artifact' \(from the agent\).*read-back"
    ):
        Agent('test', tools=[read_artifact], capabilities=[processor])
    # renamed, the same agent builds
    Agent('test', tools=[read_artifact], capabilities=[HistoryProcessor(readback_tool_name='read_stored')])


@pytest.mark.skipif(not HAS_CAPABILITIES, reason='the request hook needs capabilities')
async def test_a_clash_unknown_when_the_agent_was_built_fails_on_the_first_request() -> None:
    processor = HistoryProcessor(policy=ContextPolicy(context_window=16_000))
    agent = Agent(None, capabilities=[processor])
    agent.tool_plain(read_artifact)  # registered after the agent was built
    calls: list[Any] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(messages)
        return ModelResponse(parts=[TextPart('hi')])

    with pytest.raises(UserError, match=r"tool named 'read_artifact' .*read-back tool"):
        await agent.run('Hello', model=FunctionModel(model))
    assert calls == [], 'no request was sent'


def test_a_name_providers_refuse_fails_at_construction() -> None:
    for bad in ('read artifact', '', '1read', 'x' * 65):
        with pytest.raises(ValueError, match='readback_tool_name'):
            HistoryProcessor(readback_tool_name=bad)


def test_the_gate_recognises_calls_of_a_renamed_tool() -> None:
    from pydantic_ai.messages import UserPromptPart

    from pydantic_ai_history.readback import names_readback

    note = ModelRequest(parts=[UserPromptPart('see read_stored(artifact_id="art_x", query=...)')])
    assert names_readback(note)

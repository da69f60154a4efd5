"""One history processor per agent, whichever way it was added: directly, in `ProcessHistory`, in a combined
capability. What the agent's constructor can see is refused there; two processors that only meet at run time
(each in its own `ProcessHistory`) are refused on the first step they share, before the second runs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_history import HistoryEvent, RequestProcessed, create_history_processor
from pydantic_ai_history._compat import HAS_CAPABILITIES

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings('ignore::DeprecationWarning'),
    pytest.mark.skipif(not HAS_CAPABILITIES, reason='this pydantic-ai has no capabilities'),
]


def _model() -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart('ok')])

    return FunctionModel(respond)


def _process_history(processor: Any) -> Any:
    from pydantic_ai.capabilities import ProcessHistory

    return ProcessHistory(processor)


async def _refused(capabilities: list[Any]) -> None:
    """Refused when the agent is built where pydantic-ai tells a capability its agent (`for_agent`, 2.x), else
    on the run's first step (late 1.x)."""
    from pydantic_ai.capabilities import AbstractCapability

    if hasattr(AbstractCapability, 'for_agent'):
        with pytest.raises(UserError, match='one history processor'):
            Agent(_model(), capabilities=capabilities)
        return
    agent: Agent[None, str] = Agent(_model(), capabilities=capabilities)
    with pytest.raises(UserError, match='processed by two'):
        await agent.run('hello')


async def test_the_same_processor_as_a_capability_and_in_process_history_is_refused() -> None:
    processor = create_history_processor()
    await _refused([processor, _process_history(processor)])
    await _refused([_process_history(processor.__call__), processor])


async def test_a_processor_inside_a_combined_capability_counts() -> None:
    from pydantic_ai.capabilities import CombinedCapability

    first, second = create_history_processor(), create_history_processor(id='other')
    await _refused([CombinedCapability([_process_history(first)]), second])


async def test_two_processors_each_in_process_history_are_refused_on_the_first_step() -> None:
    events: list[HistoryEvent] = []
    first = create_history_processor(on_event=events.append)
    second = create_history_processor(id='other', on_event=events.append)
    agent: Agent[None, str] = Agent(
        _model(), capabilities=[_process_history(first), _process_history(second)]
    )
    with pytest.raises(UserError, match='processed by two'):
        await agent.run('hello')
    assert len([e for e in events if isinstance(e, RequestProcessed)]) == 1  # the second never ran


async def test_one_processor_in_process_history_runs_once_per_request() -> None:
    events: list[HistoryEvent] = []
    processor = create_history_processor(on_event=events.append)
    agent: Agent[None, str] = Agent(_model(), capabilities=[_process_history(processor)])
    for _ in range(3):
        await agent.run('hello')
    assert len([e for e in events if isinstance(e, RequestProcessed)]) == 3

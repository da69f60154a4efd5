"""Issue 36, point 6: the user's current question is never summarized away inside its own turn.

A chat reloaded from JSON each turn (a `DirectoryStore`, a 16K window): each turn the model calls a tool
whose output is large, then `read_artifact` on the id it was given. The read-back's size triggers a
compaction; the question of the run must still be in every request of that run, and in its saved history.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import Behaviour, check_requests, fake_model, filler, make_agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_history import (
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    SummarizerSettings,
    create_history_processor,
)
from pydantic_ai_history.store import DirectoryStore
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:.*history_processors.*is deprecated'),
]

WINDOW = 16_000
ART_ID = re.compile(r'art_[0-9a-f]{32}')


def _question(turn: int) -> str:
    return f'Turn {turn}: which regions in report {turn} had the slowest latency, and why?'


def _prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    ]


class _Analyst:
    """The scripted model: search (a large output), read the stored original back by the id the reduced
    output names, then answer."""

    def __init__(self) -> None:
        self.turn = 0

    def __call__(self, messages: list[ModelMessage], info: Any) -> ModelResponse:
        current = messages[-1]
        assert isinstance(current, ModelRequest)
        latest = next((p for p in current.parts if isinstance(p, ToolReturnPart)), None)
        if latest is None:
            return ModelResponse(parts=[ToolCallPart('search', {'turn': self.turn}, tool_call_id='search')])
        if latest.tool_name == 'search':
            match = ART_ID.search(str(latest.content))
            offered = [t.name for t in info.function_tools]
            if match is None or 'read_artifact' not in offered:
                return ModelResponse(parts=[TextPart('The search result is all I need.')])
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        'read_artifact',
                        {'artifact_id': match.group(), 'offset': 0, 'limit': 24_000},
                        tool_call_id='read',
                    )
                ]
            )
        return ModelResponse(parts=[TextPart(f'Answer to turn {self.turn}: the northern regions.')])


async def test_the_question_of_a_run_stays_in_every_request_and_in_its_saved_history(
    tmp_path: Path,
) -> None:
    events: list[HistoryEvent] = []
    analyst = _Analyst()
    provider = StrictProvider(analyst, context_window=WINDOW)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW),
        summarizer=SummarizerSettings(model=fake_model(Behaviour('echo'))),
        store=DirectoryStore(tmp_path / 'store'),
        on_history_event=events.append,
    )
    agent = make_agent(provider.model(), processor)

    @agent.tool_plain
    def search(turn: int) -> str:
        """Search the reports of a turn."""
        return f'report {turn}\n' + filler(40_000, seed=turn * 1_000)

    saved = b'[]'
    for turn in range(1, 6):
        analyst.turn = turn
        first_request = len(provider.requests)
        result = await agent.run(
            _question(turn), message_history=ModelMessagesTypeAdapter.validate_json(saved)
        )
        saved = ModelMessagesTypeAdapter.dump_json(result.all_messages())
        for record in provider.requests[first_request:]:
            assert _question(turn) in _prompts(record.history), f'turn {turn}: the question left a request'
        assert _question(turn) in _prompts(ModelMessagesTypeAdapter.validate_json(saved)), (
            f'turn {turn}: the question left the saved history'
        )
    check_requests(provider)
    compactions = [e for e in events if isinstance(e, CompactionResult)]
    assert compactions, 'no compaction: the case was not exercised'

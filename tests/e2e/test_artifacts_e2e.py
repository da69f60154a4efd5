"""A real `Agent` whose tool returns 500 KB: the model sees a budgeted extract, reads the original back with
`read_artifact` slice by slice, and reassembles exactly the original text. Strict provider, small window."""

from __future__ import annotations

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
)

from _fixtures import need
from _limits import artifact_limits, artifact_policy
from pydantic_ai_history import HistoryEvent, HistoryProcessor, SlidingWindow, assert_valid_history
from pydantic_ai_history._compat import pydantic_ai_version
from pydantic_ai_history.events import ArtifactProcessed
from pydantic_ai_history.stages.artifacts import ArtifactPlanner, ArtifactSettings
from pydantic_ai_history.testing import StrictProvider
from pydantic_ai_history.tokens import TokenCounter

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:.*history_processors.*is deprecated'),
]

WINDOW = 24_000
READ_LIMIT = 25_000
BUDGET = ArtifactSettings().resolve_budget(artifact_limits(WINDOW))
ART_ID = re.compile(r'art_[0-9a-f]{32}')


class _Reader:
    """The scripted model: fetch the page, then read the stored original back until it has all of it."""

    def __init__(self) -> None:
        self.artifact_id: str | None = None
        self.pieces: list[str] = []
        self.total: int | None = None
        self.fetch_tokens: list[int] = []
        self.counter = TokenCounter('gpt-4o')
        self.reads = 0
        self.waited = False
        self.offered: list[list[str]] = []
        """The function tools offered on each request."""

    def __call__(self, messages: list[ModelMessage], info: Any) -> ModelResponse:
        offered = [t.name for t in info.function_tools]
        self.offered.append(offered)
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        for part in returns:
            if part.tool_name == 'fetch_page':
                self.fetch_tokens.append(self.counter.count_part(part))
        current = messages[-1]
        assert isinstance(current, ModelRequest)
        latest = next((p for p in current.parts if isinstance(p, ToolReturnPart)), None)
        if latest is None:
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        'fetch_page',
                        {'url': 'https://en.wikipedia.org/wiki/New_Zealand'},
                        tool_call_id='fetch',
                    )
                ]
            )
        if latest.tool_name == 'fetch_page':
            match = ART_ID.search(str(latest.content))
            assert match, 'the reduced tool return names its artifact id'
            self.artifact_id = match.group()
        elif latest.tool_name == 'wait':
            self.waited = True
        else:
            header, _, chunk = str(latest.content).partition('\n')
            found = re.match(r'\[art_\w+: characters ([\d,]+)-([\d,]+) of ([\d,]+)\.', header)
            assert found, header
            self.total = int(found.group(3).replace(',', ''))
            self.pieces.append(chunk)
            if int(found.group(2).replace(',', '')) >= self.total:
                return ModelResponse(parts=[TextPart('I have read the whole page.')])
        if 'read_artifact' not in offered:
            # a real model calls only the tools it is offered: the read-back tool comes with the next request
            return ModelResponse(parts=[ToolCallPart('wait', {}, tool_call_id='wait')])
        offset = sum(len(p) for p in self.pieces)
        self.reads += 1
        return ModelResponse(
            parts=[
                ToolCallPart(
                    'read_artifact',
                    {'artifact_id': self.artifact_id, 'offset': offset, 'limit': READ_LIMIT},
                    tool_call_id=f'read_{self.reads}',
                )
            ]
        )


class _Outputs:
    name = 'outputs'

    def __init__(self) -> None:
        self.histories: list[list[ModelMessage]] = []

    async def __call__(self, messages: list[ModelMessage], context: Any) -> list[ModelMessage]:
        self.histories.append(list(messages))
        return messages


async def test_500kb_tool_output_is_budgeted_and_read_back_exactly(fixtures_dir: Path) -> None:
    source = fixtures_dir / 'tool_outputs' / 'readability-pages' / 'wikipedia-2' / 'source.html'
    page = need(source).read_text()[:500_000]
    reader = _Reader()
    provider = StrictProvider(reader, context_window=WINDOW)
    events: list[HistoryEvent] = []
    outputs = _Outputs()
    processor = HistoryProcessor(
        stages=[ArtifactPlanner(), SlidingWindow(), outputs],
        policy=artifact_policy(WINDOW),
        on_history_event=events.append,
    )

    def fetch_page(url: str) -> str:
        """Fetch a web page."""
        return page

    def wait() -> str:
        """Do nothing."""
        return 'ok'

    if pydantic_ai_version().startswith('1.'):
        agent: Agent[None, str] = Agent(
            provider.model(),
            tools=[fetch_page, wait],
            toolsets=[processor.readback_toolset()],
            history_processors=[processor],
        )
    else:
        agent = Agent(provider.model(), tools=[fetch_page, wait], capabilities=[processor.capability()])
    result = await agent.run('Read the New Zealand page completely.')

    assert result.output == 'I have read the whole page.'
    assert ''.join(reader.pieces) == page  # exactly the original, reassembled from offsets
    assert reader.total == len(page)
    assert reader.reads == -(-len(page) // READ_LIMIT)
    assert reader.fetch_tokens
    assert max(reader.fetch_tokens) <= BUDGET
    assert provider.peak_input_tokens <= WINDOW
    processed = [e for e in events if isinstance(e, ArtifactProcessed)]
    assert [e.strategy for e in processed] == ['extract']  # processed once, when it first appeared
    assert processed[0].tokens_before > WINDOW
    for history in outputs.histories:
        assert_valid_history(history)
    # the read-back tool is offered with the request that first carries the note, and from then on
    assert reader.offered[0] == ['fetch_page', 'wait']
    assert all('read_artifact' in offered for offered in reader.offered[1:])
    assert not reader.waited

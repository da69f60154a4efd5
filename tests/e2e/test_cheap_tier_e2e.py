"""Compaction events through a real `Agent` on the strict provider: the cheap tier of stubs into the store
before any summary, nothing changed between events, `read_artifact` offered with the first event, and every
stored output one search away."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import make_agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.usage import UsageLimits

from _compaction import StubSummarizer
from pydantic_ai_history import (
    ArtifactProcessed,
    ArtifactSettings,
    CompactionResult,
    ContextPolicy,
    HistoryEvent,
    RequestProcessed,
    StageFailed,
    SummarizerSettings,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history._compat import HAS_CAPABILITIES, part_metadata
from pydantic_ai_history.messages._marks import MARKER_KEY
from pydantic_ai_history.readback import DEFAULT_QUERY_LIMIT, read_artifact_text, search_artifacts_text
from pydantic_ai_history.store import MemoryStore
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:`Agent\\(history_processors='),  # deprecated on late 1.x
]

WINDOW = 32_000
STEPS = 70
TASK = 'Go through the dataset one page at a time with the fetch tool and collect every ticket id.'


def pages(fixtures_dir: Path, count: int) -> list[str]:
    """Real tool outputs (CSV rows, JSON records), each with one distinctive fact in its middle."""
    lines: list[str] = []
    for name in ('airports.csv', 'seattle-weather.csv', 'cars.json', 'stocks.csv'):
        lines.extend((fixtures_dir / 'tool_outputs' / 'vega_datasets' / name).read_text().splitlines())
    out = []
    for i in range(count):
        chunk = lines[(i * 60) % (len(lines) - 60) :][:60]
        out.append('\n'.join([*chunk[:30], f'ticket id: T-{i:04d}-Q{i * 7919 % 10_000:04d}', *chunk[30:]]))
    return out


def fact(page: int) -> str:
    return f'T-{page:04d}-Q{page * 7919 % 10_000:04d}'


class Loop:
    """The scripted model: fetch every page; then, optionally, search everything stored for two facts."""

    def __init__(self, steps: int, search: tuple[int, int] | None = None) -> None:
        self.steps = steps
        self.search = search
        self.tools: list[list[str]] = []
        self.search_answer: str | None = None

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tools.append(sorted(t.name for t in info.function_tools))
        step = len(self.tools) - 1
        if step < self.steps:
            return ModelResponse(
                parts=[
                    TextPart(f'Page {step} next.'),
                    ToolCallPart('fetch', {'page': step}, tool_call_id=f'call_{step}'),
                ]
            )
        if self.search is not None and self.search_answer is None:
            last = messages[-1]
            answered = [
                p for p in last.parts if isinstance(p, ToolReturnPart) and p.tool_name == 'read_artifact'
            ]
            if not answered:
                query = f'ticket id {fact(self.search[0])} {fact(self.search[1])}'
                return ModelResponse(
                    parts=[ToolCallPart('read_artifact', {'query': query}, tool_call_id='find')]
                )
            self.search_answer = str(answered[0].content)
        return ModelResponse(parts=[TextPart('All pages done.')])


def run_setup(
    fixtures_dir: Path, loop: Loop
) -> tuple[Any, StrictProvider, list[HistoryEvent], MemoryStore, list[str]]:
    data = pages(fixtures_dir, loop.steps)
    events: list[HistoryEvent] = []
    store = MemoryStore()
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW),
        summarizer=SummarizerSettings(model=StubSummarizer().model()),
        # the compactor's events alone: the artifact stage decides once, at arrival (its own tests)
        artifacts=False,
        store=store,
        on_event=events.append,
    )
    provider = StrictProvider(loop, context_window=WINDOW)
    agent = make_agent(provider.model(), processor)

    @agent.tool_plain
    def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        return data[page]

    return agent, provider, events, store, data


def wire(messages: tuple[ModelMessage, ...]) -> list[object]:
    """What a provider receives of each message (no timestamps: they are not sent)."""
    return [
        [
            (
                type(p).__name__,
                getattr(p, 'content', None),
                getattr(p, 'args', None),
                getattr(p, 'tool_call_id', None),
            )
            for p in m.parts
        ]
        for m in messages
    ]


def compacted_requests(events: list[HistoryEvent]) -> list[int]:
    """The requests (by index) a compaction happened in."""
    found, request, compacted = [], 0, False
    for event in events:
        if isinstance(event, CompactionResult):
            compacted = True
        elif isinstance(event, RequestProcessed):
            if compacted:
                found.append(request)
            request, compacted = request + 1, False
    return found


def stubs(messages: list[ModelMessage]) -> dict[str, str]:
    """Tool call id -> the artifact id of each tool return the cheap tier stubbed."""
    found = {}
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                ours = part_metadata(part).get(MARKER_KEY)
                if (
                    isinstance(part, ToolReturnPart)
                    and isinstance(ours, dict)
                    and ours.get('strategy') == 'stub'
                ):
                    found[part.tool_call_id] = ours['artifact_id']
    return found


async def test_a_tool_loop_stubs_old_outputs_and_changes_nothing_between_events(fixtures_dir: Path) -> None:
    loop = Loop(STEPS)
    agent, provider, events, store, data = run_setup(fixtures_dir, loop)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    assert not [e for e in events if isinstance(e, StageFailed)]
    for record in provider.requests:
        assert_valid_history(list(record.history))

    compactions = [e for e in events if isinstance(e, CompactionResult)]
    assert len(compactions) >= 3
    assert compactions[0].method == 'stubs', (
        'the cheap tier first: no summarizer while stubs reach the target'
    )
    assert all(c.tokens_after <= c.tokens_before // 2 for c in compactions), 'each event goes deep'
    events_at = set(compacted_requests(events))

    # between events only the newest request changes: each request extends the one before it on the wire
    requests = provider.requests
    for index in range(1, len(requests)):
        before, now = wire(requests[index - 1].history), wire(requests[index].history)
        if index not in events_at:
            assert now[: len(before)] == before, f'request {index} rewrote a message already sent'
    processed = [e for e in events if isinstance(e, RequestProcessed)]
    assert len(processed) == len(requests)
    rewrites = [i for i, e in enumerate(processed) if e.rewritten_messages]
    assert rewrites, 'the events rewrite the cached prefix, and say so'
    assert set(rewrites) <= events_at, 'no prefix rewrite between compaction events'
    assert all(processed[i].rewritten_tokens > 0 for i in rewrites)
    assert {processed[i].rewritten_by for i in rewrites} <= {'compactor', 'read_artifact'}

    if HAS_CAPABILITIES:  # the read-back tool arrives with the first event, which rewrites the prefix anyway
        first = min(events_at)
        assert all('read_artifact' not in tools for tools in loop.tools[:first])
        assert all('read_artifact' in tools for tools in loop.tools[first:])
        assert processed[first].rewritten_by == 'read_artifact'

    # lossless: every stubbed output reads back exactly, and each fact is present or one read away (the stubs
    # any request carried: a later summary may stand for some of them by the end)
    final = result.all_messages()
    stubbed = stubs(final)
    for record in provider.requests:
        stubbed.update(stubs(list(record.history)))
    assert len(stubbed) >= 10
    scope = next(iter(store._scopes))  # the run's scope (its conversation id)
    for call_id, artifact_id in stubbed.items():
        page = int(call_id.removeprefix('call_'))
        assert await store.get(artifact_id, scope=scope) == data[page].encode()
    context = '\n'.join(str(getattr(p, 'content', '')) for m in final for p in m.parts)
    for page in range(STEPS):
        if fact(page) not in context:
            found = await search_artifacts_text(store, fact(page), scope=scope)
            assert fact(page) in found, page


async def test_read_artifact_without_an_id_searches_everything_stored(fixtures_dir: Path) -> None:
    """Two facts from two outputs stubbed at different points: one `read_artifact(query=...)` finds both."""
    loop = Loop(STEPS, search=(3, 40))
    agent, provider, _, store, _ = run_setup(fixtures_dir, loop)
    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    assert_valid_history(result.all_messages(), finished=True)
    answer = loop.search_answer
    assert answer is not None
    assert fact(3) in answer
    assert fact(40) in answer
    ids = set(re.findall(r'art_[0-9a-f]{32}', answer))
    assert ids, 'each passage names the stored artifact it comes from, for reading on'
    assert len(answer) <= DEFAULT_QUERY_LIMIT, "bounded like every query's read-back"
    scope = next(iter(store._scopes))  # the run's scope (its conversation id)
    for artifact_id in ids:  # what a passage names to read on from is stored
        assert await store.get(artifact_id, scope=scope) is not None


async def test_search_and_read_stay_in_the_scope() -> None:
    store = MemoryStore()
    first = ('alpha ' * 500 + '\nthe invoice INV-2231 was refused\n' + 'beta ' * 500).encode()
    second = ('gamma ' * 500 + '\nerror E-77 in module zeta\n').encode()
    for data in (first, second):
        await store.put(
            store.artifact_id(data, scope='c1'), data, media_type='text/plain', source='t', scope='c1'
        )
    found = await search_artifacts_text(store, 'INV-2231 E-77', scope='c1')
    assert 'INV-2231' in found
    assert 'E-77' in found
    assert 'was refused' not in await search_artifacts_text(store, 'INV-2231', scope='c2')
    one = await search_artifacts_text(store, 'INV-2231 E-77', limit=1_000, scope='c1')
    assert len(one) <= 1_000
    assert 'no stored passage matched' in await search_artifacts_text(store, 'nothing-like-this', scope='c1')
    artifact = store.artifact_id(first, scope='c1')
    assert 'INV-2231' in await read_artifact_text(store, artifact, query='INV-2231', scope='c1')


async def test_with_the_artifact_stage_only_the_newest_request_changes_between_events(
    fixtures_dir: Path,
) -> None:
    """The default processor: large outputs (every third one is over 10,000 characters) are reduced when they
    arrive and never planned again, so between compaction events no request rewrites what was sent."""
    loop = Loop(60)
    data = pages(fixtures_dir, 60)
    events: list[HistoryEvent] = []
    processor = create_history_processor(
        # a trigger the loop reaches with its outputs reduced to their views
        policy=ContextPolicy(context_window=WINDOW, max_tokens=WINDOW // 3, target_tokens=WINDOW // 8),
        summarizer=SummarizerSettings(model=StubSummarizer().model()),
        on_event=events.append,
    )
    provider = StrictProvider(loop, context_window=WINDOW)
    agent = make_agent(provider.model(), processor)

    @agent.tool_plain
    def fetch(page: int) -> str:
        """Fetch one page of the dataset."""
        return '\n\n'.join(data[page : page + 4]) if page % 3 == 0 else data[page]

    result = await agent.run(TASK, usage_limits=UsageLimits(request_limit=None))
    assert result.output == 'All pages done.'
    assert not provider.rejected
    assert not [e for e in events if isinstance(e, StageFailed)]
    reduced = [e for e in events if isinstance(e, ArtifactProcessed) and e.strategy != 'include_full']
    assert len(reduced) >= 15, 'the large outputs were reduced as they arrived'
    cap = ArtifactSettings().sizes().keep
    assert cap is not None
    assert all(e.tokens_after <= cap + 100 for e in reduced)
    events_at = set(compacted_requests(events))
    assert events_at, 'the loop reached the trigger'
    processed = [e for e in events if isinstance(e, RequestProcessed)]
    rewrites = {i for i, e in enumerate(processed) if e.rewritten_messages}
    # the first reduction brings `read_artifact`: the tool list changes once, while the history is short
    tool_came = {i for i, e in enumerate(processed) if e.rewritten_by == 'read_artifact'}
    # (1.0 has no capabilities: the tool list is the app's toolset, not passed to the processor)
    assert len(tool_came) == (1 if HAS_CAPABILITIES else 0)
    assert rewrites - events_at <= tool_came
    assert not [e for e in processed if e.rewritten_by == 'artifacts'], 'artifacts never rewrite the prefix'
    for record in provider.requests:
        assert_valid_history(list(record.history))

"""Stores stay within their bounds over long runs and keep what is newest.

`MemoryStore` at its cap keeps every conversation's originals readable while they are within their retention
(the newest are refused and said to be lost, never stored by evicting older ones) and makes room from what
passed it; `DirectoryStore` stays within its documented retention (age and size) however long it runs.
"""

from __future__ import annotations

import re

import pytest
from helpers import PageSteps, filler, make_agent
from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.usage import UsageLimits

from _compaction import StubSummarizer
from pydantic_ai_history import ContentLost, ContextPolicy, HistoryEvent, HistoryProcessor, SummarizerSettings
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.store import MemoryStore

pytestmark = pytest.mark.anyio

WINDOW, TRIGGER, TARGET = 6_000, 3_000, 1_200
STEPS = 5
TRANSCRIPT_ID = re.compile(r'artifact_id="(art_[0-9a-f]{32})"')


def transcripts(messages: list[ModelMessage]) -> list[str]:
    """The ids of the stored transcripts the history names."""
    texts = [str(getattr(p, 'content', '')) for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    return sorted({i for t in texts for i in TRANSCRIPT_ID.findall(t)})


@pytest.mark.slow  # a store filled to its cap by many runs: scale
async def test_memory_store_at_its_cap_keeps_every_named_transcript_readable() -> None:
    conversations = 80
    now = [1_000_000.0]
    store = MemoryStore(max_bytes=10**9, max_scope_bytes=40_000, max_age=3_600, clock=lambda: now[0])
    events: list[HistoryEvent] = []
    processor = HistoryProcessor(
        artifacts=False,
        policy=ContextPolicy(context_window=WINDOW, max_tokens=TRIGGER, target_tokens=TARGET),
        summarizer=SummarizerSettings(model=StubSummarizer().model()),
        store=store,
        scope=lambda ctx: f'conversation:{ctx.deps}',
        on_history_event=events.append,
    )
    agent = make_agent(None, processor, deps_type=int)

    @agent.tool_plain
    def page(n: int) -> str:
        """One page."""
        return f'page {n}\n' + filler(3_000, seed=n)

    async def run(c: int) -> list[str]:
        result = await agent.run(
            f'Conversation {c}: read the pages.',
            model=FunctionModel(PageSteps(STEPS)),
            deps=c,
            usage_limits=UsageLimits(request_limit=None),
        )
        return transcripts(result.all_messages())

    named: dict[int, list[str]] = {}
    for c in range(conversations):
        named[c] = await run(c)
        if c == 0:  # a cap that holds about 55 such conversations: the 80 take it well past it
            assert named[0], 'conversation 0 stored no transcript: the test proves nothing'
            store.max_bytes = 55 * store.size_bytes
        now[0] += 1
    assert store.size_bytes <= store.max_bytes
    assert store.evicted == 0, 'nothing within its retention was evicted'
    refused = [c for c in range(conversations) if not named[c]]
    assert refused, 'the store never reached its cap: the test proves nothing'
    assert [e for e in events if isinstance(e, ContentLost)], 'a refused transcript is reported lost'
    failed = [
        (c, t)
        for c in range(conversations)
        for t in named[c]
        if (await read_artifact_text(store, t, scope=f'conversation:{c}')).startswith('Error')
    ]
    assert failed == []
    # an hour later the oldest are past their retention: they make room for a new conversation
    now[0] += 3_601
    assert await run(conversations)
    assert store.evicted > 0

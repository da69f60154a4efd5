"""Stores stay within their bounds over long runs and keep what is newest.

`MemoryStore` at its cap keeps the most recent conversations whole (the least recently used go first, across
tenants); `DirectoryStore` stays within its documented retention (age and size) however long it runs.
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
TRANSCRIPT_ID = re.compile(r'artifact_id="(art_[0-9a-f]{64})"')


def transcripts(messages: list[ModelMessage]) -> list[str]:
    """The ids of the stored transcripts the history names."""
    texts = [str(getattr(p, 'content', '')) for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    return sorted({i for t in texts for i in TRANSCRIPT_ID.findall(t)})


async def test_memory_store_at_its_cap_keeps_the_newest_conversations_readable() -> None:
    conversations = 80
    store = MemoryStore(max_bytes=10**9, max_scope_bytes=40_000)
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

    named: dict[int, list[str]] = {}
    for c in range(conversations):
        result = await agent.run(
            f'Conversation {c}: read the pages.',
            model=FunctionModel(PageSteps(STEPS)),
            deps=c,
            usage_limits=UsageLimits(request_limit=None),
        )
        named[c] = transcripts(result.all_messages())
        assert named[c], f'conversation {c} stored no transcript: the test proves nothing'
        if c == 0:  # a cap that holds about 55 such conversations: the 80 take it well past it
            store.max_bytes = 55 * store.size_bytes
    assert store.evicted > 0, 'the store never reached its cap'
    assert store.size_bytes <= store.max_bytes
    assert not [e for e in events if isinstance(e, ContentLost)]
    for c in range(conversations - 50, conversations):
        for transcript in named[c]:
            text = await read_artifact_text(store, transcript, scope=f'conversation:{c}')
            assert not text.startswith('Error'), (c, text)
    # and the oldest did make room
    first = [await read_artifact_text(store, t, scope='conversation:0') for t in named[0]]
    assert any(t.startswith('Error') for t in first)

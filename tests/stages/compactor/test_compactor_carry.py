"""What a compaction must not lose: system prompts it evicts, and the full text of what it summarized."""

from __future__ import annotations

import pytest
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, SystemPromptPart

from _compaction import SYSTEM, StubSummarizer, context, tool_loop
from pydantic_ai_history import (
    CompactionSettings,
    Compactor,
    SlidingWindow,
    WindowSettings,
    assert_valid_history,
)
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.store import MemoryStore

pytestmark = pytest.mark.anyio


def _system_prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, SystemPromptPart)
    ]


async def test_system_prompt_moved_into_a_window_note_survives_the_next_compaction() -> None:
    """keep_first_user_message=False lets the window drop the first request; its system prompt moves into the
    window's note. A later compaction evicts that note and must carry the system prompt on."""
    history = tool_loop(30, tokens=400)
    ctx, _ = context(context_window=None, store=MemoryStore())
    window = SlidingWindow(WindowSettings(budget=6_000, keep_first_user_message=False))
    windowed = await window(history, ctx)
    assert windowed[0] is not history[0], 'the first request was dropped'
    assert _system_prompts(windowed) == [SYSTEM]

    grown = [*windowed, *tool_loop(12, tokens=400, tag='more')[1:]]
    summarizer = StubSummarizer()
    compactor = Compactor(
        CompactionSettings(
            max_tokens=6_000,
            target_tokens=3_000,
            summarizer_model=summarizer.model(),
            keep_first_user_message=False,
        )
    )
    ctx, _ = context(context_window=None, store=MemoryStore())
    out = await compactor(grown, ctx)
    assert summarizer.calls == 1
    assert_valid_history(out, original=grown)
    assert _system_prompts(out) == [SYSTEM]


async def test_the_full_transcript_of_what_was_summarized_can_be_read_back() -> None:
    """A summary loses detail; the evicted messages are stored whole and the summary says how to read them."""
    history = tool_loop(40, tokens=500)
    store = MemoryStore()
    ctx, _ = context(context_window=None, store=store)
    summarizer = StubSummarizer(
        behaviour=lambda prompt, n: 'Work is progressing.'
    )  # a summary that says little
    out = await Compactor(
        CompactionSettings(max_tokens=12_000, target_tokens=5_000, summarizer_model=summarizer.model())
    )(history, ctx)
    summary = next(m for m in out if m is not history[0] and isinstance(m, ModelRequest))
    text = ModelMessagesTypeAdapter.dump_json([summary]).decode()
    assert 'read_artifact(artifact_id=' in text
    artifact = text.split('read_artifact(artifact_id=\\"', 1)[1].split('\\"', 1)[0]

    evicted_tags = [
        f'STEP-{i:03d}'
        for i in range(40)
        if f'STEP-{i:03d}' not in ModelMessagesTypeAdapter.dump_json(out).decode()
    ]
    assert evicted_tags, 'the compaction evicted some tool results'
    for tag in evicted_tags:
        found = await read_artifact_text(store, artifact, query=tag, limit=4_000)
        assert tag in found

"""A full disk under the spill store: nothing is removed without a home.

Every unique tool fact is in the history, or in the store, or named (by its tool call) in an error-level
`ContentLost` event. With the disk full, compaction waits while the history still fits the model's window
(nothing is paid for, nothing is evicted); past that it compacts without its transcript and says so.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import Behaviour, check_requests, fake_model, full_processor, make_agent
from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo
from strategies import text_of

from _compaction import SetupCompactor, StubSummarizer, compaction_setup, context, text, tool_loop
from pydantic_ai_history import (
    CompactionResult,
    ContentLost,
    HistoryEvent,
    HistoryWarning,
    StageFailed,
    assert_valid_history,
)
from pydantic_ai_history.messages._marks import marker_kind
from pydantic_ai_history.store import DirectoryStore, StoredArtifact
from pydantic_ai_history.testing import StrictProvider
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio


class FullDirectoryStore(DirectoryStore):
    """A directory store on a disk with no space left: every write fails as the OS reports it."""

    def _put_sync(self, info: StoredArtifact, data: bytes) -> StoredArtifact:
        raise OSError(errno.ENOSPC, 'No space left on device', str(self.root))


def _facts(messages: list[ModelMessage]) -> dict[str, str]:
    """Each tool return's fact marker (`STEP-nnn`) and its tool call, `name#id`."""
    return {
        f'STEP-{i:03d}': f'fetch#step{i}'
        for i in range(len(messages))
        if any(f'STEP-{i:03d}' in text_of(m) for m in messages)
    }


def _lost(events: list[HistoryEvent]) -> set[str]:
    return {call for e in events if isinstance(e, ContentLost) for call in e.tool_calls}


async def test_a_full_disk_defers_compaction_while_the_history_fits_the_window(tmp_path: Path) -> None:
    stub = StubSummarizer()
    ctx, events = context(context_window=128_000, store=FullDirectoryStore(tmp_path))
    messages = tool_loop(30)  # about 31K tokens: over the trigger, well inside the window
    out = await SetupCompactor(
        compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=stub.model())
    )(messages, ctx)
    assert out is messages, 'nothing was evicted'
    assert stub.calls == 0, 'no summary was paid for and thrown away'
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    # the cheap tier could not store the old outputs, nor the summary the transcript: nothing changes
    assert codes == ['artifact_store_failed', 'transcript_store_failed', 'compaction_deferred']
    assert not [e for e in events if isinstance(e, (ContentLost, CompactionResult))]


async def test_a_full_disk_past_the_window_names_every_evicted_tool_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stub = StubSummarizer()
    ctx, events = context(context_window=24_000, store=FullDirectoryStore(tmp_path))
    messages = tool_loop(30)  # about 31K tokens: past the window, so the compaction must go ahead
    with caplog.at_level(logging.ERROR, logger='pydantic_ai_history'):
        out = await SetupCompactor(
            compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=stub.model())
        )(messages, ctx)
    assert_valid_history(out, original=messages)
    assert TokenCounter('gpt-4o').count_messages(out) < 24_000
    [loss] = [e for e in events if isinstance(e, ContentLost)]
    assert (loss.stage, loss.code) == ('compactor', 'transcript_not_stored')
    kept = text_of([m for m in out if marker_kind(m) is None])  # the summary's trail keeps ids, not content
    for fact, tool_call in _facts(messages).items():
        assert fact in kept or tool_call in loss.tool_calls, f'{fact} is nowhere'
    assert loss.tool_calls, 'something was evicted'
    assert all(fact not in kept for fact, call in _facts(messages).items() if call in loss.tool_calls)
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert 'transcript_not_stored' in record.getMessage()
    assert 'fetch#step0' in record.getMessage()


async def test_a_working_store_holds_every_evicted_fact(tmp_path: Path) -> None:
    """The baseline: with space on the disk, the evicted transcript holds every fact and nothing is lost."""
    stub = StubSummarizer()
    store = DirectoryStore(tmp_path)
    ctx, events = context(context_window=24_000, store=store)
    messages = tool_loop(30)
    out = await SetupCompactor(
        compaction_setup(max_tokens=20_000, target_tokens=8_000, summarizer_model=stub.model())
    )(messages, ctx)
    stored = ''.join(p.read_text() for p in tmp_path.glob('*.bin'))
    kept = text_of(out)
    assert all(fact in kept or fact in stored for fact in _facts(messages))
    assert not [e for e in events if isinstance(e, ContentLost)]


# ---- a whole agent run -------------------------------------------------------------------------------------


class _UniqueCalls:
    """The main model: one `fetch` call per step with an id unique across turns, then an answer."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.done = 0
        self.total = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.done >= self.steps:
            self.done = 0
            return ModelResponse(parts=[TextPart(content='All done.')])
        self.done += 1
        self.total += 1
        return ModelResponse(parts=[ToolCallPart('fetch', {'n': self.total}, tool_call_id=f'u{self.total}')])


async def test_an_agent_on_a_full_disk_loses_no_tool_fact_silently(tmp_path: Path) -> None:
    window = 16_000
    events: list[HistoryEvent] = []
    processor = full_processor(
        context_window=window,
        max_tokens=8_000,
        target_tokens=3_000,
        summarizer=fake_model(Behaviour('echo')),
        store=FullDirectoryStore(tmp_path),
        on_event=events.append,
    )
    provider = StrictProvider(_UniqueCalls(6), context_window=window)
    agent = make_agent(provider.model(), processor)
    facts: dict[str, str] = {}

    @agent.tool
    def fetch(ctx: RunContext[Any], n: int) -> str:
        """Fetch page n of the report."""
        fact = f'FACT-{ctx.tool_call_id}'
        facts[fact] = f'fetch#{ctx.tool_call_id}'
        return f'{fact} page {n}\n' + text(900, f'PAGE-{n}')

    history: list[ModelMessage] = []
    for turn in range(4):
        result = await agent.run(f'Summarize the report, part {turn}.', message_history=history)
        assert result.output == 'All done.'
        history = result.all_messages()
    assert_valid_history([*history, ModelRequest(parts=[UserPromptPart(content='next')])])
    check_requests(provider)
    assert not [e for e in events if isinstance(e, StageFailed)]
    kept = text_of(history)
    named = _lost(events)
    missing = [f for f, call in facts.items() if f not in kept and call not in named]
    assert missing == [], 'every tool fact is in the history or named by an error-level event'
    assert named, 'the run went past its window: something was removed, and named'
    assert any(isinstance(e, HistoryWarning) and e.code == 'transcript_store_failed' for e in events)

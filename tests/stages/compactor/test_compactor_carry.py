"""What a compaction must not lose: system prompts it evicts, and the full text of what it summarized."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)

from _compaction import (
    SYSTEM,
    SetupCompactor,
    StubSummarizer,
    compaction_setup,
    context,
    prompt_block,
    tool_loop,
    transcript_records,
)
from pydantic_ai_history import (
    CompactionResult,
    ContextLimits,
    SlidingWindow,
    assert_valid_history,
)
from pydantic_ai_history.messages._marks import MARKER_KEY
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.stages.compactor import summary_text
from pydantic_ai_history.stages.compactor._summary_message import TRANSCRIPT_REFERENCE_OPENING
from pydantic_ai_history.store import MemoryStore, StoredArtifact, StoreError

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
    ctx, _ = context(
        store=MemoryStore(), limits=ContextLimits.fixed(budget=6_000), keep_first_user_message=False
    )
    window = SlidingWindow()
    windowed = await window(history, ctx)
    assert windowed[0] is not history[0], 'the first request was dropped'
    assert _system_prompts(windowed) == [SYSTEM]

    grown = [*windowed, *tool_loop(12, tokens=400, tag='more')[1:]]
    summarizer = StubSummarizer()
    compactor = SetupCompactor(
        compaction_setup(
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
    out = await SetupCompactor(
        compaction_setup(
            max_tokens=12_000,
            target_tokens=5_000,
            summarizer_model=summarizer.model(),
            stub_tool_results=False,
        )
    )(history, ctx)
    summary = next(m for m in out if m is not history[0] and isinstance(m, ModelRequest))
    text = ModelMessagesTypeAdapter.dump_json([summary]).decode()
    assert 'read_artifact(artifact_id=' in text
    artifact = text.split('read_artifact(artifact_id=\\"', 1)[1].split('\\"', 1)[0]

    tail = ModelMessagesTypeAdapter.dump_json(out[2:]).decode()  # what stays verbatim (the trail aside)
    evicted_tags = [f'STEP-{i:03d}' for i in range(40) if f'STEP-{i:03d}' not in tail]
    assert evicted_tags, 'the compaction evicted some tool results'
    for tag in evicted_tags:
        found = await read_artifact_text(store, artifact, query=tag, limit=4_000)
        assert tag in found


_REFERENCE_ID = re.compile(r'read_artifact\(artifact_id="(art_[0-9a-f]+)"')


async def test_repeated_compactions_keep_one_transcript_reference_and_chain_the_transcripts() -> None:
    """Each compaction stores what it evicted; the summary names only the newest transcript, and each
    transcript's first line names the one before, so the model can walk back through every evicted message."""
    store = MemoryStore()
    ctx, events = context(context_window=None, store=store)
    compactor = SetupCompactor(
        compaction_setup(
            max_tokens=12_000,
            target_tokens=5_000,
            summarizer_model=StubSummarizer().model(),
            stub_tool_results=False,
        )
    )
    history = tool_loop(30, tokens=500, tag='r0')
    tags = [f'R0-{i:03d}' for i in range(30)]
    for round_ in range(1, 7):
        history = await compactor(history, ctx)
        summary = summary_text(history[1]) or ''
        assert summary.count(TRANSCRIPT_REFERENCE_OPENING) == 1, f'after compaction {round_}'
        assert len(_REFERENCE_ID.findall(summary)) == 1
        more = tool_loop(24, tokens=500, tag=f'r{round_}')[1:]
        tags += [f'R{round_}-{i:03d}' for i in range(24)]
        history = [*history, *more]
    assert len([e for e in events if isinstance(e, CompactionResult)]) == 6

    # walk the chain from the summary's one reference, reading each transcript's first line as the model would
    [newest] = _REFERENCE_ID.findall(summary_text(history[1]) or '')
    transcripts: list[str] = []
    queue = [newest]
    while queue:
        current = queue.pop()
        first_line = await read_artifact_text(store, current, offset=0, limit=400)
        assert 'not found' not in first_line.lower()
        data = await store.get(current)
        assert data is not None
        transcripts.append(data.decode())
        opening = data.decode().split('\n', 1)[0]
        queue.extend(
            _REFERENCE_ID.findall(opening) if opening.startswith('The messages before these') else []
        )
    assert len(transcripts) == 6
    kept = ModelMessagesTypeAdapter.dump_json(history[2:]).decode()  # the verbatim tail (the trail aside)
    evicted = [t for t in tags if t not in kept]
    assert len(evicted) > 100
    assert all(any(t in transcript for transcript in transcripts) for t in evicted)


async def test_image_urls_without_a_file_extension_are_summarized_and_stored() -> None:
    """`ImageUrl.media_type` raises for a URL it cannot guess from: the transcript names the file by type."""
    image = ImageUrl('https://cdn.example.com/i/abc123')
    shot = ImageUrl('https://cdn.example.com/i/def456')
    history = tool_loop(30, tokens=500)
    history[1:1] = [
        ModelResponse(parts=[TextPart('Send me the picture.')]),
        ModelRequest(parts=[UserPromptPart(['Here it is:', image])]),
    ]
    history[6] = ModelRequest(
        parts=[ToolReturnPart('fetch', ['screenshot taken', shot], tool_call_id='step1')]
    )
    store = MemoryStore()
    ctx, events = context(context_window=None, store=store)
    summarizer = StubSummarizer()
    out = await SetupCompactor(
        compaction_setup(
            max_tokens=12_000,
            target_tokens=5_000,
            summarizer_model=summarizer.model(),
            stub_tool_results=False,
        )
    )(history, ctx)
    assert_valid_history(out, original=history)
    [event] = [e for e in events if isinstance(e, CompactionResult)]
    assert event.method == 'llm'
    records = transcript_records(prompt_block(summarizer.prompts[0], 'messages'))
    assert ('user', None, 'Here it is:\n[file]') in records
    assert ('tool_result', 'fetch', 'screenshot taken\n[file]') in records
    [stored] = _REFERENCE_ID.findall(summary_text(out[1]) or '')
    data = await store.get(stored)
    assert data is not None
    assert 'Here it is:\n[file]' in data.decode()


class _Forgetful(MemoryStore):
    """A store whose retention removed all it held (`forget`), or that refuses writes (`full`)."""

    full = False

    def forget(self) -> None:
        for scope, artifact in list(self._items):
            self._evict((scope, artifact))

    async def _put(self, *args: object, **kwargs: object) -> StoredArtifact:
        if self.full:
            raise StoreError('the disk is full')
        return await super()._put(*args, **kwargs)  # type: ignore[arg-type]


async def test_a_transcript_the_store_removed_is_said_to_be_gone_never_named() -> None:
    """Retention removed the first transcript: the next one's first line says so instead of linking a dead id,
    and a summary that could not store its own keeps no dead reference either."""
    store = _Forgetful()
    ctx, _ = context(context_window=None, store=store, limits=ContextLimits.fixed(budget=40_000))
    compactor = SetupCompactor(
        compaction_setup(
            max_tokens=12_000,
            target_tokens=5_000,
            summarizer_model=StubSummarizer().model(),
            stub_tool_results=False,
        )
    )
    history = await compactor(tool_loop(30, tokens=500, tag='a'), ctx)
    [first] = _REFERENCE_ID.findall(summary_text(history[1]) or '')
    store.forget()
    history = await compactor([*history, *tool_loop(30, tokens=500, tag='b')[1:]], ctx)
    [second] = _REFERENCE_ID.findall(summary_text(history[1]) or '')
    data = await store.get(second)
    assert data is not None
    opening = data.decode().split('\n', 1)[0]
    assert 'no longer stored' in opening
    assert first not in data.decode()

    # now the store removes the second one too, and refuses this compaction's transcript: past the window
    # the summary stands alone, and says the transcript is gone rather than naming `second`
    store.forget()
    store.full = True
    ctx.limits = ContextLimits.fixed(budget=12_500)
    history = await compactor([*history, *tool_loop(30, tokens=500, tag='c')[1:]], ctx)
    summary = summary_text(history[1]) or ''
    assert second not in summary
    assert not _REFERENCE_ID.findall(summary)
    assert 'no longer stored' in summary


def _with_transcript_metadata(message: ModelMessage, transcript: str | None) -> ModelMessage:
    """`message` (our summary) with the transcript id in its metadata replaced, or removed (None); as it is
    where messages have no metadata (pydantic-ai 1.0: the text is all there is)."""
    if not hasattr(message, 'metadata'):
        return message
    metadata = dict(message.metadata or {})
    own = {k: v for k, v in metadata.get(MARKER_KEY, {}).items() if k != 'transcript'}
    if transcript is not None:
        own['transcript'] = transcript
    return dataclasses.replace(message, metadata={**metadata, MARKER_KEY: own})


async def _compacted_twice(edit: Callable[[ModelMessage], ModelMessage]) -> tuple[str, str]:
    """The first compaction's transcript id, and the first line of the second's transcript, with `edit`
    applied to the first summary in between (as a saved history reloaded in a new process)."""
    store = MemoryStore()
    ctx, _ = context(context_window=None, store=store)
    compactor = SetupCompactor(
        compaction_setup(
            max_tokens=12_000,
            target_tokens=5_000,
            summarizer_model=StubSummarizer().model(),
            stub_tool_results=False,
        )
    )
    history = await compactor(tool_loop(30, tokens=500, tag='a'), ctx)
    [first] = _REFERENCE_ID.findall(summary_text(history[1]) or '')
    more = tool_loop(30, tokens=500, tag='b')[1:]
    history = await compactor([history[0], edit(history[1]), *history[2:], *more], ctx)
    [second] = _REFERENCE_ID.findall(summary_text(history[1]) or '')
    data = await store.get(second)
    assert data is not None
    assert second != first
    return first, data.decode().split('\n', 1)[0]


async def test_a_summary_naming_its_transcript_only_in_its_text_still_chains() -> None:
    """Summaries saved by earlier releases, and every summary on pydantic-ai 1.0 (no message metadata), name
    their transcript only in the reference line: the next compaction's transcript still names it."""
    first, opening = await _compacted_twice(lambda m: _with_transcript_metadata(m, None))
    assert first in opening


@pytest.mark.skipif(not hasattr(ModelRequest(parts=[]), 'metadata'), reason='messages have no metadata')
async def test_the_transcript_chain_follows_the_id_kept_as_data_not_the_text() -> None:
    """The summary keeps its transcript's id as data: the chain follows it, whatever the line's text says
    (here the data says there is none, while the line still names the first transcript)."""
    first, opening = await _compacted_twice(lambda m: _with_transcript_metadata(m, ''))
    assert first not in opening

"""The window stores what it drops: the note names the transcript, transcripts chain, and a failing store
(or none) drops anyway and names what was lost, at error level."""

from __future__ import annotations

import dataclasses
import errno
import logging
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest

from _history import call, reply, result, user
from pydantic_ai_history import (
    ContentLost,
    ContextLimits,
    HistoryContext,
    HistoryEvent,
    HistoryWarning,
    SlidingWindow,
    SummarizerSettings,
    WindowApplied,
    assert_valid_history,
)
from pydantic_ai_history._compat import message_metadata
from pydantic_ai_history.messages._marks import marker_kind, own_metadata
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.stages._transcript import named_transcripts
from pydantic_ai_history.stages.window import note_transcript, window_note
from pydantic_ai_history.store import MemoryStore, StoredArtifact, artifact_id
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio

COUNTER = TokenCounter('gpt-4o')
HAS_MESSAGE_METADATA = 'metadata' in {f.name for f in dataclasses.fields(ModelRequest)}
WORDS = 'the quick brown fox jumps over the lazy dog while the cat sleeps '
SCOPE = 'conversation:alice'


class FullStore(MemoryStore):
    """A store on a full disk: every write fails as the OS reports it."""

    async def _put(self, *args: Any, **kwargs: Any) -> StoredArtifact:
        raise OSError(errno.ENOSPC, 'No space left on device')


def text(tokens: int) -> str:
    return WORDS * max(tokens // 13, 1)


def cost(*messages: ModelMessage) -> int:
    return COUNTER.count_messages(messages)


def context(
    store: MemoryStore | None, limits: ContextLimits, summarizer: SummarizerSettings | None = None
) -> tuple[HistoryContext, list[HistoryEvent]]:
    events: list[HistoryEvent] = []
    return (
        HistoryContext(
            counter=TokenCounter('gpt-4o'),
            limits=limits,
            summarizer=summarizer or SummarizerSettings(),
            store=store,
            emit_event=events.append,
            scope=SCOPE,
        ),
        events,
    )


def tool_turns(first: int, count: int, tokens: int = 300) -> list[ModelMessage]:
    """`count` tool round trips, each result holding a unique fact `FACT-nnn`."""
    messages: list[ModelMessage] = []
    for i in range(first, first + count):
        messages += [
            user(f'step {i}'),
            call('fetch', f'c{i}'),
            result('fetch', f'c{i}', f'FACT-{i:03d} ' + text(tokens)),
            reply(f'done {i}'),
        ]
    return messages


def note_of(messages: list[ModelMessage]) -> ModelMessage:
    [note] = [m for m in messages if marker_kind(m) == 'window']
    return note


def note_text(note: ModelMessage) -> str:
    return str(note.parts[-1].content)  # type: ignore[union-attr]


async def window(
    messages: list[ModelMessage], budget: int, store: MemoryStore | None
) -> tuple[list[ModelMessage], list[HistoryEvent]]:
    ctx, events = context(store, ContextLimits.fixed(budget=budget))
    out = await SlidingWindow()(messages, ctx)
    assert_valid_history(out, original=messages)
    assert cost(*out) <= budget
    return out, events


async def test_a_window_drop_stores_the_dropped_messages_and_the_note_names_them():
    store = MemoryStore()
    history = [user('the task'), *tool_turns(0, 8), user('now')]
    out, events = await window(history, 2_000, store)
    note = note_of(out)
    artifact = note_transcript(note)
    assert artifact is not None
    assert f'read_artifact(artifact_id="{artifact}", query=...)' in note_text(note)
    if HAS_MESSAGE_METADATA:  # the mark a read-back gate can check without reading the text
        assert own_metadata(message_metadata(note))['transcript'] == artifact
    kept = '\n'.join(str(p.content) for m in out for p in m.parts if hasattr(p, 'content'))
    dropped_facts = [f'FACT-{i:03d}' for i in range(8) if f'FACT-{i:03d}' not in kept]
    assert dropped_facts, 'the window dropped some tool results'
    stored = await read_artifact_text(store, artifact, scope=SCOPE, limit=200_000)
    assert all(fact in stored for fact in dropped_facts)
    assert 'step 0' in stored, 'user turns are stored too'
    found = await read_artifact_text(store, artifact, query=dropped_facts[0], scope=SCOPE)
    assert dropped_facts[0] in found
    other = await read_artifact_text(store, artifact, scope='conversation:mallory')
    assert other.startswith('Error: no artifact'), 'another scope cannot read it'
    assert not [e for e in events if isinstance(e, ContentLost)]
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == []


async def test_a_second_drop_chains_to_the_first_transcript():
    store = MemoryStore()
    history = [user('the task'), *tool_turns(0, 8), user('now')]
    first, _ = await window(history, 2_000, store)
    first_id = note_transcript(note_of(first))
    assert first_id is not None
    later = [*first, reply('ok'), *tool_turns(8, 8), user('and now')]
    second, events = await window(later, 2_000, store)
    note = note_of(second)
    second_id = note_transcript(note)
    assert second_id is not None
    assert second_id != first_id
    assert note_text(note).count('read_artifact(') == 1, 'one reference suffices'
    stored = (await store.get(second_id, scope=SCOPE) or b'').decode()
    first_line = stored.split('\n', 1)[0]
    assert f'read_artifact(artifact_id="{first_id}")' in first_line
    assert 'earlier messages removed' not in stored, "the earlier note's text is not content"
    assert 'FACT-008' in stored
    earlier = await read_artifact_text(store, first_id, scope=SCOPE, limit=200_000)
    assert 'FACT-000' in earlier
    assert not [e for e in events if isinstance(e, ContentLost)]


async def test_a_failing_store_drops_anyway_and_names_what_was_lost(caplog: pytest.LogCaptureFixture):
    history = [user('the task'), *tool_turns(0, 8), user('now')]
    with caplog.at_level(logging.ERROR, logger='pydantic_ai_history'):
        out, events = await window(history, 2_000, FullStore())
    note = note_of(out)
    assert note_transcript(note) is None
    assert 'read_artifact(' not in note_text(note), 'the note names nothing that was not stored'
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert codes == ['transcript_store_failed', 'window_dropped']
    [lost] = [e for e in events if isinstance(e, ContentLost)]
    kept_calls = {p.tool_call_id for m in out for p in m.parts if hasattr(p, 'tool_call_id')}
    dropped_calls = {f'fetch#c{i}' for i in range(8) if f'c{i}' not in kept_calls}
    assert dropped_calls
    assert set(lost.tool_calls) == dropped_calls
    assert lost.user_prompts == sum(1 for i in range(8) if f'c{i}' not in kept_calls)
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert 'window_dropped' in record.getMessage()
    assert 'fetch#c0' in record.getMessage()
    [applied] = [e for e in events if isinstance(e, WindowApplied)]
    assert applied.tokens_after <= 2_000


async def test_without_a_store_the_drop_is_named_as_lost():
    history = [user('the task'), *tool_turns(0, 8), user('now')]
    out, events = await window(history, 2_000, None)
    assert 'read_artifact(' not in note_text(note_of(out))
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['window_dropped']


async def test_a_failing_store_keeps_the_earlier_transcript_named():
    """The earlier transcript stays reachable when the new one cannot be stored."""
    store = MemoryStore()
    history = [user('the task'), *tool_turns(0, 8), user('now')]
    first, _ = await window(history, 2_000, store)
    first_id = note_transcript(note_of(first))
    later = [*first, reply('ok'), *tool_turns(8, 8), user('and now')]
    second, events = await window(later, 2_000, FullStore())
    note = note_of(second)
    assert note_transcript(note) == first_id
    assert 'the transcript of the earliest of them' in note_text(note)
    assert len([e for e in events if isinstance(e, ContentLost)]) == 1


async def test_the_reference_costs_units_not_the_budget():
    """The note that names its transcript is larger than the plain one: the window drops more units to fit
    it, and those units are in the transcript."""
    history = [
        user('the task'),
        *(m for i in range(30) for m in (user(f'q{i} FACT-{i:03d}'), reply(f'a{i}'))),
        user('now'),
    ]
    budget = cost(history[0], history[-1]) + 300
    plain, _ = await window(history, budget, None)
    stored_out, _ = await window(history, budget, MemoryStore())
    assert len(stored_out) < len(plain), 'the reference took the place of at least one more unit'
    assert stored_out[-3:] == plain[-3:]


async def test_a_reference_that_cannot_fit_gives_way_to_the_plain_note():
    """Only the head and the current request fit beside a plain note: the request must fit, so the note names
    no transcript, the transcript is stored anyway, and a warning gives its id."""
    store = MemoryStore()
    history = [user('the task'), *tool_turns(0, 3), user('now')]
    plain_note = window_note(history[1:-1], None)
    budget = cost(history[0], plain_note, history[-1]) + 5
    out, events = await window(history, budget, store)
    assert len(out) == 3
    assert out[0] is history[0]
    assert out[-1] is history[-1]
    assert 'read_artifact(' not in note_text(out[1])
    [warning] = [e for e in events if isinstance(e, HistoryWarning)]
    assert warning.code == 'window_reference_omitted'
    stored = await read_artifact_text(store, warning.details['artifact_id'], scope=SCOPE, limit=200_000)
    assert all(f'FACT-{i:03d}' in stored for i in range(3))
    assert not [e for e in events if isinstance(e, ContentLost)]


async def test_a_reference_that_would_grow_the_history_gives_way_to_the_plain_note():
    """Nothing fits, but the plain note at least shrinks the history where the reference would grow it: the
    window never returns more than it was given, and still stores what it drops."""
    store = MemoryStore()
    history = [user('the task'), *tool_turns(0, 1, tokens=52), user('now')]
    dropped = history[1:-1]
    assert cost(window_note(dropped, None)) < cost(*dropped)
    assert cost(window_note(dropped, None, transcript=artifact_id(b'x'))) > cost(*dropped)
    budget = cost(*history) - 40
    ctx, events = context(store, ContextLimits.fixed(budget=budget))
    out = await SlidingWindow()(history, ctx)
    assert_valid_history(out, original=history)
    assert cost(history[0], window_note(dropped, None), history[-1]) <= cost(*out) < cost(*history)
    codes = [e.code for e in events if isinstance(e, HistoryWarning)]
    assert codes == ['window_reference_omitted', 'over_budget']
    [warning] = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'window_reference_omitted']
    stored = await read_artifact_text(store, warning.details['artifact_id'], scope=SCOPE)
    assert 'FACT-000' in stored


async def test_a_compaction_that_evicts_a_window_note_keeps_its_transcript_reachable():
    """The compactor's transcript renders an evicted window note with the transcript it names: the window's
    transcript stays one read away from the summary's reference."""
    from _compaction import StubSummarizer
    from pydantic_ai_history import CompactionSettings, Compactor
    from pydantic_ai_history.stages.compactor import summary_sections

    store = MemoryStore()
    windowed, _ = await window([user('the task'), *tool_turns(0, 8), user('now')], 2_000, store)
    window_id = note_transcript(note_of(windowed))
    assert window_id is not None
    grown = [*windowed, reply('ok'), *tool_turns(8, 12), user('and now')]
    summarizer = StubSummarizer(behaviour=lambda prompt, n: 'Work is progressing.')
    ctx, _ = context(
        store,
        ContextLimits.fixed(budget=128_000, trigger=3_000, target=1_500),
        SummarizerSettings(model=summarizer.model()),
    )
    out = await Compactor(CompactionSettings())(grown, ctx)
    assert not [m for m in out if marker_kind(m) == 'window'], 'the note was compacted'
    [sections] = [s for s in map(summary_sections, out) if s is not None]
    [compaction_id] = named_transcripts(sections.reference)
    stored = (await store.get(compaction_id, scope=SCOPE) or b'').decode()
    assert f'read_artifact(artifact_id="{window_id}"' in stored

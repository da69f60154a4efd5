"""Issue 36: a store never tells the model something is stored that is not, through a real `Agent`.

A tool return larger than the store's bound is refused before the note is written (the note says the original
is lost, with a `ContentLost` event); when the conversations' originals together pass the bound, the newest
puts are refused instead of evicting what earlier conversations were told is stored, so no read-back of an
id a note named fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import filler, make_agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)

from pydantic_ai_history import ContextPolicy, HistoryEvent, HistoryWarning, create_history_processor
from pydantic_ai_history.events import ContentLost, StageFailed
from pydantic_ai_history.store import ArtifactStore, DirectoryStore, MemoryStore
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:.*history_processors.*is deprecated'),
]

ART_ID = re.compile(r'art_[0-9a-f]{32}')
WINDOW = 32_000
MISSING = 'no artifact with id'


class Events(list[HistoryEvent]):
    def __call__(self, event: HistoryEvent) -> None:
        self.append(event)

    def codes(self) -> list[str]:
        return [e.code for e in self if isinstance(e, HistoryWarning)]


def _returns(messages: list[ModelMessage], tool: str) -> list[ToolReturnPart]:
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == tool
    ]


def _told_stored(text: str) -> list[str]:
    """The ids a note says are stored: it names a read-back and does not say the original is lost."""
    if 'read_artifact(' not in text or 'could not be stored' in text:
        return []
    return sorted(set(ART_ID.findall(text)))


def _fetch_then_read() -> Callable[[list[ModelMessage], Any], ModelResponse]:
    """Call `fetch`, then read back every id the reduced return says is stored (in parallel), then stop."""

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        current = messages[-1]
        returns = (
            [p for p in current.parts if isinstance(p, ToolReturnPart)]
            if isinstance(current, ModelRequest)
            else []
        )
        if not returns and not _returns(messages, 'fetch'):
            return ModelResponse(parts=[ToolCallPart('fetch', {}, tool_call_id='fetch')])
        if returns and returns[0].tool_name == 'fetch':
            ids = _told_stored(returns[0].model_response_str())
            if ids:
                return ModelResponse(
                    parts=[
                        ToolCallPart(
                            'read_artifact', {'artifact_id': i, 'limit': 2_000}, tool_call_id=f'r{n}'
                        )
                        for n, i in enumerate(ids)
                    ]
                )
        return ModelResponse(parts=[TextPart('Done.')])

    return respond


async def _conversation(
    store: ArtifactStore, output: str, events: Events, history: Any = None, number: int = 0
) -> list[ModelMessage]:
    provider = StrictProvider(_fetch_then_read(), context_window=WINDOW)
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW),
        store=store,
        scope=_scope,
        compaction=False,
        on_event=events,
    )
    agent = make_agent(provider.model(), processor, deps_type=int)

    @agent.tool_plain
    def fetch() -> str:
        """Fetch the report."""
        return output

    result = await agent.run('Fetch the report and read what matters.', message_history=history, deps=number)
    assert not provider.rejected
    assert not [e for e in events if isinstance(e, StageFailed)]
    return result.all_messages()


@pytest.mark.parametrize('backend', ['directory', 'memory'])
async def test_a_tool_return_larger_than_the_bound_is_said_to_be_lost(backend: str, tmp_path: Path) -> None:
    store: ArtifactStore = (
        DirectoryStore(tmp_path / 'spill', max_bytes=1_000_000)
        if backend == 'directory'
        else MemoryStore(max_bytes=1_000_000, max_scope_bytes=1_000_000)
    )
    events = Events()
    output = filler(1_500_000)
    messages = await _conversation(store, output, events)
    [fetched] = _returns(messages, 'fetch')
    seen = fetched.model_response_str()
    assert len(seen) < 200_000, 'the return was reduced: the test proves nothing otherwise'
    assert 'could not be stored' in seen, seen[:600]
    assert 'lost' in seen, seen[:600]
    assert _told_stored(seen) == []
    assert [e for e in events if isinstance(e, ContentLost)], events.codes()
    assert 'artifact_store_failed' in events.codes()
    assert not _returns(messages, 'read_artifact')
    if isinstance(store, DirectoryStore):
        assert not list((tmp_path / 'spill').rglob('art_*')), 'nothing was written and then pruned'


@pytest.mark.parametrize('backend', ['directory', 'memory'])
async def test_many_conversations_past_the_bound_never_lose_what_they_were_told_is_stored(
    backend: str, tmp_path: Path
) -> None:
    """40 conversations of 120 KB each into a 1 MB store: every id a note named reads back, in the turn that
    was told of it and in a later turn after every other conversation wrote; the rest are said to be lost."""
    store: ArtifactStore = (
        DirectoryStore(tmp_path / 'spill', max_bytes=1_000_000)
        if backend == 'directory'
        else MemoryStore(max_bytes=1_000_000, max_scope_bytes=1_000_000)
    )
    events = Events()
    histories: list[list[ModelMessage]] = []
    told: list[str] = []
    for c in range(40):
        output = f'conversation {c}\n' + filler(120_000, seed=c * 7919)
        messages = await _conversation(store, output, events, number=c)
        histories.append(messages)
        told += _told_stored(_returns(messages, 'fetch')[0].model_response_str())
        for page in _returns(messages, 'read_artifact'):
            assert MISSING not in page.model_response_str(), (c, page.model_response_str()[:200])
    # every conversation continues after all the others wrote: each reads back what it was told is stored
    failures = 0
    for c, history in enumerate(histories):
        again = await _conversation(
            store, f'conversation {c} again\n' + filler(200, seed=c), events, history, c
        )
        pages = _returns(again, 'read_artifact')[len(_returns(history, 'read_artifact')) :]
        failures += sum(MISSING in p.model_response_str() for p in pages)
        for artifact in _told_stored(_returns(history, 'fetch')[0].model_response_str()):
            failures += await store.get(artifact, scope=f'conversation:{c}') is None
    assert failures == 0
    lost = [e for e in events if isinstance(e, ContentLost)]
    assert 3 <= len(told) < 40, len(told)  # the bound bit: some were stored, the newest refused
    assert lost, 'the refusals were said'


def _scope(ctx: Any) -> str:
    return f'conversation:{ctx.deps}'


async def test_eight_parallel_searches_without_an_id_share_one_scan() -> None:
    """Eight `read_artifact(query=...)` calls without an id in one response, over 4 MB the run stored: every
    answer holds passages (the one for the needle finds it), and the scan held one artifact at a time."""
    from pydantic_ai_history.readback import _search

    needle = 'INVOICE-77731 was refunded to Josefine Brandt'
    outputs = [filler(1_000_000, seed=n) for n in range(4)]
    outputs[2] = outputs[2][:500_000] + f'\n{needle}\n' + outputs[2][500_000:]
    queries = ['INVOICE-77731 refunded', *(f'latency region {n}' for n in range(7))]

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        fetched = _returns(messages, 'fetch')
        if len(fetched) < len(outputs):
            n = len(fetched)
            return ModelResponse(parts=[ToolCallPart('fetch', {'n': n}, tool_call_id=f'f{n}')])
        if not _returns(messages, 'read_artifact'):
            calls = [
                ToolCallPart('read_artifact', {'query': q}, tool_call_id=f'q{i}')
                for i, q in enumerate(queries)
            ]
            return ModelResponse(parts=calls)
        return ModelResponse(parts=[TextPart('Done.')])

    provider = StrictProvider(respond, context_window=WINDOW)
    events = Events()
    store = MemoryStore()
    processor = create_history_processor(
        policy=ContextPolicy(context_window=WINDOW), store=store, compaction=False, on_event=events
    )
    agent = make_agent(provider.model(), processor)

    @agent.tool_plain
    def fetch(n: int) -> str:
        """Fetch report n."""
        return outputs[n]

    _search.WORKING_SET.reset()
    result = await agent.run('Fetch the four reports, then search them.')
    assert not provider.rejected
    answers = [p.model_response_str() for p in _returns(result.all_messages(), 'read_artifact')]
    assert len(answers) == 8
    assert all('passage(s) for' in a for a in answers), [a[:200] for a in answers]
    assert needle in answers[0]
    assert 0 < _search.WORKING_SET.peak <= 2 * max(len(o) for o in outputs) + 4_096
    assert not [e for e in events if isinstance(e, ContentLost)]

"""Issue 25: everything a request carries is planned against one budget, through a real `Agent` and the strict
provider (0 rejected requests, every request valid, nothing pydantic-ai's pre-send repair would change, no
`StageFailed`).

Read-backs (the largest limit, a query, eight in parallel), aggregates of parallel returns (60 just under the
per-item threshold, 5,000 tiny ones), a user prompt larger than the window, window notes across 100 runs, a
lone surrogate, JSON nested 10,000 and 100,000 deep, and a file no provider accepts. The loop-stall and memory
figures at full size (20 MB tool return, 200 MB PDF, 3M-row XLSX) are in `benchmarks/bench_large_content.py`;
`test_a_20_mb_tool_return_is_worked_on_off_the_loop` checks here that the loop's thread never does that work.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Callable
from typing import Any

import pytest
from helpers import RecordingStore, check_requests, filler, make_agent
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from strategies import needs_repair

from pydantic_ai_history import (
    ContextPolicy,
    HistoryEvent,
    HistoryProcessor,
    HistoryWarning,
    SummarizerSettings,
    assert_valid_history,
    create_history_processor,
)
from pydantic_ai_history.events import ContentLost, StageFailed
from pydantic_ai_history.files import FileSettings
from pydantic_ai_history.messages._marks import part_kinds
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.stages.artifacts import ArtifactSettings
from pydantic_ai_history.store import MemoryStore
from pydantic_ai_history.testing import StrictProvider

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.e2e,
    pytest.mark.filterwarnings('ignore:.*history_processors.*is deprecated'),
]

ART_ID = re.compile(r'art_[0-9a-f]{32}')
PAGE = re.compile(r'\[(art_[0-9a-f]{32}): characters ([\d,]+)-([\d,]+) of ([\d,]+)\.')
NEEDLE = 'INVOICE-77731 was refunded: total 9,412.50 EUR to Josefine Brandt'


class Events(list[HistoryEvent]):
    def __call__(self, event: HistoryEvent) -> None:
        self.append(event)

    def codes(self) -> list[str]:
        return [e.code for e in self if isinstance(e, HistoryWarning)]


def _summarizer() -> SummarizerSettings:
    from helpers import Behaviour, fake_model

    return SummarizerSettings(model=fake_model(Behaviour()), timeout=5.0)


def _processor(window: int, events: Events, **kwargs: Any) -> HistoryProcessor:
    return create_history_processor(
        policy=kwargs.pop('policy', ContextPolicy(context_window=window)),
        summarizer=_summarizer(),
        on_event=events,
        **kwargs,
    )


def _checked(provider: StrictProvider, events: Events, messages: list[ModelMessage] | None = None) -> None:
    """0 rejected, every request valid and untouched by pre-send repair, no stage failed."""
    check_requests(provider)
    assert all(r.input_tokens <= provider.context_window for r in provider.requests)
    assert not any(needs_repair(r.history) for r in provider.requests)
    assert not [e for e in events if isinstance(e, StageFailed)], [
        e for e in events if isinstance(e, StageFailed)
    ]
    if messages is not None:
        assert_valid_history(messages, finished=isinstance(messages[-1], ModelResponse))


def _returns(messages: list[ModelMessage], tool: str) -> list[ToolReturnPart]:
    return [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and p.tool_name == tool
    ]


# ---- read-back ---------------------------------------------------------------------------------------------


def _big_output() -> str:
    text = filler(5_000_000)
    middle = len(text) // 2
    return f'{text[:middle]}\n{NEEDLE}\n{text[middle:]}'


def _reader(reads: Callable[[str], list[ToolCallPart]]) -> Callable[[list[ModelMessage], Any], ModelResponse]:
    """Fetch the 5 MB page, then make `reads(artifact_id)` (when the read-back tool is offered), then stop."""
    state: dict[str, Any] = {'id': None}

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        current = messages[-1]
        names = [t.name for t in info.function_tools]
        returns = [p for p in current.parts if isinstance(p, ToolReturnPart)]
        if not returns and state['id'] is None:
            return ModelResponse(parts=[ToolCallPart('fetch', {}, tool_call_id='fetch')])
        if returns and returns[0].tool_name == 'fetch':
            found = ART_ID.search(str(returns[0].content))
            assert found, 'the reduced output names its artifact'
            state['id'] = found.group()
        if returns and returns[0].tool_name == 'read_artifact':
            return ModelResponse(parts=[TextPart('Read.')])
        assert 'read_artifact' in names, 'the read-back tool comes with the request that first needs it'
        return ModelResponse(parts=reads(state['id']))

    return respond


async def _read_run(reads: Callable[[str], list[ToolCallPart]]) -> tuple[list[ModelMessage], str, Events]:
    output = _big_output()
    provider = StrictProvider(_reader(reads), context_window=32_000)
    events = Events()
    agent = make_agent(provider.model(), _processor(32_000, events))

    @agent.tool_plain
    def fetch() -> str:
        return output

    result = await agent.run('What happened to invoice INVOICE-77731?')
    messages = result.all_messages()
    _checked(provider, events, messages)
    return messages, output, events


def _pages(part: ToolReturnPart, original: str) -> tuple[int, int]:
    """The span a read-back page says it holds, checked against the original."""
    text = part.model_response_str()
    header, _, body = text.partition('\n')
    found = PAGE.match(header)
    assert found, header
    start, end, total = (int(found.group(i).replace(',', '')) for i in (2, 3, 4))
    assert total == len(original)
    assert body == original[start:end], 'a page is exactly the original between the offsets it names'
    assert end == total or f'offset={end}' in header
    return start, end


async def test_read_back_with_the_largest_limit_fits_the_request() -> None:
    messages, original, _ = await _read_run(
        lambda art: [ToolCallPart('read_artifact', {'artifact_id': art, 'limit': 200_000}, tool_call_id='r1')]
    )
    [page] = _returns(messages, 'read_artifact')
    start, end = _pages(page, original)
    assert start == 0
    assert 10_000 < end < 200_000  # as much as the request had room for, and the next offset


async def test_read_back_by_query_fits_the_request() -> None:
    messages, _, _ = await _read_run(
        lambda art: [
            ToolCallPart(
                'read_artifact',
                {'artifact_id': art, 'query': 'INVOICE-77731 refunded', 'limit': 200_000},
                tool_call_id='r1',
            )
        ]
    )
    [answer] = _returns(messages, 'read_artifact')
    assert NEEDLE in answer.model_response_str()


async def test_eight_parallel_reads_share_the_room() -> None:
    messages, original, _ = await _read_run(
        lambda art: [
            ToolCallPart('read_artifact', {'artifact_id': art, 'offset': i * 20_000}, tool_call_id=f'r{i}')
            for i in range(8)
        ]
    )
    pages = _returns(messages, 'read_artifact')
    assert len(pages) == 8
    assert [_pages(p, original)[0] for p in pages] == [i * 20_000 for i in range(8)]


# ---- aggregates of parallel returns ------------------------------------------------------------------------


def _parallel(
    count: int, content: Callable[[int], str], offered: list[list[str]] | None = None
) -> tuple[StrictProvider, Callable[[int], str]]:
    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        if offered is not None:
            offered.append([t.name for t in info.function_tools])
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart('lookup', {'n': n}, tool_call_id=f'c{n}') for n in range(count)]
            )
        return ModelResponse(parts=[TextPart('Done.')])

    return StrictProvider(respond, context_window=128_000), content


async def test_sixty_returns_just_under_the_item_threshold_are_reduced_together() -> None:
    offered: list[list[str]] = []
    provider, content = _parallel(60, lambda n: filler(9_000, n * 1_000), offered)
    events = Events()
    store = RecordingStore()
    agent = make_agent(provider.model(), _processor(128_000, events, store=store))

    @agent.tool_plain
    def lookup(n: int) -> str:
        return content(n)

    result = await agent.run('Look up all sixty.')
    _checked(provider, events, result.all_messages())
    returns = _returns(result.all_messages(), 'lookup')
    assert len(returns) == 60
    assert all(ART_ID.search(str(p.content)) for p in returns)
    stored = set(store.puts.values())
    assert all(content(n).encode() in stored for n in range(60)), 'every original is stored'
    # the read-back tool comes with the request that first carries the notes naming it
    assert ['read_artifact' in names for names in offered] == [False, True]


async def test_five_thousand_tiny_returns_are_stored_as_one_group() -> None:
    provider, content = _parallel(5_000, lambda n: f'item {n}: status ok, region eu-{n % 7}, v{n}')
    events = Events()
    store = RecordingStore()
    agent = make_agent(provider.model(), _processor(128_000, events, store=store))

    @agent.tool_plain
    def lookup(n: int) -> str:
        return content(n)

    result = await agent.run('Look up all of them.')
    _checked(provider, events, result.all_messages())
    returns = _returns(result.all_messages(), 'lookup')
    assert len(returns) == 5_000  # every call keeps its return
    group = ART_ID.search(str(returns[0].content))
    assert group
    assert [str(p.content) for p in returns[1:4]] == ['[#2]', '[#3]', '[#4]']
    lines = store.puts[group.group()].decode().splitlines()
    assert [json.loads(line)['content'] for line in lines] == [content(n) for n in range(5_000)]


# ---- a user prompt larger than the window ------------------------------------------------------------------


async def test_a_user_prompt_of_two_million_tokens_is_stored_and_shown_by_its_passages() -> None:
    question = 'Which customer was refunded for INVOICE-77731, and how much?'
    prompt = f'{filler(8_000_000)}\n{NEEDLE}\n{filler(300_000, 7)}\n\n{question}'

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart('Josefine Brandt, 9,412.50 EUR.')])

    provider = StrictProvider(respond, context_window=128_000)
    events = Events()
    store = DigestStore()
    agent = make_agent(provider.model(), _processor(128_000, events, store=store))
    result = await agent.run(prompt)
    _checked(provider, events, result.all_messages())
    [record] = provider.requests
    seen = str(record.history[-1].parts[-1].content)  # type: ignore[union-attr]
    assert seen.startswith('[pydantic-ai-history: artifact')
    assert NEEDLE in seen  # the passages relevant to the question
    assert question in seen
    assert prompt[:1_000] in seen  # its beginning
    [reduced] = [e for e in events if isinstance(e, HistoryWarning) and e.code == 'user_prompt_reduced']
    assert reduced.details['tokens'] > 2_000_000
    assert store.digests[reduced.details['artifact_id']] == hashlib.sha256(prompt.encode()).hexdigest()


class DigestStore(MemoryStore):
    """A memory store that also remembers the digest of everything put into it, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.digests: dict[str, str] = {}

    async def _put(self, artifact_id: str, data: bytes, *args: Any) -> Any:
        self.digests[artifact_id] = hashlib.sha256(data).hexdigest()
        return await super()._put(artifact_id, data, *args)


# ---- window notes across runs ------------------------------------------------------------------------------


async def test_one_window_note_after_a_hundred_runs_of_a_chat() -> None:
    """Compaction off, 16K window, the app saves `all_messages()` and continues: pydantic-ai merges the last
    run's note into the kept first request, and the window folds it into the new one every time."""

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        current = messages[-1]
        if any(isinstance(p, ToolReturnPart) for p in current.parts):
            return ModelResponse(parts=[TextPart('Answer: ' + filler(600, len(messages)))])
        return ModelResponse(parts=[ToolCallPart('lookup', {'q': 'x'}, tool_call_id=f'c{len(messages)}')])

    provider = StrictProvider(respond, context_window=16_000)
    events = Events()
    processor = _processor(16_000, events, compaction=False)
    agent = make_agent(provider.model(), processor, system_prompt='You answer questions about items.')

    @agent.tool_plain
    def lookup(q: str) -> str:
        return filler(3_000, 7)

    history: list[ModelMessage] | None = None
    for turn in range(100):
        result = await agent.run(f'Question {turn}: what about item {turn}?', message_history=history)
        history = result.all_messages()
    assert history is not None
    _checked(provider, events, history)
    assert len(provider.requests) == 200
    for record in provider.requests:
        notes = sum(kind == 'window' for m in record.history for kind in part_kinds(m))
        assert notes <= 1, notes
        # the model always sees its own tool results of the current turn
        if any(isinstance(p, ToolReturnPart) for p in record.history[-1].parts):
            assert isinstance(record.history[-2], ModelResponse)
    assert sum(kind == 'window' for m in history for kind in part_kinds(m)) == 1


# ---- odd text and structure --------------------------------------------------------------------------------


def _tool_loop(payloads: list[str], window: int) -> tuple[StrictProvider, Events, Any]:
    steps = iter(range(len(payloads) + 1))

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        step = next(steps)
        if step < len(payloads):
            return ModelResponse(parts=[ToolCallPart('fetch', {'n': step}, tool_call_id=f'f{step}')])
        return ModelResponse(parts=[TextPart('Done.')])

    provider = StrictProvider(respond, context_window=window)
    events = Events()
    agent = make_agent(provider.model(), _processor(window, events))

    @agent.tool_plain
    def fetch(n: int) -> str:
        return payloads[n]

    return provider, events, agent


async def test_a_lone_surrogate_in_an_old_tool_return_disables_no_stage() -> None:
    payloads = ['Jos\udce9 ' + filler(3_000, 1)] + [filler(3_000, k * 100) for k in range(2, 8)]
    provider, events, agent = _tool_loop(payloads, 4_000)
    result = await agent.run('Fetch the pages.')
    _checked(provider, events, result.all_messages())
    assert any(e.kind in ('WindowApplied', 'CompactionResult') for e in events)  # it was over the window


@pytest.mark.parametrize('depth', [10_000, 100_000])
async def test_deeply_nested_json_is_read_as_text(depth: int) -> None:
    payloads = ['[' * depth + '1' + ']' * depth + filler(10_000)]
    provider, events, agent = _tool_loop(payloads, 4_000)
    result = await agent.run('Fetch it.')
    _checked(provider, events, result.all_messages())
    [reduced] = _returns(result.all_messages(), 'fetch')
    assert ART_ID.search(str(reduced.content))


# ---- what cannot be sent -----------------------------------------------------------------------------------


async def test_a_file_no_provider_accepts_is_replaced_even_when_the_store_refuses_it() -> None:
    """The issue's 200 MB PDF, scaled down: over the file limit, and over the store's per-artifact cap."""
    data = b'%PDF-1.4\n' + os.urandom(3 * 1024 * 1024)

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart('The file could not be read.')])

    provider = StrictProvider(respond, context_window=128_000)
    events = Events()
    store = MemoryStore(max_artifact_bytes=1024 * 1024)
    files = FileSettings(max_file_bytes=2 * 1024 * 1024)
    processor = _processor(128_000, events, store=store, artifacts=ArtifactSettings(file_settings=files))
    agent = make_agent(provider.model(), processor)
    result = await agent.run(
        ['Summarize the attached report.', BinaryContent(data=data, media_type='application/pdf')]
    )
    _checked(provider, events, result.all_messages())
    [record] = provider.requests
    assert record.input_tokens < 1_000
    [sent] = record.history
    assert not any(isinstance(i, BinaryContent) for p in sent.parts for i in getattr(p, 'content', ()))
    [lost] = [e for e in events if isinstance(e, ContentLost)]
    assert lost.code == 'attachment_not_sendable'
    assert lost.user_prompts == 1


async def test_a_large_exported_spreadsheet_shows_its_head_rows_and_its_row_count() -> None:
    """An XLSX that does not declare its size (as openpyxl and many exporters write it): its first rows are
    shown, and the rows after the limit are counted, not left unknown."""
    from hostile_files import XLSX, xlsx_export

    data = xlsx_export(60_000)

    def respond(messages: list[ModelMessage], info: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart('60,000 orders.')])

    provider = StrictProvider(respond, context_window=32_000)
    events = Events()
    agent = make_agent(provider.model(), _processor(32_000, events))
    result = await agent.run(['How many orders are there?', BinaryContent(data=data, media_type=XLSX)])
    _checked(provider, events, result.all_messages())
    [record] = provider.requests
    shown = '\n'.join(str(i) for p in record.history[0].parts for i in getattr(p, 'content', ()))
    assert '| 1 | SKU-00001 | 1 |' in shown
    assert 'rows shown 30 of 60,000' in shown


# ---- the event loop ----------------------------------------------------------------------------------------

_ON_LOOP_LIMIT = 1_000_000
"""Characters the event loop's own thread may tokenize or rank while 20 MB are processed: what the request
carries besides the content (prompts, stubs, notes). Work proportional to the content shows as 20 million and
more; the loop-stall figure itself (33 ms) is measured by `benchmarks/bench_large_content.py`, not here."""


class _LoopWork:
    """Characters handed to the work that scales with content (the tokenizer, the passage ranker), split by
    whether the event loop's thread did it."""

    def __init__(self) -> None:
        self.on_loop = 0
        self.off_loop = 0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            text = next(a for a in args if isinstance(a, str))
            try:
                asyncio.get_running_loop()
                self.on_loop += len(text)
            except RuntimeError:  # a worker thread runs no loop
                self.off_loop += len(text)
            return function(*args, **kwargs)

        return counted


@pytest.fixture
def loop_work(monkeypatch: pytest.MonkeyPatch) -> _LoopWork:
    import tiktoken.core

    from pydantic_ai_history.readback import _retrieval

    work = _LoopWork()
    encoding = tiktoken.core.Encoding
    monkeypatch.setattr(encoding, 'encode_ordinary', work.wrap(encoding.encode_ordinary))
    monkeypatch.setattr(_retrieval, 'tokenize', work.wrap(_retrieval.tokenize))
    return work


async def test_a_20_mb_tool_return_is_worked_on_off_the_loop(loop_work: _LoopWork) -> None:
    output = filler(20_000_000)
    provider, events, agent = _tool_loop([output], 128_000)
    result = await agent.run('Fetch it.')
    _checked(provider, events, result.all_messages())
    assert loop_work.on_loop < _ON_LOOP_LIMIT, f'{loop_work.on_loop:,} characters worked on on the event loop'
    assert loop_work.off_loop >= len(output), 'the content was never tokenized: the check would prove nothing'


async def test_read_artifact_text_of_a_large_artifact_reads_in_a_thread(loop_work: _LoopWork) -> None:
    store = MemoryStore()
    data = filler(20_000_000).encode()
    await store.put('art_x', data, media_type='text/plain', source='test')
    text = await read_artifact_text(store, 'art_x', query='alpha 01234')
    assert text
    assert loop_work.on_loop < _ON_LOOP_LIMIT, f'{loop_work.on_loop:,} characters ranked on the event loop'
    assert loop_work.off_loop >= len(data), 'the query ranked nothing: the check would prove nothing'

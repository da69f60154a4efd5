"""The newest request fitted into its room: the water level, the grouping of tiny returns, read-back pages cut
shorter, a user message's texts, and what could not be stored."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import filler
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history import HistoryContext, HistoryEvent, HistoryWarning, assert_valid_history
from pydantic_ai_history.events import ArtifactProcessed, ContentLost
from pydantic_ai_history.messages._marks import MARKER_KEY, sealed_kind
from pydantic_ai_history.readback._pages import Page
from pydantic_ai_history.stages._pieces import (
    MEDIA_STUB_TOKENS,
    NOT_STORED,
    POINTER_TOKENS,
    PROMPT_SHARE,
    STUB_TOKENS,
    Piece,
    plan_fit,
    request_pieces,
    water_level,
)
from pydantic_ai_history.stages._request_fit import fit_request
from pydantic_ai_history.store import MemoryStore, StoreError
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ('sizes', 'room', 'level'),
    [
        ([100, 100, 100], 1_000, 100),  # everything fits: the largest
        ([1_000, 100, 100], 600, 400),  # the large one takes what the small ones leave
        ([500, 500, 500, 500], 1_000, 250),  # parallel returns share evenly
        ([10, 10_000], 1_000, 990),
        ([50, 60], 0, 0),
    ],
)
def test_water_level(sizes: list[int], room: int, level: int) -> None:
    assert water_level(sizes, room) == level
    assert sum(min(s, level) for s in sizes) <= max(room, 0)


def _item(tokens: int, *, tool: str | None = 'fetch', index: int = 0, question: bool = False) -> Piece:
    return Piece(
        kind='tool' if tool is not None else 'user',
        part_index=index,
        item_index=None,
        text='x',
        tokens=tokens,
        tool_name=tool,
        tool_call_id=f'c{index}' if tool is not None else None,
        question=question,
    )


def test_plan_reduces_only_the_pieces_over_the_level() -> None:
    items = [_item(5_000, index=0), _item(200, index=1), _item(3_000, index=2)]
    plan = plan_fit(items, 4_200)
    assert plan.caps == {0: 2_000, 2: 2_000}
    assert plan.group == ()


def test_plan_groups_tool_returns_too_many_for_a_note_each() -> None:
    items = [_item(20, index=i) for i in range(1_000)]
    plan = plan_fit(items, 8_000)
    assert plan.group == tuple(range(1_000))
    assert plan.caps == {}
    assert POINTER_TOKENS * 999 + plan.group_tokens <= 8_000
    assert plan.group_tokens >= STUB_TOKENS


def test_plan_never_groups_the_users_message() -> None:
    items = [_item(20, index=i) for i in range(500)] + [_item(9_000, tool=None, index=500, question=True)]
    plan = plan_fit(items, 6_000)
    assert 500 not in plan.group
    assert set(plan.caps) == {500}


def _file(tokens: int, index: int) -> Piece:
    return Piece(kind='media', part_index=0, item_index=index, tokens=tokens, media_type='image/png')


def test_plan_keeps_the_first_files_that_fit_and_stores_the_rest() -> None:
    files = [_file(765, i) for i in range(10)]
    question = _item(10, tool=None, index=10, question=True)
    plan = plan_fit([*files, question], 5_000)
    kept = 10 - len(plan.stubbed)
    assert plan.stubbed == tuple(range(kept, 10))  # the later ones
    assert kept * 765 + len(plan.stubbed) * MEDIA_STUB_TOKENS + 10 <= 5_000
    assert (kept + 1) * 765 + (len(plan.stubbed) - 1) * MEDIA_STUB_TOKENS + 10 > 5_000  # no room wasted
    assert plan.caps == {}  # the question stays


def test_plan_gives_files_half_the_room_beside_a_huge_text() -> None:
    plan = plan_fit([_file(765, 0), _item(2_000_000, tool=None, index=1, question=True)], 100_000)
    assert plan.stubbed == ()
    assert plan.caps == {1: 100_000 * PROMPT_SHARE}  # the user's text leaves room for the run's next steps


def test_plan_groups_the_users_short_texts_but_not_the_question() -> None:
    texts = [_item(90, tool=None, index=i) for i in range(1_000)]
    question = _item(12, tool=None, index=1_000, question=True)
    plan = plan_fit([*texts, question], 30_000)
    assert plan.group == tuple(range(1_000))
    assert 1_000 not in plan.caps
    assert plan.group_tokens <= 30_000 - 12  # the grouped user texts keep no pointer


def _history(request: ModelRequest) -> list[ModelMessage]:
    calls = [
        ToolCallPart(p.tool_name, {'q': 'refund'}, tool_call_id=p.tool_call_id)
        for p in request.parts
        if isinstance(p, ToolReturnPart)
    ]
    opening: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('Which invoices were refunded?')])]
    if calls:
        opening.append(ModelResponse(parts=calls, usage=RequestUsage(input_tokens=20, output_tokens=5)))
    return [*opening, request]


class _Events(list[HistoryEvent]):
    def __call__(self, event: HistoryEvent) -> None:
        self.append(event)


def _context(store: Any = None) -> tuple[HistoryContext, _Events]:
    events = _Events()
    context = HistoryContext(
        counter=TokenCounter('gpt-4o'), store=store if store is not None else MemoryStore(), emit_event=events
    )
    return context, events


async def test_fit_keeps_every_call_and_its_files_and_stores_the_originals() -> None:
    image = BinaryContent(data=b'\x89PNG fake', media_type='image/png')
    big = filler(16_000) + ' INVOICE-77731 refunded'
    request = ModelRequest(
        parts=[
            ToolReturnPart('fetch', [big, image], tool_call_id='c1'),
            ToolReturnPart('fetch', 'small', tool_call_id='c2'),
        ]
    )
    history = _history(request)
    store = MemoryStore()
    context, events = _context(store)
    out = await fit_request(history, 2_000, context, query='refunded', stage='test')  # the image: 765
    assert_valid_history(out, original=history)
    assert out[:-1] == history[:-1]
    first, second = out[-1].parts
    assert second is request.parts[1]  # under the level: whole
    assert isinstance(first, ToolReturnPart)
    assert first.content[-1] is image  # the files a tool returned stay after the reduced text
    assert 'INVOICE-77731' in first.content[0]
    marker = first.metadata[MARKER_KEY]  # type: ignore[index]
    assert marker['strategy'] == 'extract'
    assert (await store.get(marker['artifact_id'])) == big.encode()
    assert context.counter.count_message(out[-1]) <= 2_000
    assert [e.strategy for e in events if isinstance(e, ArtifactProcessed)] == ['extract']


async def test_a_read_back_page_is_cut_shorter_not_stored_again() -> None:
    original = filler(24_000)
    page = Page(artifact_id='art_' + 'a' * 64, start=100, end=100 + 20_000, total=len(original))
    body = original[100:20_100]
    part = ToolReturnPart('read_artifact', page.text(body), tool_call_id='r1', metadata=page.metadata())
    history = _history(ModelRequest(parts=[part]))
    store = MemoryStore()
    context, _ = _context(store)
    out = await fit_request(history, 800, context, query='', stage='test')
    [cut] = out[-1].parts
    shown = str(cut.content)
    header, _, kept = shown.partition('\n')
    end = 100 + len(kept)
    assert header.startswith(f'[{page.artifact_id}: characters 100-{end:,} of {len(original):,}. ')
    assert f'Call again with offset={end} for more.' in header
    assert kept == original[100:end]
    assert len(store) == 0  # the artifact is stored already
    assert context.counter.count_message(out[-1]) <= 800


async def test_the_users_texts_are_sealed_as_ours_and_the_rest_of_the_message_stays() -> None:
    image = BinaryContent(data=b'\x89PNG fake', media_type='image/png')
    question = 'What is the total of INVOICE-77731?'
    long_text = filler(20_000) + '\n' + question
    request = ModelRequest(parts=[UserPromptPart(['Look at this:', long_text, image])])
    history = [request]
    context, events = _context()
    out = await fit_request(history, 2_000, context, query='', stage='test')  # the image takes 765
    [part] = out[-1].parts
    assert isinstance(part, UserPromptPart)
    short, reduced, kept_image = part.content
    assert short == 'Look at this:'
    assert kept_image is image
    assert isinstance(reduced, str)
    assert sealed_kind(reduced) is not None
    assert question in reduced
    assert [e.code for e in events if isinstance(e, HistoryWarning)] == ['user_prompt_reduced']


class _BrokenStore(MemoryStore):
    async def _put(self, *args: Any) -> Any:
        raise StoreError('disk full')


async def test_what_cannot_be_stored_is_cut_anyway_and_reported_lost() -> None:
    request = ModelRequest(parts=[ToolReturnPart('fetch', filler(16_000), tool_call_id='c1')])
    history = _history(request)
    context, events = _context(_BrokenStore())
    out = await fit_request(history, 600, context, query='', stage='test')
    assert context.counter.count_message(out[-1]) <= 600
    assert 'could not be stored' in str(out[-1].parts[0].content)
    assert 'read_artifact(' not in str(out[-1].parts[0].content)  # no read-back that cannot answer
    # nor a marker a later stub would read as "stored under this id"
    assert out[-1].parts[0].metadata[MARKER_KEY]['artifact_id'] == NOT_STORED
    [lost] = [e for e in events if isinstance(e, ContentLost)]
    assert lost.code == 'content_cut'
    assert lost.tool_calls == ('fetch#c1',)


async def test_a_request_within_its_room_is_returned_as_it_is() -> None:
    history = _history(ModelRequest(parts=[ToolReturnPart('fetch', filler(400), tool_call_id='c1')]))
    context, events = _context()
    assert await fit_request(history, 5_000, context, query='', stage='test') is history
    assert not events


def test_request_pieces_skip_our_notes_and_processed_returns() -> None:
    from pydantic_ai_history.messages._marks import seal

    request = ModelRequest(
        parts=[
            UserPromptPart(['the question', seal('artifact', '[pydantic-ai-history: artifact x]')]),
            ToolReturnPart('fetch', 'done', tool_call_id='c1', metadata={MARKER_KEY: {'artifact_id': 'x'}}),
            ToolReturnPart('fetch', {'rows': [1, 2]}, tool_call_id='c2'),
        ]
    )
    items = request_pieces(request, TokenCounter('gpt-4o'))
    assert [(i.part_index, i.item_index, i.tool_name) for i in items] == [(0, 0, None), (2, None, 'fetch')]
    assert items[1].media_type == 'application/json'

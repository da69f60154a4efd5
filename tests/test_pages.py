"""A read-back page: what its first line says, what its metadata records, and how it is cut shorter."""

from __future__ import annotations

from pydantic_ai.messages import ToolReturnPart

from pydantic_ai_history.readback._pages import Page

ID = 'art_' + 'b' * 64


def test_a_page_names_its_span_and_the_next_offset() -> None:
    page = Page(artifact_id=ID, start=10, end=30, total=100)
    text = page.text('x' * 20)
    assert text.startswith(f'[{ID}: characters 10-30 of 100. Call again with offset=30 for more.]\n')
    assert page.body(text) == 'x' * 20
    assert (
        Page(artifact_id=ID, start=80, end=100, total=100)
        .text('y' * 20)
        .startswith(f'[{ID}: characters 80-100 of 100.]')
    )


def test_the_metadata_round_trips_through_a_tool_return() -> None:
    page = Page(artifact_id=ID, start=0, end=5, total=9)
    part = ToolReturnPart('read_artifact', page.text('hello'), tool_call_id='r', metadata=page.metadata())
    assert Page.of(part) == page
    assert Page.of(ToolReturnPart('read_artifact', 'x', tool_call_id='r')) is None
    assert (
        Page.of(ToolReturnPart('t', 'x', tool_call_id='r', metadata={'pydantic_ai_history': 'junk'})) is None
    )


def test_a_shorter_page_moves_its_end() -> None:
    page = Page(artifact_id=ID, start=100, end=200, total=1_000)
    shorter, body = page.shorter('z' * 100, 40)
    assert (shorter.start, shorter.end, body) == (100, 140, 'z' * 40)
    assert 'offset=140' in shorter.text(body, room=50)
    assert 'room for 50 tokens' in shorter.text(body, room=50)


def test_a_query_page_is_cut_at_its_end_with_a_note() -> None:
    page = Page(artifact_id=ID, total=1_000, query='refunds')
    shorter, body = page.shorter('passage ' * 100, 30)
    assert shorter is page
    assert body.startswith('passage ' * 3)
    assert body.endswith('a narrower question finds the rest]')

"""A large tool return whose view the history already shows (a file read again, unchanged) is replaced by one
line naming its stored original; anything else about it still gets its own view."""

from __future__ import annotations

from pathlib import Path

import pydantic_ai
import pytest
from _artifact_helpers import make_processor, marker, tool_returns
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history.messages.validate import assert_valid_history

pytestmark = pytest.mark.anyio

SOURCE = (Path(pydantic_ai.__file__).parent / 'messages.py').read_text()[:24_000]
"""A real source file of about 6,000 tokens, as a `read_file` tool returns it."""


def _read(path: str, content: str, call_id: str, **args: str) -> list[ModelMessage]:
    return [
        ModelResponse(
            parts=[ToolCallPart('read_file', {'path': path, **args}, tool_call_id=call_id)],
            usage=RequestUsage(input_tokens=100, output_tokens=10),
        ),
        ModelRequest(parts=[ToolReturnPart('read_file', content, tool_call_id=call_id)]),
    ]


QUESTION = [ModelRequest(parts=[UserPromptPart('How are tool returns serialized?')])]


async def test_a_file_read_again_unchanged_is_one_line_naming_what_the_history_shows() -> None:
    processor, recorder = make_processor(context_window=128_000)
    first = await processor.process([*QUESTION, *_read('messages.py', SOURCE, 'c1')])
    view = tool_returns(first)[-1]
    artifact = marker(view)['artifact_id']
    assert marker(view)['strategy'] == 'extract'

    history = [*first, *_read('messages.py', SOURCE, 'c2')]
    again = await processor.process(history)

    assert_valid_history(again)
    assert all(new is old for new, old in zip(again[:-1], history[:-1], strict=True)), 'only the tail changes'
    repeat = tool_returns(again)[-1]
    assert repeat.tool_call_id == 'c2'
    assert marker(repeat)['artifact_id'] == artifact
    assert marker(repeat)['strategy'] == 'repeat'
    assert artifact in repeat.content
    assert 'the same content' in repeat.content
    assert f"read_artifact(artifact_id='{artifact}'" in repeat.content
    counter = processor.counter_for('gpt-4o')
    assert counter.count_part(repeat) * 2 < counter.count_part(view), 'a line, not a second view'
    stored = await processor.store.get(artifact)
    assert stored is not None
    assert stored.decode() == SOURCE, 'the original stays readable'
    event = recorder.artifacts[-1]
    assert (event.strategy, event.artifact_id) == ('repeat', artifact)
    assert event.tokens_after * 3 < 500 < event.tokens_before


async def test_a_changed_file_or_a_view_no_longer_shown_gets_its_own_view() -> None:
    # views with room for more than the best passage, so a call asking for others gets another view
    processor, _ = make_processor(context_window=128_000, item_tokens=500)
    first = await processor.process([*QUESTION, *_read('messages.py', SOURCE, 'c1')])

    edited = SOURCE + '\n# one line more\n'
    changed = await processor.process([*first, *_read('messages.py', edited, 'c2')])
    assert marker(tool_returns(changed)[-1])['strategy'] == 'extract', 'other content: its own view'
    assert marker(tool_returns(changed)[-1])['artifact_id'] != marker(tool_returns(first)[-1])['artifact_id']

    # the earlier view was compacted away (here: it is not in the history any more)
    without = await processor.process([*QUESTION, *_read('messages.py', SOURCE, 'c3')])
    assert marker(tool_returns(without)[-1])['strategy'] == 'extract'

    # the same content read by a call after other passages: its view shows them
    other = await processor.process(
        [*first, *_read('messages.py', SOURCE, 'c4', symbol='ImageUrl DocumentUrl')]
    )
    body = tool_returns(other)[-1].content.partition('\n')[2]
    assert body != tool_returns(first)[-1].content.partition('\n')[2], 'other passages'
    assert marker(tool_returns(other)[-1])['strategy'] == 'extract'


async def test_a_chat_reloaded_from_json_still_finds_the_view_it_shows() -> None:
    """Apps reload the history each turn: the earlier view is found by its text and our marker, not by
    object identity."""
    processor, _ = make_processor(context_window=128_000)
    first = await processor.process([*QUESTION, *_read('messages.py', SOURCE, 'c1')])
    reloaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(first))
    assert reloaded[-1] is not first[-1]

    again = await processor.process([*reloaded, *_read('messages.py', SOURCE, 'c2')])

    assert marker(tool_returns(again)[-1])['strategy'] == 'repeat'
    assert marker(tool_returns(again)[-1])['artifact_id'] == marker(tool_returns(first)[-1])['artifact_id']


async def test_a_repeat_line_the_window_keeps_after_dropping_its_view_still_reads_the_original() -> None:
    """The window drops the oldest messages first: the first read's view goes, the line standing for the
    second read stays. Nothing is lost: the line names the stored original and how to read it, and says of
    the earlier return only what stays true once it is gone."""
    from pydantic_ai_history import ArtifactPlanner, ArtifactSettings, HistoryProcessor, SlidingWindow
    from pydantic_ai_history.readback import read_artifact_text

    planner, _ = make_processor(context_window=12_000, item_tokens=500, large_item_tokens=1_500)
    processor = HistoryProcessor(
        stages=[ArtifactPlanner(ArtifactSettings()), SlidingWindow()],
        model='gpt-4o',
        policy=planner.policy,
        store=planner.store,
    )
    history = await processor.process([*QUESTION, *_read('messages.py', SOURCE, 'c1')])
    history = await processor.process([*history, *_read('messages.py', SOURCE, 'c2')])
    assert marker(tool_returns(history)[-1])['strategy'] == 'repeat'
    artifact = marker(tool_returns(history)[-1])['artifact_id']
    sources = sorted(Path(pydantic_ai.__file__).parent.rglob('*.py'))
    others = [(path.name, text) for path in sources if len(text := path.read_text()) > 8_000][:80]
    # small reads (kept whole), each step smaller than the first read's view: the window's cut, which moves by
    # a step at a time, passes that view before it can pass the line after it, whatever the views' sizes
    for index, (name, other) in enumerate(others):  # other files until the first read's view goes
        history = await processor.process([*history, *_read(name, other[:1_200], f'o{index}')])
        if 'c1' not in {p.tool_call_id for p in tool_returns(history)}:
            break

    assert_valid_history(history)
    kept = {p.tool_call_id: p for p in tool_returns(history)}
    assert 'c1' not in kept, 'the window dropped the first view'
    assert 'c2' in kept, 'and kept the repeat line'
    line = kept['c2'].content
    assert f"read_artifact(artifact_id='{artifact}'" in line
    assert 'above' not in line, 'the earlier return is no longer above'
    original = await read_artifact_text(processor.store, artifact)
    assert SOURCE[:2_000] in original

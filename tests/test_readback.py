"""The read_artifact tool: exact text back, documents converted in full, errors as text."""

from __future__ import annotations

from pathlib import Path

import pytest

from pydantic_ai_history.files import ConvertedDocument, FileSettings, read_file
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.store import DirectoryStore, MemoryStore, artifact_id

pytestmark = pytest.mark.anyio


async def test_text_comes_back_exactly_in_slices() -> None:
    store = MemoryStore()
    text = ''.join(f'line {i}: ünïcødé {"x" * (i % 17)}\n' for i in range(3_000))
    key = artifact_id(text.encode())
    await store.put(key, text.encode(), media_type='text/plain', source="tool 'dump'")

    pieces: list[str] = []
    offset = 0
    while True:
        answer = await read_artifact_text(store, key, offset=offset, limit=7_000)
        header, _, body = answer.partition('\n')
        assert header.startswith(f'[{key}: characters {offset:,}-')
        pieces.append(body)
        offset += len(body)
        if 'Call again' not in header:
            break
    assert ''.join(pieces) == text


async def test_a_query_returns_its_best_passages_within_a_smaller_default() -> None:
    """A page is 20,000 characters unless asked otherwise; a query's passages 4,000 (each later request
    carries the answer), and more when the model asks for more."""
    from pydantic_ai_history.readback import DEFAULT_QUERY_LIMIT, DEFAULT_READ_LIMIT, search_artifacts_text

    rows = [f'row {i}: order ORD-{i:05d} amount ${i * 7 % 1000}.00 status ok' for i in range(2_000)]
    rows[1_234] = 'row 1234: order ORD-01234 amount $4,321.09 status DISPUTED by the customer'
    text = '\n'.join(rows)
    store = MemoryStore()
    key = artifact_id(text.encode())
    await store.put(key, text.encode(), media_type='text/plain', source="tool 'orders'")

    page = (await read_artifact_text(store, key)).partition('\n')[2]
    assert len(page) == DEFAULT_READ_LIMIT
    passages = await read_artifact_text(store, key, query='DISPUTED')
    assert 'ORD-01234 amount $4,321.09 status DISPUTED' in passages
    assert len(passages) < DEFAULT_QUERY_LIMIT  # one chunk holds the term
    everywhere = await read_artifact_text(store, key, query='order amount status')  # every chunk holds them
    assert DEFAULT_QUERY_LIMIT // 2 < len(everywhere) <= DEFAULT_QUERY_LIMIT + 200  # its header line
    more = await read_artifact_text(store, key, query='order amount status', limit=12_000)
    assert len(more) > 2 * DEFAULT_QUERY_LIMIT
    found = await search_artifacts_text(store, 'DISPUTED')
    assert 'ORD-01234' in found
    assert len(found) <= DEFAULT_QUERY_LIMIT


async def test_a_query_held_verbatim_comes_first_among_chunks_alike() -> None:
    """Paths of one shape share most of their words: BM25 alone ranks other chunks above the one that holds
    the path asked for; the chunk holding it verbatim comes first, in one artifact and across artifacts."""
    from pydantic_ai_history.readback import search_artifacts_text

    wanted = '/srv/exports/2023-q3/batch-4197/part-aade.csv'
    # every word of the wanted path is in other chunks, densely, in paths that are not it
    alike = '\n'.join(
        f'/srv/exports/2023-q3/batch-4197/part-{i:04x}.csv /srv/exports/2023-q3/batch-{i}/part-aade.csv'
        for i in range(600)
    )
    prose = ' '.join(f'line {i} of the export log says nothing of note.' for i in range(120))
    texts = [alike, f'{prose}\nthe disputed export is {wanted}\n{prose}', alike.replace('csv', 'csv ')]
    store = MemoryStore()
    for text in texts:
        await store.put(artifact_id(text.encode()), text.encode(), media_type='text/plain', source='ls')
    key = artifact_id((texts[0] + texts[1]).encode())
    await store.put(key, (texts[0] + texts[1]).encode(), media_type='text/plain', source='ls')
    by_id = await read_artifact_text(store, key, query=wanted)
    assert wanted in by_id.partition('\n')[2]
    found = await search_artifacts_text(store, wanted)
    assert found.count(wanted) >= 2  # the answer's first line repeats the query; a passage holds it
    from pydantic_ai_history.readback._retrieval import exact_first

    assert exact_first([3, 1, 2], lambda i: i == 2) == [2, 3, 1]
    assert exact_first([3, 1], lambda i: False) == [3, 1]


@pytest.mark.slow
async def test_a_stored_pdf_is_read_back_as_its_whole_markdown(fixtures_dir: Path) -> None:
    """The history shows a cut preview of an attached PDF; read-back converts the stored original in full."""
    pdf = (fixtures_dir / 'documents' / 'REPAIR-2022-INV-001_multipage.pdf').read_bytes()
    preview = read_file(pdf, media_type='application/pdf', settings=FileSettings(max_tokens=200))
    assert isinstance(preview, ConvertedDocument)
    assert 'GRAND TOTAL' not in preview.text  # the end of the document is not in the preview

    store = MemoryStore()
    key = artifact_id(pdf)
    await store.put(key, pdf, media_type='application/pdf', source='estimate.pdf')
    whole = await read_artifact_text(store, key, limit=200_000)
    expected = (fixtures_dir / 'documents' / 'expected' / 'REPAIR-2022-INV-001_multipage.md').read_text()
    body = whole.partition('\n')[2]
    assert body.strip() == expected.strip()

    answer = await read_artifact_text(store, key, query='grand total of the estimate', limit=400)
    assert 'GRAND TOTAL' in answer


async def test_images_are_not_returned_as_text(fixtures_dir: Path) -> None:
    image = (fixtures_dir / 'images' / 'pillow' / 'hopper.png').read_bytes()
    store = MemoryStore()
    key = artifact_id(image)
    await store.put(key, image, media_type='image/png', source='hopper.png')
    answer = await read_artifact_text(store, key)
    # an image comes back as itself (beside the tool's text), never as text
    assert answer == f'[{key} (hopper.png, image/png, {len(image):,} bytes): the stored image follows]'


@pytest.mark.parametrize('bad_id', ['../etc/passwd', 'a/b', '', 'x' * 200])
async def test_bad_and_missing_ids_are_answered_in_text(tmp_path: Path, bad_id: str) -> None:
    store = DirectoryStore(tmp_path / 'store')
    assert (await read_artifact_text(store, bad_id)).startswith('Error: ')
    assert 'no artifact' in await read_artifact_text(store, 'art_' + '0' * 64)


def test_the_gate_reads_only_new_messages_and_sees_notes_written_in_the_middle() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from pydantic_ai_history import readback
    from pydantic_ai_history.readback import ReadbackGate

    calls: list[int] = []
    names = readback.names_readback

    def counting(message: object) -> bool:
        calls.append(1)
        return names(message)  # type: ignore[arg-type]

    readback.names_readback = counting  # type: ignore[assignment]
    try:
        gate = ReadbackGate(run_key=lambda ctx: ctx)
        history: list[object] = [ModelRequest(parts=[UserPromptPart(content='hi')])]
        assert not gate.needed(history, 'run-1')  # type: ignore[arg-type]
        for i in range(50):
            history += [
                ModelResponse(parts=[TextPart(f'r{i}')]),
                ModelRequest(parts=[UserPromptPart(f'q{i}')]),
            ]
            assert not gate.needed(history, 'run-1')  # type: ignore[arg-type]
        assert len(calls) == len(history)  # each message read once
        # the processor rewrote a message in the middle (same length, same last message): it reports it
        before = list(history)
        note = ModelRequest(parts=[UserPromptPart(content='[pydantic-ai-history: artifact art_x removed]')])
        history[10] = note
        gate.observe('run-1', before, history)  # type: ignore[arg-type]
        assert gate.needed(history, 'run-1')  # type: ignore[arg-type]
        # the run keeps the tool after the window dropped the note
        assert gate.needed(history[20:], 'run-1')  # type: ignore[arg-type]
        # another run over a history without notes does not see it
        assert not gate.needed([ModelRequest(parts=[UserPromptPart(content='new')])], 'run-2')  # type: ignore[list-item]
    finally:
        readback.names_readback = names


def test_every_note_that_names_the_tool_is_recognised() -> None:
    from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

    from pydantic_ai_history.readback import names_readback

    assert names_readback(
        ModelRequest(
            parts=[ToolReturnPart('t', '[pydantic-ai-history: artifact art_1 | x]', tool_call_id='c')]
        )
    )
    assert names_readback(
        ModelRequest(
            parts=[UserPromptPart(content=['a', '[pydantic-ai-history: artifact art_1 | attached file]'])]
        )
    )
    assert names_readback(
        ModelRequest(
            parts=[UserPromptPart(content='is stored: read_artifact(artifact_id="art_2", query=...)')]
        )
    )
    assert not names_readback(ModelRequest(parts=[UserPromptPart(content='read the artifact please')]))
    assert not names_readback(
        ModelRequest(parts=[ToolReturnPart('t', {'read_artifact(': 1}, tool_call_id='c')])
    )


async def test_durable_workflow_code_is_offered_the_tool_without_reading_or_predicting() -> None:
    """Workflow code's tool list must not depend on what the process remembers of the run (a replay runs
    again where its later requests were seen), nor make journaled calls to predict a note."""
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RunUsage

    from pydantic_ai_history.readback import ReadbackGate

    asked: list[object] = []

    def predict(ctx: object, messages: object) -> bool:
        asked.append(ctx)
        return False

    tools = [ToolDefinition(name='read_artifact')]
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    durable = ReadbackGate(predict=predict, offered_always=lambda c: True)
    assert await durable.prepare(ctx, tools) == tools
    assert not asked
    in_process = ReadbackGate(predict=predict, offered_always=lambda c: False)
    assert await in_process.prepare(ctx, tools) == []  # nothing to read yet, nothing predicted
    assert asked == [ctx]


async def test_a_run_with_nothing_to_read_is_not_listed_the_tool_at_all() -> None:
    """The gate is asked before the tool is listed: a step with nothing to read back costs one question, not
    a listing of the tool that a prepare function then filters away."""
    from pydantic_ai import RunContext
    from pydantic_ai.messages import ModelRequest
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    from pydantic_ai_history.readback import READ_ARTIFACT_TOOL, ReadbackGate, readback_toolset

    predicted = [False]
    gate = ReadbackGate(predict=lambda ctx, messages: predicted[0])
    toolset = readback_toolset(MemoryStore(), gate=gate)
    listings: list[object] = []
    inner = toolset.wrapped  # type: ignore[attr-defined]
    list_tools = inner.get_tools

    async def counted(ctx: RunContext[None]) -> object:
        listings.append(ctx)
        return await list_tools(ctx)

    inner.get_tools = counted
    ctx = RunContext(
        deps=None, model=TestModel(), usage=RunUsage(), messages=[ModelRequest.user_text_prompt('Hi')]
    )
    assert await toolset.get_tools(ctx) == {}
    assert listings == []
    predicted[0] = True  # a stage will write a note naming the tool: it comes with that request
    assert list(await toolset.get_tools(ctx)) == [READ_ARTIFACT_TOOL]
    assert listings == [ctx]

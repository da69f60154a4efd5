"""Attachments (PDF converted, image fitted), per-tool reducers, re-planning older artifacts over budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _artifact_helpers import make_processor, marker, tool_history, tool_returns
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from pydantic_ai_history import assert_valid_history
from pydantic_ai_history.stages.artifacts import (
    ARTIFACT_MARKER,
    ArtifactSettings,
    browser_snapshot_reducer,
    console_output_reducer,
)
from pydantic_ai_history.tokens import image_size

pytestmark = pytest.mark.anyio


async def test_pdf_attachment_is_converted_and_original_stored(fixtures_dir: Path) -> None:
    """A PDF the serving model cannot take (a profile without document input) is converted to markdown."""
    from pydantic_ai.models.function import FunctionModel

    pdf = (fixtures_dir / 'documents' / 'REPAIR-2022-INV-001_multipage.pdf').read_bytes()
    history = [
        ModelRequest(
            parts=[
                UserPromptPart(
                    content=[
                        'What is the invoice total?',
                        BinaryContent(data=pdf, media_type='application/pdf'),
                    ]
                )
            ]
        )
    ]
    processor, recorder = make_processor(context_window=128_000)
    model = FunctionModel(lambda m, i: ModelResponse(parts=[TextPart('x')]), model_name='gpt-4o')
    if isinstance(getattr(model, 'profile', None), dict):
        model = FunctionModel(
            lambda m, i: ModelResponse(parts=[TextPart('x')]),
            model_name='gpt-4o',
            profile={'supports_document_input': False},  # type: ignore[arg-type]
        )
    else:
        pytest.skip('pydantic-ai 1.x has no document-input profile: PDFs are kept (see test_transparency)')
    out = await processor.process(history, model=model)
    assert_valid_history(out)
    content = out[0].parts[0].content
    assert content[0] == 'What is the invoice total?'
    text = content[1]
    assert isinstance(text, str)
    assert text.startswith(f'{ARTIFACT_MARKER} {processor.store.artifact_id(pdf)}')
    assert 'converted to markdown' in text  # the manifest line
    # the text markitdown's own expected output has for this PDF
    assert 'ZAVA AUTO REPAIR' in text
    assert 'Certified Collision Repair' in text
    assert await processor.store.get(processor.store.artifact_id(pdf)) == pdf
    assert [e.strategy for e in recorder.artifacts] == ['convert']
    # processed once: the marker text follows the converted file, so the next request leaves it alone
    again = await processor.process(out)
    assert again[0] is out[0]
    assert len(recorder.artifacts) == 1
    # a second process with the same cache reuses the conversion
    other, other_events = make_processor(context_window=128_000, cache=processor.cache)
    await other.process(history, model=model)
    assert [e.cache_hit for e in other_events.artifacts] == [True]


async def test_large_image_is_fitted(fixtures_dir: Path) -> None:
    jpg = (fixtures_dir / 'images' / 'large' / 'meadow_cube.jpg').read_bytes()  # 2048x12288, 2.4 MB
    history = [
        ModelRequest(
            parts=[
                UserPromptPart(content=['Describe this.', BinaryContent(data=jpg, media_type='image/jpeg')])
            ]
        )
    ]
    processor, recorder = make_processor(context_window=128_000)
    out = await processor.process(history)
    assert_valid_history(out)
    _, image, note = out[0].parts[0].content
    assert isinstance(image, BinaryContent)
    assert image.media_type.startswith('image/')
    width, height = image_size(image.data) or (0, 0)
    assert max(width, height) <= 8_000
    assert len(image.data) <= 2 * 1024 * 1024
    assert note.startswith(f'{ARTIFACT_MARKER} {processor.store.artifact_id(jpg)}')
    assert await processor.store.get(processor.store.artifact_id(jpg)) == jpg
    assert [e.strategy for e in recorder.artifacts] == ['fit']


async def test_data_url_document_and_remote_url(fixtures_dir: Path) -> None:
    import base64

    html = (fixtures_dir / 'documents' / 'test_blog.html').read_bytes()
    data_url = 'data:text/html;base64,' + base64.b64encode(html).decode()
    from pydantic_ai.messages import DocumentUrl

    remote = ImageUrl(url='https://example.com/cat.png')
    history = [
        ModelRequest(parts=[UserPromptPart(content=['Read these', DocumentUrl(url=data_url), remote])])
    ]
    processor, _recorder = make_processor(context_window=128_000)
    out = await processor.process(history)
    content = out[0].parts[0].content
    assert content[1].startswith(ARTIFACT_MARKER)
    assert 'converted to markdown' in content[1]
    assert content[2] is remote  # remote URLs are never fetched
    assert await processor.store.get(processor.store.artifact_id(html)) == html


def test_console_output_reducer_keeps_errors_and_tail() -> None:
    lines = [f'compiling module {i}' for i in range(500)]
    lines[120] = 'ERROR: undefined symbol foo_bar in module 120'
    reduced = console_output_reducer(tail_lines=10)('\n'.join(lines))
    assert 'ERROR: undefined symbol foo_bar in module 120' in reduced
    assert 'compiling module 499' in reduced
    assert 'compiling module 489' not in reduced.split('omitted ...')[-1][:0]
    assert 'compiling module 50\n' not in reduced
    assert '... 120 lines omitted ...' in reduced
    assert len(reduced) < len('\n'.join(lines)) / 10


def test_browser_snapshot_reducer_text_and_tree() -> None:
    snapshot = '\n'.join(
        ['- generic [ref=e1]:', '  - navigation [ref=e2]:']
        + [
            f'    - generic [ref=x{i}]:\n      - generic [ref=y{i}]:\n        - text: filler {i}'
            for i in range(200)
        ]
        + ['    - generic [ref=z]:\n      - generic [ref=z2]:\n        - button "Checkout" [ref=e99]']
    )
    reduced = browser_snapshot_reducer(max_depth=2)(snapshot)
    assert '- button "Checkout" [ref=e99]' in reduced
    assert 'filler 3' not in reduced
    assert 'nodes omitted' in reduced
    tree = {
        'role': 'root',
        'children': [
            {
                'role': 'group',
                'children': [
                    {
                        'role': 'group',
                        'children': [{'role': 'link', 'name': 'Home'}, {'role': 'text', 'name': 'x'}],
                    }
                ],
            }
        ],
    }
    out = browser_snapshot_reducer(max_depth=1)(tree)
    assert out['children'][0]['children'] == [{'role': 'link', 'name': 'Home'}, {'omitted_nodes': 2}]


async def test_registered_reducer_runs_before_planning(fixtures_dir: Path) -> None:
    log = (
        '\n'.join(f'test_case_{i} PASSED' for i in range(3_000))
        + '\nFAILED test_case_17 - AssertionError: 3 != 4\n1 failed'
    )
    settings = ArtifactSettings(reducers={'run_tests': console_output_reducer(tail_lines=5)})
    processor, _recorder = make_processor(settings, context_window=128_000)
    history = tool_history('Why do the tests fail?', 'run_tests', log)
    out = await processor.process(history)
    assert_valid_history(out)
    part = tool_returns(out)[0]
    assert 'FAILED test_case_17 - AssertionError: 3 != 4' in part.content
    assert 'reduced by the run_tests reducer' in part.content
    assert marker(part)['artifact_id'] == processor.store.artifact_id(log.encode())
    assert await processor.store.get(processor.store.artifact_id(log.encode())) == log.encode()
    assert len(part.content) < 2_000


async def test_an_artifact_is_decided_once_when_it_arrives(fixtures_dir: Path) -> None:
    """A large return is reduced when it arrives (a view within `max_artifact_tokens`, the original stored)
    and never planned again: when a later one arrives over the limit, only the newest request changes."""
    products = json.loads((fixtures_dir / 'tool_outputs' / 'tau-bench_retail_products.json').read_text())
    processor, recorder = make_processor(context_window=64_000)
    first = await processor.process(tool_history('List the products', 'products', products))
    [view] = tool_returns(first)
    assert marker(view).get('strategy') == 'extract'
    counter = processor.counter_for('gpt-4o')
    cap = ArtifactSettings().sizes().keep
    assert cap is not None
    assert counter.count_part(view) <= cap + 100  # the view, and the line naming the stored original
    stored = await processor.store.get(marker(view)['artifact_id'], scope=processor.scope_of(None))
    assert stored is not None
    assert json.loads(stored) == products
    airports = (fixtures_dir / 'tool_outputs' / 'vega_datasets' / 'airports.csv').read_text()
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart

    later = [
        *first,
        ModelResponse(
            parts=[ToolCallPart(tool_name='airports', args={}, tool_call_id='c2')],
            usage=RequestUsage(input_tokens=60_000, output_tokens=5),  # over the limit, as the provider says
        ),
        ModelRequest(parts=[ToolReturnPart(tool_name='airports', content=airports, tool_call_id='c2')]),
    ]
    out = await processor.process(later)
    assert_valid_history(out)
    assert all(new is old for new, old in zip(out[:-1], later[:-1], strict=True))  # the cached prefix stays
    assert marker(tool_returns(out)[-1]).get('strategy') == 'extract'
    assert [a.source for a in recorder.artifacts] == ["tool 'products'", "tool 'airports'"]


async def test_reply_only_history_is_untouched() -> None:
    history = [
        ModelRequest(parts=[UserPromptPart(content='hi')]),
        ModelResponse(parts=[TextPart('hello')]),
        ModelRequest(parts=[UserPromptPart(content='bye')]),
    ]
    processor, recorder = make_processor()
    assert await processor.process(history) == history
    assert recorder.artifacts == []

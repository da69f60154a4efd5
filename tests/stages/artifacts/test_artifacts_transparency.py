"""Under a huge window the artifact stage is invisible: the output is the input, the same objects."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from _artifact_helpers import make_processor
from PIL import Image
from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pydantic_ai_history import validate_history
from pydantic_ai_history.stages.artifacts import ARTIFACT_MARKER
from pydantic_ai_history.stages.artifacts._accepted import accepted_as_is, unidentified_image

pytestmark = pytest.mark.anyio


def _image(fmt: str, size: tuple[int, int] = (6, 4)) -> bytes:
    buffer = io.BytesIO()
    Image.new('RGB', size, (200, 30, 30)).save(buffer, fmt)
    return buffer.getvalue()


def _histories(fixtures_dir: Path) -> list[list[object]]:
    pdf = (fixtures_dir / 'documents' / 'dummy.pdf').read_bytes()
    fake_png = b'\x89PNG' + b'kiwi' * 32  # pydantic-ai's own tests use this 132-byte stand-in
    call = ToolCallPart('look', {'q': 'x'}, tool_call_id='c1')
    return [
        [
            ModelRequest(
                parts=[UserPromptPart(content=['hi', BinaryContent(data=b'hello', media_type='text/plain')])]
            )
        ],
        [
            ModelRequest(
                parts=[
                    UserPromptPart(content=['see', BinaryContent(data=_image('PNG'), media_type='image/png')])
                ]
            )
        ],
        [
            ModelRequest(
                parts=[
                    UserPromptPart(
                        content=['see', BinaryContent(data=_image('JPEG'), media_type='image/jpeg')]
                    )
                ]
            )
        ],
        [
            ModelRequest(
                parts=[UserPromptPart(content=['kiwi', BinaryContent(data=fake_png, media_type='image/png')])]
            )
        ],
        [
            ModelRequest(
                parts=[UserPromptPart(content=['pdf', BinaryContent(data=pdf, media_type='application/pdf')])]
            )
        ],
        [ModelRequest(parts=[UserPromptPart(content=['url', ImageUrl(url='https://example.com/a.png')])])],
        [
            ModelRequest(parts=[UserPromptPart(content='look it up')]),
            ModelResponse(parts=[call]),
            ModelRequest(
                parts=[
                    ToolReturnPart('look', {'a': [1, 2], 'b': {'c': 'd'}}, tool_call_id='c1'),
                ]
            ),
            ModelResponse(parts=[TextPart('done')]),
            ModelRequest(parts=[UserPromptPart(content='again')]),
            ModelResponse(parts=[ToolCallPart('look', {}, tool_call_id='c2')]),
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        'look',
                        ['text', BinaryContent(data=_image('PNG'), media_type='image/png')],
                        tool_call_id='c2',
                    )
                ]
            ),
        ],
    ]


async def test_a_fitting_history_comes_out_as_it_went_in(fixtures_dir: Path) -> None:
    from pydantic_ai_history.budget.model_info import file_input_profile

    histories = _histories(fixtures_dir)
    if file_input_profile(None) is None:
        histories = histories[1:]  # 1.x: plain-text binaries are converted (1.0's adapters reject them)
    for history in histories:
        processor, recorder = make_processor(context_window=10_000_000)
        out = await processor.process(history)  # type: ignore[arg-type]
        assert len(out) == len(history)
        assert all(a is b for a, b in zip(out, history, strict=True)), history
        assert not validate_history(out, original=history)  # type: ignore[arg-type]
        assert out[0].parts[0] is history[0].parts[0]  # type: ignore[attr-defined]
        assert not recorder.artifacts


def test_the_accepted_table() -> None:
    assert accepted_as_is('image/png', None)
    assert accepted_as_is('application/pdf', None)
    assert not accepted_as_is('text/plain', None)  # 1.x adapters do not all send plain-text binaries
    assert accepted_as_is('text/plain', {'supports_document_input': True})
    docx = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'
    assert not accepted_as_is(docx, {'supports_document_input': True})
    assert not accepted_as_is('application/pdf', {'supports_document_input': False})
    assert not accepted_as_is('image/png', {'supports_image_input': False})
    assert not accepted_as_is(
        'text/plain', {'supports_document_input': True, 'supported_document_media_types': {'application/pdf'}}
    )


def test_a_pillow_png_is_recognised_and_a_stand_in_is_not() -> None:
    assert not unidentified_image(_image('PNG', (1, 1)))
    assert unidentified_image(b'\x89PNG' + b'kiwi' * 32)


DOCX = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'
XLSX = 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'


@pytest.mark.parametrize(('name', 'media_type'), [('test.docx', DOCX), ('test.xlsx', XLSX)])
async def test_a_type_no_provider_takes_is_converted_even_when_it_fits(
    fixtures_dir: Path, name: str, media_type: str
) -> None:
    data = (fixtures_dir / 'documents' / name).read_bytes()
    prompt = UserPromptPart(content=['summarize', BinaryContent(data=data, media_type=media_type)])
    history = [ModelRequest(parts=[prompt])]
    processor, recorder = make_processor(context_window=10_000_000)
    out = await processor.process(history)  # type: ignore[arg-type]
    content = out[0].parts[0].content  # type: ignore[union-attr]
    assert content[0] == 'summarize'
    assert isinstance(content[1], str)
    assert content[1].startswith(ARTIFACT_MARKER)
    assert [e.strategy for e in recorder.artifacts] == ['convert']
    assert await processor.store.get(processor.store.artifact_id(data)) == data


async def test_an_accepted_file_is_converted_when_the_history_does_not_fit(fixtures_dir: Path) -> None:
    pdf = (fixtures_dir / 'documents' / 'REPAIR-2022-INV-001_multipage.pdf').read_bytes()
    filler = 'lorem ipsum dolor sit amet ' * 2_000
    history = [
        ModelRequest(parts=[UserPromptPart(content=filler)]),
        ModelResponse(parts=[TextPart('ok')]),
        ModelRequest(
            parts=[UserPromptPart(content=['total?', BinaryContent(data=pdf, media_type='application/pdf')])]
        ),
    ]
    processor, recorder = make_processor(context_window=8_000)
    out = await processor.process(history)  # type: ignore[arg-type]
    content = out[-1].parts[0].content  # type: ignore[union-attr]
    assert isinstance(content[1], str)
    assert content[1].startswith(f'{ARTIFACT_MARKER} {processor.store.artifact_id(pdf)}')
    assert [e.strategy for e in recorder.artifacts] == ['convert']

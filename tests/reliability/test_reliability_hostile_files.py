"""Hostile and broken files attached to a user prompt or returned by a tool, in real agent runs.

Memory stays bounded (tracemalloc peak of the run, the file's own bytes excluded, under 300 MB: a behaviour
bound, not a timing one), the history gets a clear note about the file, and the run completes.
"""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import Behaviour, RecordingStore, check_requests, fake_model, full_processor, make_agent
from hostile_files import DOCX, MB, csv_one_line, docx_bomb, pdf_pages
from pydantic_ai.messages import BinaryContent, ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo
from strategies import text_of

from pydantic_ai_history import ArtifactProcessed, HistoryEvent, StageFailed
from pydantic_ai_history.stages.artifacts import ARTIFACT_MARKER
from pydantic_ai_history.testing import StrictProvider

# Hostile files (bombs, 10,000-page PDFs, 100 MB inputs) under the slow marker, as the README's fast command
# leaves them to CI's full run.
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

WINDOW = 32_000
PEAK_LIMIT = 300 * 1024 * 1024


def _zip_bomb() -> bytes:
    """A 100 MB file of zeros, deflated to about 100 KB, written in streamed chunks."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as archive, archive.open('zeros.txt', 'w') as f:
        chunk = bytes(1024 * 1024)
        for _ in range(100):
            f.write(chunk)
    return buffer.getvalue()


def _fixture(relative: str) -> Callable[[Path], tuple[bytes, str, str]]:
    def load(root: Path) -> tuple[bytes, str, str]:
        path = root / relative
        media = {
            '.gif': 'image/gif',
            '.png': 'image/png',
            '.jpg': 'image/jpeg',
            '.heic': 'image/heic',
        }.get(path.suffix.lower(), 'application/octet-stream')
        return path.read_bytes(), media, path.name

    return load


FILES: dict[str, Callable[[Path], tuple[bytes, str, str]]] = {
    'decompression_bomb': _fixture('images/pillow/decompression_bomb.gif'),
    'truncated_png': _fixture('images/pillow/truncated_image.png'),
    'truncated_jpeg': _fixture('images/pillow/truncated_jpeg.jpg'),
    'random_bin': _fixture('documents/random.bin'),
    'heic': _fixture('images/large/iphone_13_pro_max.HEIC'),
    'zip_bomb': lambda _: (_zip_bomb(), 'application/zip', 'bomb.zip'),
    # calloc'd zeros: no 100 MB is written before the run, and the bytes are allocated before tracing starts
    'hundred_mb': lambda _: (bytes(100 * 1024 * 1024), 'application/pdf', 'huge.pdf'),
    'nested_json': lambda _: (b'[' * 100_000 + b']' * 100_000, 'application/json', 'deep.json'),
    # issue 17: refused before parsing, converted up to the page limit, read up to the line cap, SVG as text
    'docx_zip_bomb': lambda _: (docx_bomb(10 * MB), DOCX, 'bomb.docx'),
    'pdf_10k_pages': lambda _: (pdf_pages(10_000), 'application/pdf', 'pages.pdf'),
    'csv_one_line': lambda _: (csv_one_line(8 * MB), 'text/csv', 'line.csv'),
    'svg': lambda _: (
        b'<svg xmlns="http://www.w3.org/2000/svg"><title>MARK-svg-title</title></svg>',
        'image/svg+xml',
        'chart.svg',
    ),
}


class _Script:
    """Calls `get_file` once, then answers."""

    def __init__(self, via_tool: bool) -> None:
        self.via_tool = via_tool
        self.called = False

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.via_tool and not self.called:
            self.called = True
            return ModelResponse(parts=[ToolCallPart(tool_name='get_file', args={}, tool_call_id='f1')])
        return ModelResponse(parts=[TextPart(content='All done.')])


@pytest.mark.parametrize('via', ['attachment', 'tool'])
@pytest.mark.parametrize('kind', list(FILES))
async def test_hostile_file_in_agent_run(fixtures_dir: Path, kind: str, via: str) -> None:
    data, media_type, _ = FILES[kind](fixtures_dir)
    events: list[HistoryEvent] = []
    store = RecordingStore()
    processor = full_processor(
        context_window=WINDOW,
        max_tokens=16_000,
        target_tokens=6_000,
        summarizer=fake_model(Behaviour('echo')),
        store=store,
        on_event=events.append,
    )
    provider = StrictProvider(_Script(via == 'tool'), context_window=WINDOW)
    agent = make_agent(provider.model(), processor)

    @agent.tool_plain
    def get_file() -> BinaryContent:
        """The file the user asked about."""
        return BinaryContent(data=data, media_type=media_type)

    prompt: list[object] = ['MARK-user-1 What is in this file?']
    if via == 'attachment':
        prompt.append(BinaryContent(data=data, media_type=media_type))

    tracemalloc.start()
    try:
        result = await agent.run(prompt)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert result.output == 'All done.'
    check_requests(provider)
    assert peak < PEAK_LIMIT, f'peak traced memory {peak / 2**20:.0f} MB'
    assert not [e for e in events if isinstance(e, StageFailed)]
    history = result.all_messages()
    text = text_of(history)
    assert 'MARK-user-1' in text
    # the file is either small enough to stay as it is, or replaced by a note of ours saying what happened
    raw_left = any(isinstance(item, BinaryContent) and item.data is data for item in _contents(history))
    if not raw_left:
        assert ARTIFACT_MARKER in text, text[-2_000:]
    noted = [e for e in events if isinstance(e, ArtifactProcessed)]
    assert noted, 'the file went through unnoticed'
    assert all(e.rationale and e.rationale in text for e in noted), (
        'the note in the history says what happened'
    )


def _contents(history: list[ModelMessage]) -> list[object]:
    items: list[object] = []
    for message in history:
        for part in message.parts:
            content = getattr(part, 'content', None)
            if isinstance(content, (list, tuple)):
                items.extend(content)
            elif content is not None:
                items.append(content)
    return items

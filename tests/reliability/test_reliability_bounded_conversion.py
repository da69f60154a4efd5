"""Issue 17: every hostile attachment is converted in bounded time and memory, with a clear note.

Each case builds its file inside a fresh Python process (nothing large crosses into the test process), reads
it with `read_file` as the artifact stage does, counts it with the `TokenCounter` as the window does, and
prints what the model would see. The test asserts that the process returned (a generous 60 s timeout: the
real targets, under 10 s and 500 MB, are measured by `benchmarks/bench_hostile_files.py`), that neither it
nor the conversion worker grew past a generous memory bound, and what the note says. The three heaviest
cases at full size (3M rows, 100,000 pages, 500 MB) run with `HOSTILE_FULL_SIZE=1`; the regular set reads
every format at a size that crosses the same limits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hostile_files import MB, lying_wav
from pydantic_ai.messages import BinaryContent, ModelMessage, ModelRequest, UserPromptPart

from _history import reply, user
from pydantic_ai_history import ContextPolicy, HistoryProcessor, SlidingWindow
from pydantic_ai_history.files import ConvertedDocument, FittedAudio, UnreadableFile, read_file
from pydantic_ai_history.messages.validate import validate_history
from pydantic_ai_history.tokens import TokenCounter

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60
"""Per case, in seconds: the process as a whole gets this times the number of cases it reads."""
TEST_PROCESS_BOUND = 450 * MB
"""The reading process holds pydantic-ai, tiktoken and the largest file: generous, but an unbounded parse of
any case (918 MB to 6.7 GB before) breaks it."""
WORKER_BOUND = 640 * MB
"""The worker is stopped at its 512 MiB limit, polled every 50 ms: this allows for the overshoot."""

_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import hostile_files
    from pydantic_ai_history._compat import BinaryContent
    from pydantic_ai_history.files import read_file
    from pydantic_ai_history.files import _worker
    from pydantic_ai_history.files._worker import shutdown_workers, worker_peak_bytes
    from pydantic_ai_history.tokens import TokenCounter

    reports = {}
    largest = 0
    for key, name, build in json.loads(sys.argv[1]):
        case = hostile_files.CASES[name]
        data = eval(build, vars(hostile_files)) if build else case.build()
        largest = max(largest, len(data))
        start = time.monotonic()
        result = read_file(data, media_type=case.media_type, name=case.filename)
        tokens = TokenCounter('gpt-4o')._count_media(BinaryContent(data=data, media_type=case.media_type))
        reports[key] = {
            'kind': result.kind,
            'manifest': result.manifest,
            'text': getattr(result, 'text', ''),
            'tokens': tokens,
            'seconds': time.monotonic() - start,
        }
        del data, result
    worker_peak = worker_peak_bytes()
    shutdown_workers()
    print(json.dumps({
        'cases': reports,
        'largest': largest,
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the process that started this one
        'self_peak': _worker.peak_resident_bytes_of_self(),
        'worker_peak': worker_peak,
    }))
    """
)


def _run(cases: list[tuple[str, str, str]]) -> dict[str, dict[str, object]]:
    """Build and read cases `(key, case, build expression)` in one fresh process; their reports, once it
    has returned within the timeout and both it and the conversion workers stayed under the bounds."""
    env = {
        **os.environ,
        'PYTHONPATH': os.pathsep.join([str(ROOT / 'src'), str(ROOT / 'tests' / 'reliability')]),
    }
    completed = subprocess.run(
        [sys.executable, '-c', _SCRIPT, json.dumps(cases)],
        capture_output=True,
        timeout=TIMEOUT * len(cases),
        env=env,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr.decode(errors='replace')[-3000:]
    report = json.loads(completed.stdout.decode().strip().splitlines()[-1])
    peaks = {k: report[k] for k in ('largest', 'self_peak', 'worker_peak')}
    assert report['self_peak'] < TEST_PROCESS_BOUND + report['largest'], peaks
    assert report['worker_peak'] < WORKER_BOUND, peaks
    return report['cases']  # type: ignore[no-any-return]


full_size = pytest.mark.skipif(
    not os.environ.get('HOSTILE_FULL_SIZE'),
    reason='full-size case (10-20 s, up to 700 MB): benchmarks/bench_hostile_files.py measures it; '
    'HOSTILE_FULL_SIZE=1 runs it as a test',
)
"""The heaviest cases; the regular set reads each format at a size that still crosses every limit."""

REGULAR = [
    ('docx_10mb', 'docx_bomb_10mb', ''),
    ('docx_30mb', 'docx_bomb_30mb', ''),
    ('docx_100mb', 'docx_bomb_100mb', ''),
    ('pptx_10mb', 'pptx_bomb_10mb', ''),
    ('odt_10mb', 'odt_bomb_10mb', ''),
    ('xlsx_strings_300mb', 'xlsx_shared_strings_300mb', ''),
    ('xlsx_strings_40mb', 'xlsx_shared_strings_300mb', 'xlsx_shared_strings(40 * MB)'),
    ('xlsx_30k_rows', 'xlsx_3m_rows', 'xlsx_rows(30_000)'),
    ('pdf_10k_pages', 'pdf_10k_pages', ''),
    ('text_60mb', 'text_500mb', 'text_plain(60 * MB)'),
    ('csv_one_line', 'csv_48mb_one_line', ''),
]


@pytest.fixture(scope='module')
def reports() -> dict[str, dict[str, object]]:
    """Every regular case read in one process (one interpreter and one worker start for all of them)."""
    return _run(REGULAR)


def _note(report: dict[str, object]) -> str:
    manifest = report['manifest']
    assert isinstance(manifest, str)
    return manifest


@pytest.mark.parametrize(
    ('key', 'says'),
    [
        ('docx_10mb', 'word/document.xml inflates to 11.0 MB'),
        ('docx_30mb', 'possible zip bomb'),
        ('docx_100mb', 'uncompressed > 100.0 MB limit'),
        ('pptx_10mb', 'ppt/slides/slide1.xml inflates'),
    ],
)
def test_office_zip_bombs_are_refused_before_parsing(
    reports: dict[str, dict[str, object]], key: str, says: str
) -> None:
    report = reports[key]
    note = _note(report)
    assert report['kind'] == 'unreadable'
    assert says in note
    assert 'not opened' in note
    assert note.startswith('bomb.')  # the model sees which file, its size and type, and why
    assert ' KB, application/vnd.openxmlformats-officedocument.' in note


def test_odt_zip_bomb_is_listed_and_its_bomb_skipped(reports: dict[str, dict[str, object]]) -> None:
    report = reports['odt_10mb']
    note = _note(report)
    assert report['kind'] == 'text'
    assert 'content.xml: compression ratio' in note
    assert 'possible zip bomb' in note
    assert 'content.xml' in str(report['text'])


def test_xlsx_with_huge_shared_strings_is_refused(reports: dict[str, dict[str, object]]) -> None:
    report = reports['xlsx_strings_300mb']
    note = _note(report)
    assert report['kind'] == 'unreadable'
    assert 'XLSX not opened' in note
    assert '301.0 MB uncompressed' in note


def test_xlsx_shared_strings_over_their_own_limit_are_refused(reports: dict[str, dict[str, object]]) -> None:
    # 40 MB of shared strings in a workbook under the total limit: the shared-strings limit decides.
    report = reports['xlsx_strings_40mb']
    note = _note(report)
    assert 'XLSX not opened' in note
    assert ('shared strings of 40.0 MB > 32.0 MB limit' in note) or ('possible zip bomb' in note)


def test_xlsx_rows_stop_at_the_row_limit(reports: dict[str, dict[str, object]]) -> None:
    report = reports['xlsx_30k_rows']
    note = _note(report)
    assert report['kind'] == 'text'
    assert 'rows shown 30 of 29,999' in note
    assert 'reading stopped at the 10,000-row limit' in str(report['text'])


@full_size
@pytest.mark.slow
def test_xlsx_three_million_rows() -> None:
    report = _run([('rows', 'xlsx_3m_rows', '')])['rows']
    assert 'rows shown 30 of 2,999,999' in _note(report)


def test_pdf_of_ten_thousand_pages_converts_its_first_pages(reports: dict[str, dict[str, object]]) -> None:
    report = reports['pdf_10k_pages']
    note = _note(report)
    assert report['kind'] == 'text'
    assert '10,000 pages' in note
    assert 'pages shown 100 of 10,000' in note
    text = str(report['text'])
    assert 'Page 1' in text
    assert 'Page 101' not in text
    assert report['tokens'] == 1_500 * 10_000  # a raw PDF still costs its pages when it is sent as is


@full_size
@pytest.mark.slow
def test_pdf_of_a_hundred_thousand_pages() -> None:
    report = _run([('pages', 'pdf_100k_pages', '')])['pages']
    assert 'pages shown 100 of 100,000' in _note(report)


def test_text_over_the_file_limit_is_refused_and_never_tokenized(
    reports: dict[str, dict[str, object]],
) -> None:
    report = reports['text_60mb']
    note = _note(report)
    assert report['kind'] == 'unreadable'
    assert 'file too large: 60.0 MB > 50.0 MB limit' in note
    tokens = report['tokens']
    assert isinstance(tokens, int)
    # Counted from samples: about 4.4 characters per token of this text, not 5 GB of tiktoken work.
    assert 60 * MB / 6 < tokens < 60 * MB / 3


@full_size
@pytest.mark.slow
def test_text_of_500_mb() -> None:
    report = _run([('text', 'text_500mb', '')])['text']
    assert 'file too large: 500.0 MB' in _note(report)


def test_csv_on_one_line_is_read_up_to_the_line_cap(reports: dict[str, dict[str, object]]) -> None:
    report = reports['csv_one_line']
    note = _note(report)
    assert report['kind'] == 'text'
    assert 'columns shown 50 of' in note
    assert '1 line longer than 262,144 characters (up to 50,331,648) read only up to that length' in note
    assert str(report['text']).startswith('| alpha | beta | gamma |')


# ---- in-process cases: small files, no subprocess needed -------------------------------------------------


def test_lying_wav_header_is_counted_from_its_data() -> None:
    data = lying_wav()
    tokens = TokenCounter('gpt-4o')._count_media(BinaryContent(data=data, media_type='audio/wav'))
    # 16,340 bytes of 16 kHz 16-bit mono are 0.5 s; the header's byte rate of 1 claimed 4.5 hours.
    assert tokens <= 32
    result = read_file(data, media_type='audio/wav', name='clip.wav')
    assert isinstance(result, FittedAudio)
    assert '0.5 s, 16,000 Hz, mono' in result.manifest


def test_wav_with_an_implausible_sample_rate_is_not_believed() -> None:
    data = bytearray(lying_wav())
    data[24:28] = (1).to_bytes(4, 'little')  # 1 Hz
    tokens = TokenCounter('gpt-4o')._count_media(BinaryContent(data=bytes(data), media_type='audio/wav'))
    assert tokens <= 64  # the size-based fallback: 16 KB at 16 KB/s
    result = read_file(bytes(data), media_type='audio/wav', name='clip.wav')
    assert isinstance(result, (FittedAudio, UnreadableFile))
    assert 'hours' not in result.manifest


@pytest.mark.anyio
async def test_lying_wav_does_not_wipe_the_conversation() -> None:
    """The issue's case: a 27-message conversation with a lying 16 KB WAV went down to 3 messages."""
    history: list[ModelMessage] = []
    for i in range(13):
        history.append(user(f'question {i}: ' + 'details ' * 60))
        history.append(reply(f'answer {i}: ' + 'reasoning ' * 60))
    history.append(
        ModelRequest(
            parts=[
                UserPromptPart(
                    ['What is said in this clip?', BinaryContent(data=lying_wav(), media_type='audio/wav')]
                )
            ]
        )
    )
    assert len(history) == 27
    processor = HistoryProcessor(stages=[SlidingWindow()], policy=ContextPolicy(context_window=32_000))
    out = await processor.process(history)
    assert out == history
    assert not validate_history(out)


def test_svg_is_read_as_a_document() -> None:
    svg = (
        b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
        b'<title>Quarterly revenue</title><text x="1" y="2">Q3: 4.2M</text></svg>'
    )
    result = read_file(svg, media_type='image/svg+xml', name='chart.svg')
    assert isinstance(result, ConvertedDocument)
    assert result.format == 'SVG'
    assert 'Quarterly revenue' in result.text
    assert 'Q3: 4.2M' in result.text
    # sniffed from its content or its name too
    assert read_file(svg, media_type='application/octet-stream').format == 'SVG'  # type: ignore[union-attr]
    assert read_file(svg, name='chart.svg').format == 'SVG'  # type: ignore[union-attr]


def test_svg_external_references_are_never_resolved(tmp_path: Path) -> None:
    secret = tmp_path / 'secret.txt'
    secret.write_text('TOP-SECRET-VALUE')
    svg = (
        f'<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY x SYSTEM "file://{secret}">]>'
        '<svg xmlns="http://www.w3.org/2000/svg"><text>&x;</text></svg>'
    ).encode()
    result = read_file(svg, media_type='image/svg+xml', name='x.svg')
    assert isinstance(result, ConvertedDocument)
    assert 'TOP-SECRET-VALUE' not in result.text
    assert 'unexpanded' in result.manifest or 'unresolved' in result.manifest
    # a declaration placed after 64 KB of comments is caught by the parser, not only by the quick scan
    late = b'<?xml version="1.0"?>' + b'<!--' + b' ' * 70_000 + b'-->' + svg[len(b'<?xml version="1.0"?>') :]
    result = read_file(late, media_type='image/svg+xml', name='late.svg')
    assert isinstance(result, ConvertedDocument)
    assert 'TOP-SECRET-VALUE' not in result.text


def test_svg_is_counted_as_text() -> None:
    svg = b'<svg xmlns="http://www.w3.org/2000/svg">' + b'<text>word</text>' * 100 + b'</svg>'
    counter = TokenCounter('gpt-4o')
    tokens = counter._count_media(BinaryContent(data=svg, media_type='image/svg+xml'))
    assert tokens == counter.count_text(svg.decode())

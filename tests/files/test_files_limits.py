"""The hard limits of document conversion (issue 17): a worker that runs over its time or memory is stopped,
the model is told why, and the next conversion works; every limit is a setting; `data:` URLs decode by their
declared encoding."""

from __future__ import annotations

import io
import zipfile

import pytest

from pydantic_ai_history._compat import decode_data_url
from pydantic_ai_history.files import ConvertedDocument, FileSettings, UnreadableFile, read_file
from pydantic_ai_history.files._budget import check_before_parse
from pydantic_ai_history.readback import read_artifact_text
from pydantic_ai_history.store import MemoryStore

pytestmark = pytest.mark.slow

DOCX = 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'


def _pdf(pages: int) -> bytes:
    from hostile_files import pdf_pages

    return pdf_pages(pages)


def test_a_conversion_over_the_time_limit_is_stopped_and_the_next_one_works() -> None:
    # markitdown walks all 3,000 pages when the page limit allows them: far more than a quarter second.
    slow = FileSettings(conversion_timeout_seconds=0.25, pdf_max_pages=10**6)
    result = read_file(_pdf(3_000), name='long.pdf', settings=slow)
    assert isinstance(result, UnreadableFile)
    assert 'PDF conversion stopped at the 0.25 s time limit; nothing shown' in result.manifest
    assert result.manifest.startswith('long.pdf (')
    after = read_file(_pdf(2), name='short.pdf', settings=FileSettings(conversion_timeout_seconds=60))
    assert isinstance(after, ConvertedDocument)
    assert 'Page 2' in after.text


def test_a_conversion_over_the_memory_limit_is_stopped() -> None:
    # A limit below what the worker's converters alone occupy: the first poll stops it.
    tight = FileSettings(
        conversion_max_memory_bytes=64 * 1024 * 1024, conversion_timeout_seconds=60, pdf_max_pages=10**6
    )
    result = read_file(_pdf(3_000), name='small.pdf', settings=tight)
    assert isinstance(result, UnreadableFile)
    assert 'PDF conversion stopped at the 64.0 MB memory limit; nothing shown' in result.manifest


def test_inline_conversion_applies_the_same_format_limits() -> None:
    inline = FileSettings(conversion_isolation='inline', pdf_max_pages=5)
    result = read_file(_pdf(40), name='forty.pdf', settings=inline)
    assert isinstance(result, ConvertedDocument)
    assert 'pages shown 5 of 40' in result.manifest
    assert 'Page 5' in result.text
    assert 'Page 6' not in result.text
    assert result.text.endswith('[... pages 6-40 not converted (the limit is 5 pages) ...]')


def test_operational_settings_do_not_change_cache_keys() -> None:
    base = FileSettings()
    assert (
        FileSettings(conversion_workers=7, conversion_isolation='inline').fingerprint() == base.fingerprint()
    )
    assert FileSettings(pdf_max_pages=7).fingerprint() != base.fingerprint()


def _zip(members: dict[str, bytes], level: int = 9) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_zip_checks_follow_the_settings() -> None:
    docx = _zip({'[Content_Types].xml': b'<Types/>', 'word/document.xml': b'<w:p/>' * 400_000})
    assert check_before_parse(docx, DOCX, FileSettings()) is not None  # 2.4 MB at ~1000:1
    assert check_before_parse(docx, DOCX, FileSettings(max_compression_ratio=10_000)) is None
    reason = check_before_parse(
        docx, DOCX, FileSettings(max_compression_ratio=10_000, max_uncompressed_bytes=10)
    )
    assert reason is not None
    assert 'uncompressed > 10 B limit' in reason
    many = _zip({f'f{i}.txt': b'x' for i in range(30)})
    reason = check_before_parse(many, 'application/zip', FileSettings(max_archive_entries=20))
    assert reason == '30 archive members (limit 20); possible zip bomb'


def test_zip_archive_with_too_many_members_is_refused_before_its_directory_is_parsed() -> None:
    many = _zip({f'f{i}.txt': b'x' for i in range(30)})
    result = read_file(many, name='many.zip', settings=FileSettings(max_archive_entries=20))
    assert isinstance(result, UnreadableFile)
    assert 'ZIP not opened: 30 archive members (limit 20); possible zip bomb' in result.manifest


def test_csv_rows_stop_at_the_row_limit() -> None:
    data = b'n,double\n' + b''.join(b'%d,%d\n' % (i, 2 * i) for i in range(1, 1_001))
    result = read_file(data, name='n.csv', settings=FileSettings(table_max_rows=100))
    assert isinstance(result, ConvertedDocument)
    assert 'rows shown 30 of 101' in result.manifest
    assert 'rows shown 30 of more than 100; reading stopped at the 100-row limit' in result.text
    assert '| 100 | 200 |' in result.text
    assert '| 101 |' not in result.text


def test_extracted_text_is_capped_before_any_token_count() -> None:
    lines = '\n'.join(f'line {i} ' + 'x' * 50 for i in range(20_000))
    calls: list[int] = []

    def count(text: str) -> int:
        calls.append(len(text))
        return len(text) // 4

    settings = FileSettings(max_extracted_chars=100_000, text_max_lines=10**6, conversion_isolation='inline')
    result = read_file(lines.encode(), name='t.txt', settings=settings, count_tokens=count)
    assert isinstance(result, ConvertedDocument)
    assert max(calls) <= 100_000
    assert 'chars shown 100,000 of' in result.manifest
    assert 'line 0 ' in result.text
    assert 'line 19999 ' in result.text


@pytest.mark.parametrize(
    ('url', 'expected'),
    [
        ('data:text/plain,caf%C3%A9%20au%20lait', (b'caf\xc3\xa9 au lait', 'text/plain')),
        ('data:text/csv;charset=utf-8,a%2Cb%0A1%2C2', (b'a,b\n1,2', 'text/csv')),
        ('data:text/plain;base64,aGVsbG8=', (b'hello', 'text/plain')),
        ('data:TEXT/Plain;charset=UTF-8;BASE64,aGVsbG8=', (b'hello', 'text/plain')),
        ('data:,a%20b', (b'a b', 'application/octet-stream')),
        ('https://example.com/a.txt', None),
    ],
)
def test_data_urls_decode_by_their_declared_encoding(url: str, expected: tuple[bytes, str] | None) -> None:
    assert decode_data_url(url) == expected


@pytest.mark.anyio
async def test_svg_is_read_back_as_text() -> None:
    store = MemoryStore()
    svg = b'<svg xmlns="http://www.w3.org/2000/svg"><title>Org chart</title><text>CEO</text></svg>'
    await store.put('art_svg', svg, media_type='image/svg+xml', source='chart.svg')
    text = await read_artifact_text(store, 'art_svg')
    assert 'not a document' not in text
    assert 'Org chart' in text
    assert 'CEO' in text

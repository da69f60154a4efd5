"""`read_file` never raises: hostile, broken, empty, oversized and unknown inputs get a clear reason."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pydantic_ai_history.files import (
    ConvertedDocument,
    FileSettings,
    UnreadableFile,
    read_file,
    read_path,
    sniff_media_type,
)


def test_random_bytes(documents: Path) -> None:
    result = read_path(documents / 'random.bin')
    assert isinstance(result, UnreadableFile)
    assert result.reason == 'unsupported file type (application/octet-stream)'
    assert result.manifest == f'random.bin (1 KB, application/octet-stream) -- not shown: {result.reason}'


def test_zero_bytes() -> None:
    result = read_file(b'', name='empty.pdf')
    assert isinstance(result, UnreadableFile)
    assert result.reason == 'empty file (0 bytes)'


def test_corrupt_pdf(documents: Path) -> None:
    data = (documents / 'test.pdf').read_bytes()[:20_000]
    result = read_file(data, name='broken.pdf')
    assert isinstance(result, UnreadableFile), result
    assert result.reason.startswith('PDF could not be read: ')


def test_random_bytes_declared_as_office() -> None:
    result = read_file(
        bytes(range(256)) * 4,
        media_type='application/vnd.openxmlformats-officedocument.wordprocessingml.document',
    )
    assert isinstance(result, UnreadableFile)
    assert result.reason.startswith('DOCX could not be read: ')


def test_oversized_in_memory_is_not_read() -> None:
    result = read_file(b'x' * 2_000, name='big.txt', settings=FileSettings(max_file_bytes=1_000))
    assert isinstance(result, UnreadableFile)
    assert result.reason == 'file too large: 2 KB > 1000 B limit; not converted'


def test_oversized_sparse_file_on_disk(tmp_path: Path) -> None:
    path = tmp_path / 'huge.bin'
    with path.open('wb') as f:
        f.truncate(100 * 1024 * 1024)  # sparse: no 100 MB written
    result = read_path(path)
    assert isinstance(result, UnreadableFile)
    assert result.reason == 'file too large: 100.0 MB > 50.0 MB limit; not converted'
    assert result.size_bytes == 100 * 1024 * 1024


def test_missing_path(tmp_path: Path) -> None:
    result = read_path(tmp_path / 'nope.txt')
    assert isinstance(result, UnreadableFile)
    assert result.reason.startswith('could not open file')


def test_unknown_declared_type() -> None:
    result = read_file(b'\x00\x01\x02binary\xff' * 50, media_type='application/x-made-up')
    assert isinstance(result, UnreadableFile)
    assert result.reason == 'unsupported file type (application/x-made-up)'


def test_sniffing() -> None:
    assert sniff_media_type(b'%PDF-1.7\n...', None, None) == 'application/pdf'
    assert sniff_media_type(b'\x89PNG\r\n\x1a\n' + bytes(20), 'a.jpg', 'image/jpeg') == 'image/png'
    assert sniff_media_type(b'a,b\n1,2\n', 'x.csv', 'text/plain; charset=utf-8') == 'text/csv'
    assert sniff_media_type(b'{"a": 1}', None, None) == 'application/json'
    assert sniff_media_type(b'<!DOCTYPE html><html></html>', None, None) == 'text/html'
    assert sniff_media_type(b'hello', None, None) == 'text/plain'
    assert sniff_media_type(bytes(range(256)), 'x.png', None) == 'application/octet-stream'


def test_text_with_declared_charset_in_type() -> None:
    result = read_file('héllo wörld'.encode(), media_type='text/plain; charset=utf-8')
    assert isinstance(result, ConvertedDocument)
    assert result.text == 'héllo wörld'


MEDIA_TYPES = st.sampled_from(
    [
        None,
        'application/pdf',
        'application/zip',
        'text/csv',
        'application/json',
        'application/xml',
        'image/png',
        'image/jpeg',
        'image/gif',
        'audio/wav',
        'application/vnd.ms-excel',
        'application/vnd.ms-outlook',
        'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
        'application/epub+zip',
        'text/html',
        'application/rtf',
        'application/x-ipynb+json',
        'application/jsonl',
        'application/rss+xml',
        'text/x-python',
        'application/octet-stream',
        'x/y',
        '',
    ]
)
PREFIXES = st.sampled_from(
    [
        b'',
        b'%PDF-1.4\n',
        b'PK\x03\x04',
        b'\x89PNG\r\n\x1a\n',
        b'GIF89a',
        b'RIFF\x00\x00\x00\x00WAVE',
        b'\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1',
        b'{\\rtf1 ',
        b'{"a": [',
        b'<?xml version="1.0"?><',
        b'\xff\xd8\xff',
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=PREFIXES,
    body=st.binary(max_size=2_000),
    media_type=MEDIA_TYPES,
    name=st.one_of(st.none(), st.sampled_from(['a.pdf', 'b.csv', 'c.xlsx', 'd.msg', 'e', 'f.json', 'g.wav'])),
)
def test_never_raises(prefix: bytes, body: bytes, media_type: str | None, name: str | None) -> None:
    result = read_file(prefix + body, media_type=media_type, name=name, settings=FileSettings(max_tokens=200))
    assert result.kind in ('text', 'image', 'audio', 'unreadable')
    assert '\n' not in result.manifest
    if isinstance(result, UnreadableFile):
        assert result.reason

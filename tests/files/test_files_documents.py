"""Every real document in the shared fixtures converts, with known content and truncation info."""

from __future__ import annotations

from pathlib import Path

import pytest

from _fixtures import need
from pydantic_ai_history.files import ConvertedDocument, FileSettings, Truncation, read_file, read_path
from pydantic_ai_history.files._read import extract

UNCUT = FileSettings(max_tokens=10_000_000)

# Strings markitdown's own tests expect in these files (packages/markitdown/tests/_test_vectors.py).
KNOWN_CONTENT = {
    'test.pdf': ['While there is contemporaneous exploration of multi-agent approaches'],
    'test.pptx': ['This phrase of the caption is Human-written.', '2cdda5c8-e50e-4db4-b5f0-9722a649f455'],
    'test.docx': [
        '314b0a30-5b04-470b-b9f7-eed2c2bec74a',
        '# Abstract',
        'AutoGen: Enabling Next-Gen LLM Applications',
    ],
    'test_with_comment.docx': ['314b0a30-5b04-470b-b9f7-eed2c2bec74a', '# Abstract'],
    'equations.docx': ['$m=1$'],
    'test.xlsx': [
        '## 09060124-b5e7-4717-9d07-3c046eb',
        '6ff4173b-42a5-4784-9b19-f49caff4d93d',
        '| Alpha | Beta |',
    ],
    'test.xls': ['## 09060124-b5e7-4717-9d07-3c046eb', '6ff4173b-42a5-4784-9b19-f49caff4d93d'],
    'test.epub': ['**Title:** Test EPUB Document', '**Authors:** Test Author', 'A test EPUB document'],
    'test_notebook.ipynb': ['# Test Notebook', 'print("markitdown")', '## Code Cell Below'],
    'test_outlook_msg.msg': ['**From:** test.sender@example.com', '**Subject:** Test Email Message'],
    'test.rtf': ['This is a Sample RTF File', 'correctly convert RTF files'],
    'test_blog.html': [
        'Large language models (LLMs) are powerful tools that can generate natural language texts'
    ],
    'test_wikipedia.html': ['Microsoft entered the operating system (OS) business in 1980'],
    'test_serp.html': [
        'Microsoft Corporation is **an American multinational corporation and technology company'
    ],
    'test_rss.xml': ['# The Official Microsoft Blog', '## Ignite 2024: Why nearly 70% of the Fortune 500'],
    'test_files.zip': ['## File: test.docx', '314b0a30-5b04-470b-b9f7-eed2c2bec74a', '## File: test.xlsx'],
    'test.json': [
        '"5b64c88c-b3c3-4510-bcb8-da0b200602d8": "uuid_key"',
        '9700dc99-6685-40b4-9a3a-5e406dcb37f3',
    ],
    'dummy.pdf': ['Dummy PDF file'],
}
EXPECTED_FORMATS = {
    'test.pdf': 'PDF',
    'test.pptx': 'PPTX',
    'test.docx': 'DOCX',
    'test.xlsx': 'XLSX',
    'test.xls': 'XLS',
    'test.epub': 'EPUB',
    'test_rss.xml': 'RSS',
    'test_files.zip': 'ZIP',
    'test.rtf': 'RTF',
    'test.json': 'JSON',
    'test_wikipedia.html': 'HTML',
    'test_mskanji.csv': 'CSV',
}


@pytest.mark.parametrize('filename', sorted(KNOWN_CONTENT))
def test_known_content(documents: Path, filename: str) -> None:
    result = read_path(need(documents / filename), settings=UNCUT)
    assert isinstance(result, ConvertedDocument), result
    for expected in KNOWN_CONTENT[filename]:
        assert expected in result.text
    assert result.truncations == () or all(t.unit != 'tokens' for t in result.truncations)
    if filename in EXPECTED_FORMATS:
        assert result.format == EXPECTED_FORMATS[filename]
    assert '\n' not in result.manifest
    assert result.manifest.startswith(filename)


@pytest.mark.parametrize(
    'filename', ['test.docx', 'test.pptx', 'test.xlsx', 'test.epub', 'test.pdf', 'test_outlook_msg.msg']
)
def test_format_sniffed_without_name_or_type(documents: Path, filename: str) -> None:
    """Magic bytes and container contents decide, so a nameless upload still converts right."""
    result = read_file(need(documents / filename).read_bytes(), settings=UNCUT)
    assert isinstance(result, ConvertedDocument), (filename, result)
    assert result.format == EXPECTED_FORMATS.get(filename, result.format)
    assert KNOWN_CONTENT.get(filename, [''])[0] in result.text


@pytest.mark.parametrize(
    'expected',
    [
        'MEDRPT-2024-PAT-3847_medical_report_scan',
        'RECEIPT-2024-TXN-98765_retail_purchase',
        'REPAIR-2022-INV-001_multipage',
        'SPARSE-2024-INV-1234_borderless_table',
        'movie-theater-booking-2024',
        'test',
    ],
)
@pytest.mark.slow
def test_pdf_markdown_matches_markitdown_expected(documents: Path, expected: str) -> None:
    """Before any truncation the PDF markdown is exactly markitdown's own expected output."""
    pdf = documents / f'{expected}.pdf'
    extraction = extract(pdf.read_bytes(), 'application/pdf', pdf.name, UNCUT)
    assert not isinstance(extraction, str), extraction
    assert extraction.text == (documents / 'expected' / f'{expected}.md').read_text(encoding='utf-8')
    # And through the public API, when nothing is cut, the text is unchanged.
    result = read_path(pdf, settings=UNCUT)
    assert isinstance(result, ConvertedDocument)
    assert result.text == extraction.text


def test_scanned_pdf_has_note_with_page_count(documents: Path) -> None:
    result = read_path(documents / 'MEDRPT-2024-PAT-3847_medical_report_scan.pdf')
    assert isinstance(result, ConvertedDocument)
    assert result.text == ''
    assert result.pages == 3
    assert result.note is not None
    assert result.note.startswith('no extractable text; 3 pages')
    assert 'no extractable text' in result.manifest


def test_multipage_pdf_pages(documents: Path) -> None:
    result = read_path(documents / 'REPAIR-2022-INV-001_multipage.pdf')
    assert isinstance(result, ConvertedDocument)
    assert result.pages == 3
    assert '3 pages' in result.manifest


@pytest.mark.parametrize('filename', ['test_serp.html', 'test_wikipedia.html', 'test_rss.xml'])
def test_large_html_is_token_cut_keeping_head_and_tail(documents: Path, filename: str) -> None:
    full = extract(
        need(documents / filename).read_bytes(),
        'text/html' if filename.endswith('html') else 'application/rss+xml',
        filename,
        UNCUT,
    )
    assert not isinstance(full, str)
    result = read_path(documents / filename)
    assert isinstance(result, ConvertedDocument)
    tokens = [t for t in result.truncations if t.unit == 'tokens']
    assert len(tokens) == 1
    assert tokens[0].shown < tokens[0].total == result.full_text_tokens
    assert result.shown_tokens == tokens[0].shown <= 5_000
    assert 'tokens omitted ...]' in result.text
    head, tail = result.text.split('tokens omitted ...]')
    assert full.text.startswith(head.rsplit('\n\n[...', 1)[0][:2000])
    assert full.text.rstrip().endswith(tail.strip()[-500:])
    assert f'{tokens[0].shown:,} of {tokens[0].total:,} tokens shown' in result.manifest


@pytest.mark.slow
def test_injected_token_counter_is_used(documents: Path) -> None:
    """A caller's tokenizer decides the cut: here one token per word.

    Only what is shown is tokenized (issue 17): the text is far over 12 characters per allowed token, so
    its full count is estimated from its length at the rate measured on what is shown.
    """
    calls: list[int] = []

    def count(text: str) -> int:
        calls.append(len(text))
        return len(text.split())

    result = read_path(need(documents / 'test_wikipedia.html'), count_tokens=count)
    assert isinstance(result, ConvertedDocument)
    full = extract((documents / 'test_wikipedia.html').read_bytes(), 'text/html', None, UNCUT)
    assert not isinstance(full, str)
    assert max(calls) < len(full.text) // 2, 'the whole text was tokenized'
    assert result.full_text_tokens is not None
    exact = count(full.text)
    assert 0.5 * exact < result.full_text_tokens < 2 * exact
    assert count(result.text) <= 5_000


def test_cp932_csv_decodes_to_japanese(documents: Path) -> None:
    # The bytes are Shift_JIS/CP932 for 名前,年齢,住所 / 佐藤太郎,30,東京 / ...; 髙 exists only in CP932.
    result = read_path(documents / 'test_mskanji.csv')
    assert isinstance(result, ConvertedDocument)
    lines = result.text.splitlines()
    assert lines[0] == '| 名前 | 年齢 | 住所 |'
    assert '| 佐藤太郎 | 30 | 東京 |' in lines
    assert '| 髙橋淳 | 35 | 名古屋 |' in lines


def test_json_round_trip(documents: Path) -> None:
    result = read_path(need(documents / 'test_wikipedia.html'))
    assert isinstance(result, ConvertedDocument)
    assert ConvertedDocument.from_json(result.to_json()) == result
    assert isinstance(result.truncations[0], Truncation)


def test_fingerprint_is_stable_and_sensitive() -> None:
    assert FileSettings().fingerprint() == FileSettings().fingerprint()
    assert FileSettings(max_tokens=1).fingerprint() != FileSettings().fingerprint()
    assert 'table_head_rows=20' in FileSettings().fingerprint()

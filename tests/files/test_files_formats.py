"""Format-aware truncation: tables, text, structured data, ZIP guards."""

from __future__ import annotations

import csv
import io
import json
import zipfile

from pydantic_ai_history.files import ConvertedDocument, FileSettings, Truncation, read_file

BIG = FileSettings(max_tokens=1_000_000)


def _csv(rows: list[list[str]]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue().encode()


def test_large_csv_shows_head_and_real_tail() -> None:
    rows = [['id', 'name', 'value']] + [[str(i), f'row-{i}', str(i * 7)] for i in range(1, 10_001)]
    result = read_file(_csv(rows), name='big.csv', settings=BIG)
    assert isinstance(result, ConvertedDocument)
    assert Truncation('rows', 30, 10_000) in result.truncations
    lines = result.text.splitlines()
    assert lines[0] == '| id | name | value |'
    data = [line for line in lines[2:] if line.startswith('| ') and 'rows omitted' not in line]
    assert len(data) == 30
    assert data[0] == '| 1 | row-1 | 7 |'
    assert data[19] == '| 20 | row-20 | 140 |'
    assert data[20] == '| 9991 | row-9991 | 69937 |'
    assert data[-1] == '| 10000 | row-10000 | 70000 |'
    assert '… 9,970 rows omitted …' in result.text
    assert 'rows shown 30 of 10,000' in result.text
    assert 'rows shown 30 of 10,000' in result.manifest


def test_csv_quoted_multiline_cell_stays_in_its_row() -> None:
    data = b'name,comment\nalice,"first line\nsecond, with comma\nthird"\nbob,plain\n'
    result = read_file(data, name='c.csv')
    assert isinstance(result, ConvertedDocument)
    assert result.text.splitlines() == [
        '| name | comment |',
        '| --- | --- |',
        '| alice | first line<br>second, with comma<br>third |',
        '| bob | plain |',
    ]
    assert result.truncations == ()


def test_csv_columns_and_cells_are_capped() -> None:
    rows = [[f'c{i}' for i in range(80)], ['x' * 2_000] + ['1'] * 79]
    result = read_file(_csv(rows), name='wide.csv', settings=BIG)
    assert isinstance(result, ConvertedDocument)
    assert Truncation('columns', 50, 80) in result.truncations
    assert result.text.splitlines()[0].count('|') == 51
    assert 'x' * 500 + '… [1,500 more chars]' in result.text
    assert 'columns shown 50 of 80' in result.manifest


def test_tsv_by_extension() -> None:
    result = read_file(b'a\tb\n1\t2\n', name='t.tsv')
    assert isinstance(result, ConvertedDocument)
    assert result.format == 'TSV'
    assert '| 1 | 2 |' in result.text


def test_text_lines_and_line_length() -> None:
    text = '\n'.join(f'line {i}' for i in range(1_000)) + '\n' + 'y' * 5_000
    result = read_file(text.encode(), name='notes.txt', settings=BIG)
    assert isinstance(result, ConvertedDocument)
    assert Truncation('lines', 200, 1_001) in result.truncations
    assert result.text.splitlines()[199] == 'line 199'
    assert '801 more lines' in result.text
    long = read_file(('z' * 5_000).encode(), name='one.txt')
    assert isinstance(long, ConvertedDocument)
    assert long.text == 'z' * 1_000 + '… [4,000 more chars]'
    assert Truncation('chars', 1_000, 5_000) in long.truncations


def test_code_is_fenced() -> None:
    result = read_file(b'def f():\n    return 1\n', name='m.py')
    assert isinstance(result, ConvertedDocument)
    assert result.text == '```python\ndef f():\n    return 1\n```'


def test_json_structural_truncation() -> None:
    value = {
        'items': list(range(1_000)),
        'wide': {f'k{i}': i for i in range(120)},
        'long': 's' * 2_000,
        'deep': {'a': {'b': {'c': {'d': {'e': {'f': 1}}}}}},
    }
    result = read_file(json.dumps(value).encode(), name='data.json', settings=BIG)
    assert isinstance(result, ConvertedDocument)
    body = json.loads(result.text.removeprefix('```json\n').removesuffix('\n```'))
    assert body['items'][:50] == list(range(50))
    assert body['items'][50] == '… 950 more items'
    assert len(body['wide']) == 51
    assert body['wide']['…'] == '70 more keys'
    assert body['long'] == 's' * 500 + '… [1,500 more chars]'
    assert body['deep']['a']['b']['c'] == {'d': '{… 1 keys}'}
    (items,) = [t for t in result.truncations if t.unit == 'items']
    assert items.shown < items.total
    assert result.note is not None
    assert 'list items' in result.note


def test_jsonl() -> None:
    data = '\n'.join(json.dumps({'i': i}) for i in range(500)).encode()
    result = read_file(data, name='log.jsonl')
    assert isinstance(result, ConvertedDocument)
    assert result.text.splitlines()[1] == '{"i": 0}'
    assert Truncation('lines', 50, 500) in result.truncations
    assert '450 more lines' in result.text


def test_deeply_nested_json_does_not_blow_the_stack() -> None:
    data = b'[' * 10_000 + b']' * 10_000
    result = read_file(data, name='deep.json')
    assert isinstance(result, ConvertedDocument)
    assert result.note is not None
    assert 'nested too deeply' in result.note


def test_xml_structural_truncation() -> None:
    xml = '<root>' + ''.join(f'<item id="{i}">v{i}</item>' for i in range(200)) + '</root>'
    result = read_file(xml.encode(), name='data.xml')
    assert isinstance(result, ConvertedDocument)
    assert result.format == 'XML'
    assert '<item id="49">v49</item>' in result.text
    assert 'id="50"' not in result.text
    assert '<!-- … 150 more elements -->' in result.text


def test_xml_with_entities_is_not_expanded() -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]><l>&b;</l>'
    )
    result = read_file(bomb, name='bomb.xml')
    assert isinstance(result, ConvertedDocument)
    assert result.note is not None
    assert 'entities' in result.note


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_zip_bomb_entries_are_skipped() -> None:
    # 200 MB of zeros compresses to about 200 KB: over the ratio guard and over a 50 MB total.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_DEFLATED) as archive:
        archive.writestr('readme.txt', b'hello from inside')
        with archive.open('zeros.txt', 'w', force_zip64=True) as entry:
            chunk = b'\0' * (1024 * 1024)
            for _ in range(200):
                entry.write(chunk)
    result = read_file(buffer.getvalue(), name='bomb.zip')
    assert isinstance(result, ConvertedDocument)
    assert 'hello from inside' in result.text
    assert 'zeros.txt' in result.text
    assert 'possible zip bomb' in result.text
    # the note says why, not only how many (issue 17: the model gets the reason)
    assert result.note == (
        '1 of 2 entries not converted (zeros.txt: 200.0 MB uncompressed exceeds the remaining limit; '
        'possible zip bomb)'
    )


def test_zip_small_total_limit() -> None:
    data = _zip({'a.txt': b'a' * 5_000, 'b.txt': b'b' * 5_000})
    result = read_file(data, name='two.zip', settings=FileSettings(max_file_bytes=8_000))
    assert isinstance(result, ConvertedDocument)
    assert '## File: a.txt' in result.text
    assert '## File: b.txt' not in result.text
    assert 'exceeds the remaining limit' in result.text

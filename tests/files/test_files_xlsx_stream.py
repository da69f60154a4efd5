"""XLSX sheets streamed from their XML: the same values openpyxl reads, the size counted when the sheet does
not declare it, and reading within the time limit."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from hostile_files import xlsx_export

from pydantic_ai_history.files import FileSettings
from pydantic_ai_history.files._xlsx import read_sheets

openpyxl = pytest.importorskip('openpyxl')


def _workbook() -> bytes:
    """A small workbook written by openpyxl: shared strings, dates, times, booleans, floats, two sheets."""
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = 'Orders'
    sheet.append(['id', 'customer', 'placed', 'total', 'paid', 'note'])
    sheet.append([1, 'Josefine Brandt', dt.datetime(2024, 5, 5, 12, 30), 9412.5, True, None])
    sheet.append([2, 'Ada', dt.date(2023, 7, 16), 1e-5, False, 'rush'])
    sheet['G3'] = 'wide'
    second = book.create_sheet('Empty')
    del second
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_values_are_read_as_openpyxl_reads_them() -> None:
    data = _workbook()
    [orders, empty] = read_sheets(data, FileSettings())
    assert orders.title == 'Orders'
    assert empty.table is None
    assert orders.table is not None
    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    expected = [
        ['' if v is None else str(v) for v in row] for row in book['Orders'].iter_rows(values_only=True)
    ]
    table = orders.table
    got = [table.header, *table.head]
    assert [[c for c in row if c] for row in got] == [[c for c in row if c] for row in expected]
    assert table.total_columns == 7
    assert table.complete


def test_a_sheet_without_its_size_is_counted() -> None:
    data = xlsx_export(30_000)
    [sheet] = read_sheets(data, FileSettings(xlsx_max_rows=1_000))
    table = sheet.table
    assert table is not None
    assert not table.complete
    assert table.total_rows == 1_000
    assert table.declared_rows == 30_000
    assert table.counted_all
    assert table.head[0] == ['1', 'SKU-00001', '1']


def test_reading_stops_at_the_time_limit_with_the_rows_read_and_counted() -> None:
    data = xlsx_export(200_000)
    [sheet] = read_sheets(data, FileSettings(conversion_timeout_seconds=0.05, xlsx_max_rows=10**9))
    table = sheet.table
    assert table is not None
    assert not table.complete
    assert table.stop_reason == 'the time limit'
    assert 0 < table.total_rows < 200_000
    assert table.head[0] == ['1', 'SKU-00001', '1']
    assert table.declared_rows is not None
    assert table.declared_rows >= table.total_rows


@pytest.mark.slow
def test_the_preview_of_a_sheet_cut_at_the_row_limit_says_where_reading_stopped() -> None:
    """The tail shown is where reading stopped, not the sheet's end: it used to follow "… 4,970 rows
    omitted …" as if it were the sheet's last rows."""
    from pydantic_ai_history.files import ConvertedDocument, read_file

    book = openpyxl.Workbook(write_only=True)
    sheet = book.create_sheet('Rows')
    sheet.append(['row', 'name'])
    for i in range(1, 5_001):
        sheet.append([i, f'item-{i}'])
    out = io.BytesIO()
    book.save(out)
    result = read_file(out.getvalue(), name='big.xlsx', settings=FileSettings(xlsx_max_rows=1_000))
    assert isinstance(result, ConvertedDocument)
    rows = [line for line in result.text.splitlines() if line.startswith('| ')]
    assert rows[-1] == '| … reading stopped here: 4,000 more rows not read … |  |'
    assert (
        rows[-2] == '| 1000 | item-1000 |'
    )  # the last row read, followed by the note, never shown as the end
    assert rows[-12] == '| … rows 991 to 1,000, the last read before reading stopped: … |  |'
    assert rows[-13] == '| … 970 rows omitted … |  |'  # omitted among the rows read, not 4,970
    assert '4,970' not in result.text
    assert 'rows shown 30 of 5,000' in result.text

"""Tables (CSV, TSV, XLS; XLSX in `_xlsx`): header, head and tail rows, capped columns and cells."""

from __future__ import annotations

import csv
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._base import Extraction, FileInfo, Reader, ReaderError
from ._results import Truncation
from ._settings import FileSettings
from ._text import cut_lines, decode_text, shorten

# Some CSVs hold whole documents in a cell; the csv module's 128 KiB default would reject them.
csv.field_size_limit(64 * 1024 * 1024)


@dataclass(frozen=True)
class Table:
    """A table read in one pass: only the header, head and tail rows are kept."""

    header: list[str]
    head: list[list[str]]
    tail: list[list[str]]
    total_rows: int
    """Data rows, excluding the header (those read, when `complete` is false)."""
    total_columns: int
    complete: bool = True
    """False when reading stopped at `table_max_rows` (or a time limit): the tail rows are then the last ones
    read, which the rendering says, never the table's last rows."""
    declared_rows: int | None = None
    """The row count the file itself declares (an XLSX sheet's dimension) or that was counted without
    reading the rows, when reading stopped."""
    counted_all: bool = True
    """False when `declared_rows` is a lower bound: counting stopped at the time limit."""
    stop_reason: str | None = None
    """What stopped reading, when it stopped early (default: the row limit)."""


def collect_table(
    rows: Iterable[Sequence[Any]], settings: FileSettings, max_rows: int | None = None
) -> Table | None:
    """Stream `rows`, keeping the first as header, `table_head_rows` after it and a deque of the tail.

    Stops after `max_rows` (default `table_max_rows`) data rows: the rest is never read.
    """
    max_rows = settings.table_max_rows if max_rows is None else max_rows
    header: list[str] | None = None
    head: list[list[str]] = []
    tail: deque[list[str]] = deque(maxlen=max(settings.table_tail_rows, 0))
    total = 0
    columns = 0
    for raw in rows:
        # Cap columns while streaming so a 10,000-column row costs no more than a 50-column one.
        row = ['' if value is None else str(value) for value in raw[: settings.table_max_columns]]
        columns = max(columns, len(raw))
        if header is None:
            header = row
            continue
        if total >= max_rows:
            return Table(header, head, list(tail), total, columns, complete=False)
        total += 1
        if len(head) < settings.table_head_rows:
            head.append(row)
        elif settings.table_tail_rows > 0:
            tail.append(row)
    if header is None:
        return None
    return Table(header, head, list(tail), total, columns)


def _format_cell(value: str, max_chars: int) -> str:
    value = shorten(value, max_chars)
    # Line breaks become <br> so a multi-line cell stays in its row.
    return value.replace('\\', '\\\\').replace('|', '\\|').replace('\r\n', '<br>').replace('\n', '<br>')


def render_table(table: Table, settings: FileSettings) -> tuple[str, tuple[Truncation, ...]]:
    """Render as a markdown table with a 'rows shown x of y' line when anything was left out."""
    width = max(min(table.total_columns, settings.table_max_columns), 1)

    def line(row: list[str]) -> str:
        cells = [_format_cell(c, settings.table_max_cell_chars) for c in row] + [''] * (width - len(row))
        return '| ' + ' | '.join(cells[:width]) + ' |'

    def note(text: str) -> str:
        return '| ' + ' | '.join([text] + [''] * (width - 1)) + ' |'

    lines = [line(table.header), '| ' + ' | '.join(['---'] * width) + ' |']
    lines.extend(line(row) for row in table.head)
    shown_rows = len(table.head) + len(table.tail)
    # An incomplete table has at least one row more than was read, and maybe the count it declares.
    total_rows = table.total_rows if table.complete else max(table.declared_rows or 0, table.total_rows + 1)
    # rows left out between the head and the tail: of the table, or of the rows read when reading stopped
    between = table.total_rows - shown_rows
    if between > 0:
        lines.append(note(f'… {between:,} rows omitted …'))
    if not table.complete and table.tail:
        first = table.total_rows - len(table.tail) + 1
        lines.append(
            note(f'… rows {first:,} to {table.total_rows:,}, the last read before reading stopped: …')
        )
    lines.extend(line(row) for row in table.tail)
    if not table.complete:
        lines.append(note(f'… reading stopped here: {_unread(table, total_rows)} not read …'))

    truncations: list[Truncation] = []
    summary: list[str] = []
    if not table.complete:
        truncations.append(Truncation('rows', shown_rows, total_rows))
        if not table.declared_rows:
            of = f'more than {table.total_rows:,}'
        else:
            of = f'{total_rows:,}' if table.counted_all else f'at least {total_rows:,} counted'
        limit = table.stop_reason or f'the {table.total_rows:,}-row limit'
        summary.append(
            f'rows shown {shown_rows:,} of {of}; reading stopped at {limit} after {table.total_rows:,} rows, '
            'so the last rows shown are not the last of the table'
        )
    elif table.total_rows > shown_rows:
        truncations.append(Truncation('rows', shown_rows, table.total_rows))
        summary.append(f'rows shown {shown_rows:,} of {table.total_rows:,}')
    if table.total_columns > width:
        truncations.append(Truncation('columns', width, table.total_columns))
        summary.append(f'columns shown {width:,} of {table.total_columns:,}')
    if summary:
        lines.append('')
        lines.append(f'({", ".join(summary)})')
    return '\n'.join(lines), tuple(truncations)


def _unread(table: Table, total_rows: int) -> str:
    """The rows of an incomplete table after those read, as far as they are known."""
    if not table.declared_rows:
        return 'more rows'
    unread = total_rows - table.total_rows
    rows = f'{unread:,} more row{"s" if unread != 1 else ""}'
    return rows if table.counted_all else f'at least {rows}'


def _dialect(sample: str, info: FileInfo) -> type[csv.Dialect] | csv.Dialect:
    if info.media_type == 'text/tab-separated-values' or info.extension in ('.tsv', '.tab'):
        return csv.excel_tab
    try:
        return csv.Sniffer().sniff(sample, delimiters=',;\t|')
    except csv.Error:
        return csv.excel


class CsvReader(Reader):
    """CSV and TSV, parsed with the `csv` module so quoted multi-line cells stay intact."""

    format = 'CSV'
    media_types = ('text/csv', 'application/csv', 'text/tab-separated-values')
    extensions = ('.csv', '.tsv', '.tab')

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        text = decode_text(data)
        dialect = _dialect(text[:16384], info)
        fmt = 'TSV' if dialect is csv.excel_tab else 'CSV'
        cut: list[int] = []
        try:
            table = collect_table(
                csv.reader(_capped_lines(text, _line_cap(settings), cut), dialect), settings
            )
        except csv.Error as e:
            lines, truncations = cut_lines(text, settings)
            return Extraction(
                lines, truncations, note=f'not read as a table ({e}); shown as text', format=fmt
            )
        note = None
        if cut:
            lines_cut = f'{len(cut):,} line{"s" if len(cut) != 1 else ""}'
            note = (
                f'{lines_cut} longer than {_line_cap(settings):,} characters (up to {max(cut):,}) '
                'read only up to that length'
            )
        if table is None:
            return Extraction('', note=note or 'empty table', format=fmt)
        markdown, truncations = render_table(table, settings)
        return Extraction(markdown, truncations, note=note, format=fmt)


def _line_cap(settings: FileSettings) -> int:
    """Characters of one physical line fed to the CSV parser: far more than any shown row needs."""
    return max(256 * 1024, settings.table_max_columns * (settings.table_max_cell_chars + 3) * 4)


def _capped_lines(text: str, max_chars: int, cut: list[int]) -> Iterator[str]:
    """The lines of `text`, each cut to `max_chars` (lengths of cut ones go to `cut`).

    Slices, not a `StringIO` (a copy at four bytes a character): a 48 MB line costs only `max_chars`.
    """
    newline = '\n' if '\n' in text[:65536] or '\r' not in text[:65536] else '\r'
    start, size = 0, len(text)
    while start < size:
        end = text.find(newline, start)
        end = size if end < 0 else end + 1
        if end - start > max_chars:
            cut.append(end - start)
            yield text[start : start + max_chars] + newline
        else:
            yield text[start:end]
        start = end


def merge_truncations(truncations: list[Truncation]) -> tuple[Truncation, ...]:
    """Sum per-sheet truncations by unit, so the document reports one 'rows shown x of y'."""
    merged: dict[str, tuple[int, int]] = {}
    for t in truncations:
        shown, total = merged.get(t.unit, (0, 0))
        merged[t.unit] = (shown + t.shown, total + t.total)
    return tuple(Truncation(unit, shown, total) for unit, (shown, total) in merged.items())


def truncate_markdown_tables(markdown: str, settings: FileSettings) -> tuple[str, tuple[Truncation, ...]]:
    """Apply row and column limits to each pipe table in markdown (as markitdown renders XLS sheets)."""
    out: list[str] = []
    truncations: list[Truncation] = []
    block: list[str] = []

    def flush() -> None:
        if len(block) >= 2 and set(block[1].replace('|', '').replace(' ', '')) <= set('-:'):
            # Cells were escaped by the renderer; unescaped so render_table escapes them once, not twice.
            rows = [
                [c.strip().replace('\\|', '|') for c in row.strip().strip('|').split(' | ')] for row in block
            ]
            del rows[1]
            table = collect_table(rows, settings)
            if table is not None:
                markdown_table, table_truncations = render_table(table, settings)
                out.append(markdown_table)
                truncations.extend(table_truncations)
        else:
            out.extend(block)
        block.clear()

    for line in markdown.splitlines():
        if line.startswith('|'):
            block.append(line)
            continue
        flush()
        out.append(line)
    flush()
    return '\n'.join(out), merge_truncations(truncations)


class XlsReader(Reader):
    """Excel 97-2003 workbooks: markitdown renders each sheet (via xlrd), then rows are cut per sheet.

    The whole sheet passes through memory here; the format caps sheets at 65,536 rows, which bounds it.
    """

    format = 'XLS'
    media_types = ('application/vnd.ms-excel',)
    extensions = ('.xls',)

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        from ._markitdown import convert_with

        markdown = convert_with('XlsConverter', data, info)
        text, truncations = truncate_markdown_tables(markdown, settings)
        sheets = sum(1 for line in text.splitlines() if line.startswith('## '))
        if not text.strip():
            raise ReaderError('no sheets')
        return Extraction(text, truncations, pages=sheets or None)

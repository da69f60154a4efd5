"""XLSX sheets streamed row by row, within a time limit, straight from the workbook's XML.

openpyxl's read-only mode parses a whole sheet whose XML does not declare its size before the first row
(250 s for a 3-million-row workbook, long past any conversion limit). Here each sheet's XML is parsed
incrementally (defusedxml), only the rows shown are kept, reading stops at the row or time limit, and the
rest is counted from the raw XML while time remains. Shared strings are parsed only as far as the rows
shown need. Cell values follow openpyxl's (numbers, dates from the number format, booleans, errors, text).
"""

from __future__ import annotations

import io
import posixpath
import re
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import IO, Any

from ._base import Extraction, FileInfo, Reader
from ._results import Truncation
from ._settings import FileSettings
from ._tables import Table, collect_table, merge_truncations, render_table

_MAIN = '{http://schemas.openxmlformats.org/spreadsheetml/2006/main}'
_REL = '{http://schemas.openxmlformats.org/officeDocument/2006/relationships}'
_PACKAGE_REL = '{http://schemas.openxmlformats.org/package/2006/relationships}'
_ROW, _CELL, _VALUE, _INLINE, _TEXT = (f'{_MAIN}{t}' for t in ('row', 'c', 'v', 'is', 't'))
_PHONETIC = f'{_MAIN}rPh'
_ROWS_SHARE = 0.5
"""The share of the conversion time limit spent reading rows; counting the rest, up to `_COUNT_SHARE`."""
_COUNT_SHARE = 0.75
_COUNT_CHUNK = 1 << 20
_PREFIX = re.compile(rb'<(\w+:)?sheetData[\s>/]')
_CELL_REF = re.compile(r'([A-Z]+)')


@dataclass(frozen=True)
class SheetTable:
    """One sheet: its title and its table (None when it has no rows)."""

    title: str
    table: Table | None


def read_sheets(data: bytes, settings: FileSettings) -> list[SheetTable]:
    """Every sheet of an XLSX workbook in order, each as the head and tail rows `collect_table` keeps."""
    started = time.monotonic()
    rows_until = started + settings.conversion_timeout_seconds * _ROWS_SHARE
    count_until = started + settings.conversion_timeout_seconds * _COUNT_SHARE
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = set(archive.namelist())
        workbook = _workbook(archive)
        strings = _SharedStrings(archive, 'xl/sharedStrings.xml' if 'xl/sharedStrings.xml' in names else None)
        dates = _date_styles(archive, names)
        sheets: list[SheetTable] = []
        for title, path in workbook.sheets:
            if path not in names:
                continue
            reader = _SheetReader(archive, path, strings, dates, workbook.epoch, settings)
            table = reader.table(rows_until, count_until)
            sheets.append(SheetTable(title, table))
    return sheets


# ---- the workbook ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Workbook:
    sheets: list[tuple[str, str]]
    """(title, path in the archive) of each sheet, in the workbook's order."""
    epoch: Any
    """The date system's epoch (1900, or 1904 for old Mac workbooks)."""


def _parse(archive: zipfile.ZipFile, path: str) -> Any:
    from defusedxml.ElementTree import fromstring

    return fromstring(archive.read(path), forbid_dtd=True, forbid_entities=True, forbid_external=True)


def _workbook(archive: zipfile.ZipFile) -> _Workbook:
    from openpyxl.utils.datetime import (  # type: ignore[import-untyped,unused-ignore]
        CALENDAR_MAC_1904,
        CALENDAR_WINDOWS_1900,
    )

    book = _parse(archive, 'xl/workbook.xml')
    rels = _parse(archive, 'xl/_rels/workbook.xml.rels')
    targets = {r.get('Id'): r.get('Target', '') for r in rels.iter(f'{_PACKAGE_REL}Relationship')}
    sheets: list[tuple[str, str]] = []
    for sheet in book.iter(f'{_MAIN}sheet'):
        target = targets.get(sheet.get(f'{_REL}id'), '')
        path = target.lstrip('/') if target.startswith('/') else posixpath.normpath(f'xl/{target}')
        sheets.append((sheet.get('name', f'Sheet{len(sheets) + 1}'), path))
    properties = book.find(f'{_MAIN}workbookPr')
    mac = properties is not None and properties.get('date1904', '').lower() in ('1', 'true')
    return _Workbook(sheets, CALENDAR_MAC_1904 if mac else CALENDAR_WINDOWS_1900)


def _date_styles(archive: zipfile.ZipFile, names: set[str]) -> frozenset[int]:
    if 'xl/styles.xml' not in names:
        return frozenset()
    from openpyxl.styles.numbers import (  # type: ignore[import-untyped,unused-ignore]
        BUILTIN_FORMATS,
        is_date_format,
    )

    styles = _parse(archive, 'xl/styles.xml')
    formats: dict[int, str] = dict(BUILTIN_FORMATS)
    for fmt in styles.iter(f'{_MAIN}numFmt'):
        formats[int(fmt.get('numFmtId', '0'))] = fmt.get('formatCode', '')
    cell_formats = styles.find(f'{_MAIN}cellXfs')
    if cell_formats is None:
        return frozenset()
    codes = (formats.get(int(xf.get('numFmtId', '0')), '') for xf in cell_formats.iter(f'{_MAIN}xf'))
    return frozenset(index for index, code in enumerate(codes) if code and is_date_format(code))


class _SharedStrings:
    """The workbook's shared strings, parsed only as far as a cell has asked."""

    def __init__(self, archive: zipfile.ZipFile, path: str | None) -> None:
        self._values: list[str] = []
        self._items: Iterator[str] | None = _string_items(archive, path) if path is not None else None

    def get(self, index: int) -> str:
        while len(self._values) <= index and self._items is not None:
            value = next(self._items, None)
            if value is None:
                self._items = None
                break
            self._values.append(value)
        return self._values[index] if 0 <= index < len(self._values) else ''


def _string_items(archive: zipfile.ZipFile, path: str) -> Iterator[str]:
    from defusedxml.ElementTree import iterparse

    item = f'{_MAIN}si'
    with archive.open(path) as stream:
        events = iterparse(stream, events=('start', 'end'), forbid_dtd=True, forbid_entities=True)
        root = None
        for event, element in events:
            if root is None:
                root = element
            if event == 'end' and element.tag == item:
                yield _text_of(element)
                root.clear()  # the strings already read are not kept twice


def _text_of(element: Any) -> str:
    """The text of a string item or inline string: its plain text, or its rich text runs (phonetic hints
    left out). Walked with a stack: a hostile file's nesting costs no recursion."""
    parts: list[str] = []
    stack = [element]
    while stack:
        node = stack.pop()
        if node.tag == _PHONETIC:
            continue
        if node.tag == _TEXT and node.text:
            parts.append(node.text)
        stack.extend(reversed(list(node)))
    return ''.join(parts)


# ---- one sheet ---------------------------------------------------------------------------------------------


@dataclass
class _Progress:
    rows: int = 0
    """Rows with a value read."""
    columns: int = 0
    """The widest row's width, in columns."""
    declared_rows: int | None = None
    """The rows the sheet's dimension declares (when it has one), the header included."""
    stopped: str | None = None
    """Why reading stopped before the end: None when every row was read."""


class _SheetReader:
    def __init__(
        self,
        archive: zipfile.ZipFile,
        path: str,
        strings: _SharedStrings,
        dates: frozenset[int],
        epoch: Any,
        settings: FileSettings,
    ) -> None:
        self.archive, self.path, self.strings, self.dates, self.epoch = archive, path, strings, dates, epoch
        self.settings = settings
        self.progress = _Progress()

    def table(self, rows_until: float, count_until: float) -> Table | None:
        """The sheet's table; rows after the limits are counted from the raw XML until `count_until`."""
        settings = self.settings
        with self.archive.open(self.path) as stream:
            table = collect_table(self._rows(stream, rows_until), settings, settings.xlsx_max_rows)
        if table is None:
            return None
        progress = self.progress
        table = replace(table, total_columns=max(table.total_columns, progress.columns))
        if table.complete and progress.stopped is None:
            return table
        # reading stopped early: the rows of the sheet, from its dimension or counted in the raw XML
        declared = progress.declared_rows
        counted, whole = (declared, True) if declared else self._count_rows(count_until)
        return replace(
            table,
            complete=False,
            declared_rows=max(counted - 1, table.total_rows) if counted else None,
            counted_all=whole,
            stop_reason=progress.stopped or f'the {table.total_rows:,}-row limit',
        )

    def _rows(self, stream: IO[bytes], until: float) -> Iterator[list[str | None]]:
        from defusedxml.ElementTree import iterparse

        width = self.settings.table_max_columns
        parent = None
        for event, element in iterparse(
            stream, events=('start', 'end'), forbid_dtd=True, forbid_entities=True
        ):
            tag = element.tag
            if event == 'start':
                if tag == f'{_MAIN}sheetData':
                    parent = element
                elif tag == f'{_MAIN}dimension':
                    self.progress.declared_rows = _declared_rows(element.get('ref', ''))
                continue
            if tag != _ROW:
                continue
            row = self._row(element, width)
            if parent is not None:
                parent.clear()  # the rows read are dropped from the tree as they go
            if row is None:
                continue
            self.progress.rows += 1
            yield row
            if self.progress.rows % 512 == 0 and time.monotonic() > until:
                self.progress.stopped = 'the time limit'
                return

    def _row(self, element: Any, width: int) -> list[str | None] | None:
        values: list[str | None] = []
        widest = 0
        for position, cell in enumerate(element.iter(_CELL)):
            column = _column(cell.get('r'), position)
            widest = max(widest, column + 1)
            if column >= width:
                continue
            value = self._value(cell)
            if value is not None:
                values.extend([None] * (column - len(values)))
                values.append(value)
        self.progress.columns = max(self.progress.columns, widest)
        return values if values else None

    def _value(self, cell: Any) -> str | None:
        kind = cell.get('t', 'n')
        if kind == 'inlineStr':
            inline = cell.find(_INLINE)
            return _text_of(inline) if inline is not None else None
        raw = cell.findtext(_VALUE)
        if raw is None:
            return None
        if kind == 's':
            return self.strings.get(int(raw)) if raw.strip().isdigit() else raw
        if kind == 'b':
            return str(raw.strip() in ('1', 'true'))  # as openpyxl reads it: True or False
        if kind in ('str', 'e', 'd'):
            return str(raw)
        return self._number(raw, cell.get('s'))

    def _number(self, raw: str, style: str | None) -> str:
        try:
            number: float | int = float(raw) if any(c in raw for c in '.Ee') else int(raw)
        except ValueError:
            return raw
        if style is not None and style.isdigit() and int(style) in self.dates:
            from openpyxl.utils.datetime import from_excel  # type: ignore[import-untyped,unused-ignore]

            try:
                moment = from_excel(number, self.epoch)
            except (ValueError, OverflowError):
                return str(number)
            return str(moment)
        return str(number)

    def _count_rows(self, until: float) -> tuple[int | None, bool]:
        """The sheet's rows counted in its raw XML (header included), and whether the count reached the end
        before `until`. Counted with `bytes.count` on each inflated chunk: inflating is the cost."""
        total = 0
        tail = b''
        tags: tuple[bytes, ...] = ()
        with self.archive.open(self.path) as stream:
            while True:
                chunk = stream.read(_COUNT_CHUNK)
                if not chunk:
                    return total, True
                if not tags:
                    found = _PREFIX.search(chunk)
                    prefix = (found.group(1) if found else None) or b''
                    tags = (b'<' + prefix + b'row ', b'<' + prefix + b'row>')
                window = tail + chunk
                total += sum(window.count(tag) - tail.count(tag) for tag in tags)
                tail = chunk[-8:]
                if time.monotonic() > until:
                    return total, False


def _declared_rows(ref: str) -> int | None:
    """The last row of a dimension like `A1:E3000001` (None for a single cell or none)."""
    match = re.fullmatch(r'[A-Z]+\d+:[A-Z]+(\d+)', ref.strip().upper())
    return int(match.group(1)) if match else None


def _column(ref: str | None, position: int) -> int:
    """The 0-based column of a cell reference like `AB12` (its position in the row when it has none)."""
    if not ref:
        return position
    match = _CELL_REF.match(ref.upper())
    if match is None:
        return position
    index = 0
    for letter in match.group(1):
        index = index * 26 + ord(letter) - 64
    return index - 1


class XlsxReader(Reader):
    """Excel 2007+ workbooks, each sheet's XML streamed row by row (`read_sheets`).

    Rather than markitdown's pandas-to-HTML rendering: only the rows shown are kept, reading stops at the row
    limit or the time limit (the rest is counted), and the same `collect_table` streaming as CSV applies.
    """

    format = 'XLSX'
    media_types = ('application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',)
    extensions = ('.xlsx', '.xlsm')

    def read(self, data: bytes, info: FileInfo, settings: FileSettings) -> Extraction:
        parts: list[str] = []
        truncations: list[Truncation] = []
        for sheet in read_sheets(data, settings):
            parts.append(f'## {sheet.title}')
            if sheet.table is None:
                parts.append('(empty sheet)')
                continue
            markdown, sheet_truncations = render_table(sheet.table, settings)
            parts.append(markdown)
            truncations.extend(sheet_truncations)
        return Extraction('\n\n'.join(parts), merge_truncations(truncations), pages=len(parts) // 2)

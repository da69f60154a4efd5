"""Plain-text output for the CLI: an aligned table and a progress bar, without third-party dependencies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TextStream(Protocol):
    """What the progress bar writes to: a text file, stdout, or a tee."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...

    def isatty(self) -> bool: ...


def format_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    align: str,
    footer: Sequence[Sequence[object]] = (),
) -> str:
    """Rows as an aligned plain-text table: `align` has one letter per column, `l` or `r`; ints are printed
    with thousands separators, floats with one decimal. `footer` rows follow a rule line."""
    cells = [[_cell(v) for v in row] for row in (headers, *rows, *footer)]
    widths = [0] * len(headers)
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))

    def line(row: Sequence[str]) -> str:
        texts = [t.rjust(w) if a == 'r' else t.ljust(w) for t, w, a in zip(row, widths, align, strict=False)]
        return '  '.join(texts).rstrip()

    rule = '  '.join('-' * w for w in widths)
    body, tail = cells[1 : len(rows) + 1], cells[len(rows) + 1 :]
    out = [line(cells[0]), rule, *map(line, body)]
    if tail:
        out += [rule, *map(line, tail)]
    return '\n'.join(out)


def _cell(value: object) -> str:
    if isinstance(value, int):
        return f'{value:,}'
    if isinstance(value, float):
        return f'{value:,.1f}'
    return '-' if value is None else str(value)


class ProgressBar:
    """A one-line progress bar on a terminal; on a pipe or a file, a `progress: n/total` line now and then.

    Lines printed through `print()` appear above the bar, which is redrawn after them.
    """

    def __init__(
        self,
        total: int,
        stream: TextStream,
        *,
        width: int = 30,
        tty: bool | None = None,
    ) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.width = width
        self.tty = stream.isatty() if tty is None else tty
        self.every = max(self.total // 10, 1)
        self.done = 0
        self.label = ''
        self._drawn = False

    def update(self, done: int, label: str = '') -> None:
        previous, self.done, self.label = self.done, min(done, self.total), label
        if self.tty:
            self._draw()
        elif self.done // self.every > previous // self.every or self.done == self.total > previous:
            self.stream.write(f'progress: {self.done}/{self.total} requests {label}'.rstrip() + '\n')
            self.stream.flush()

    def print(self, text: str) -> None:
        if self.tty and self._drawn:
            self.stream.write('\r\x1b[2K')
        self.stream.write(text + '\n')
        if self.tty and self._drawn:
            self._draw()
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._drawn:
            self.stream.write('\n')
            self.stream.flush()
            self._drawn = False

    def _draw(self) -> None:
        filled = round(self.width * self.done / self.total)
        bar = '#' * filled + '.' * (self.width - filled)
        self.stream.write(f'\r\x1b[2K[{bar}] {self.done}/{self.total} {self.label}'.rstrip())
        self.stream.flush()
        self._drawn = True

"""The one-line descriptions the model sees next to each file."""

from __future__ import annotations

from ._results import Truncation, UnreadableFile


def human_size(n: int) -> str:
    if n < 1024:
        return f'{n} B'
    if n < 1024 * 1024:
        return f'{round(n / 1024):,} KB'
    if n < 1024**3:
        return f'{n / 1024 / 1024:.1f} MB'
    return f'{n / 1024**3:.1f} GB'


def label(name: str | None) -> str:
    # One line, whatever the caller passed as a name.
    return ' '.join((name or 'file').split())


def document_manifest(
    name: str | None,
    size: int,
    fmt: str,
    pages: int | None,
    truncations: tuple[Truncation, ...],
    shown_tokens: int,
    full_tokens: int | None,
    note: str | None,
) -> str:
    details = [human_size(size), fmt]
    if pages is not None:
        details.append(f'{pages:,} page{"s" if pages != 1 else ""}')
    parts = [f'{label(name)} ({", ".join(details)}) -- converted to markdown']
    for t in truncations:
        if t.unit != 'tokens':
            parts.append(f'{t.unit} shown {t.shown:,} of {t.total:,}')
    if full_tokens is not None and full_tokens > shown_tokens:
        parts.append(f'{shown_tokens:,} of {full_tokens:,} tokens shown')
    else:
        parts.append(f'{shown_tokens:,} tokens')
    line = ', '.join(parts)
    if note:
        line += f' -- note: {note}'
    return ' '.join(line.split())


def unreadable(name: str | None, media_type: str, size: int, reason: str) -> UnreadableFile:
    """A file that is not shown, with the manifest line that says why."""
    manifest = ' '.join(f'{label(name)} ({human_size(size)}, {media_type}) -- not shown: {reason}'.split())
    return UnreadableFile('unreadable', name, media_type, size, reason, manifest)

"""The one-line descriptions the model sees next to each file."""

from __future__ import annotations

from ._results import ConvertedDocument, UnreadableFile


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


def document_manifest(document: ConvertedDocument) -> str:
    """The line describing `document`: what it is and how much of it is shown."""
    details = [human_size(document.size_bytes), document.format]
    if document.pages is not None:
        details.append(f'{document.pages:,} page{"s" if document.pages != 1 else ""}')
    parts = [f'{label(document.name)} ({", ".join(details)}) -- converted to markdown']
    parts.extend(
        f'{t.unit} shown {t.shown:,} of {t.total:,}' for t in document.truncations if t.unit != 'tokens'
    )
    shown, full = document.shown_tokens, document.full_text_tokens
    parts.append(
        f'{shown:,} of {full:,} tokens shown' if full is not None and full > shown else f'{shown:,} tokens'
    )
    line = ', '.join(parts)
    if document.note:
        line += f' -- note: {document.note}'
    return ' '.join(line.split())


def unreadable(name: str | None, media_type: str, size: int, reason: str) -> UnreadableFile:
    """A file that is not shown, with the manifest line that says why."""
    manifest = ' '.join(f'{label(name)} ({human_size(size)}, {media_type}) -- not shown: {reason}'.split())
    return UnreadableFile('unreadable', name, media_type, size, reason, manifest)

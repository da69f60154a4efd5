"""Text to bytes for every id, hash and store: lone surrogates (`os.fsdecode` of a Latin-1 file name) are
written in their `surrogatepass` form, one-to-one and byte-identical to `str.encode()` for valid text.
"""

from __future__ import annotations

import io

_PIECE = 4 * 1024 * 1024
"""Texts longer than this are encoded a piece at a time: one `encode` of 200 MB holds the GIL for a quarter
of a second, stalling the event loop even from a worker thread."""
_ASCII_AT_ONCE = 48 * 1024 * 1024
"""ASCII text up to this size is copied in one call (about 1 ms per MB): pieces would need a growing buffer,
twice the memory for a moment."""


def utf8(text: str) -> bytes:
    """`text` as UTF-8; lone surrogates in their `surrogatepass` form instead of an `UnicodeEncodeError`."""
    if len(text) > _PIECE and not (len(text) <= _ASCII_AT_ONCE and text.isascii()):
        out = io.BytesIO()
        for start in range(0, len(text), _PIECE):
            out.write(_encode(text[start : start + _PIECE]))  # a surrogate pair is never split: str holds
        return out.getvalue()  # code points, and a pair written as two is two lone surrogates already
    return _encode(text)


def _encode(text: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode('utf-8', 'surrogatepass')


def from_utf8(data: bytes) -> str:
    """The text `utf8` encoded, exactly (lone surrogates included)."""
    return data.decode('utf-8', 'surrogatepass')

"""Text to bytes for every id, hash and store, whatever the text holds.

A Python `str` may hold lone surrogates that no valid UTF-8 can carry: `'Jos\\udce9'` is what
`surrogateescape` decoding and `os.fsdecode` make of a file name in Latin-1, and a tool may return it as it
is. `str.encode()` raises on them, so every place where text becomes bytes (artifact ids, cache keys, the
stores, the transcripts) goes through `utf8`, which writes them as their 3-byte `surrogatepass` form:
one-to-one (two different texts never give the same bytes, so ids and keys stay distinct) and, for valid
text, byte-identical to `str.encode()`. `from_utf8` reads such bytes back exactly.
"""

from __future__ import annotations

__all__ = ('from_utf8', 'utf8')


def utf8(text: str) -> bytes:
    """`text` as UTF-8; lone surrogates in their `surrogatepass` form instead of an `UnicodeEncodeError`."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return text.encode('utf-8', 'surrogatepass')


def from_utf8(data: bytes) -> str:
    """The text `utf8` encoded, exactly (lone surrogates included)."""
    return data.decode('utf-8', 'surrogatepass')

"""What a search reads: text artifacts, within bounds (kept apart so the read-back tool and the search, which
loads with the first search, share them)."""

from __future__ import annotations

SEARCH_MAX_ARTIFACTS = 500
"""A search reads at most this many of the scope's artifacts, the newest first."""
SEARCH_MAX_BYTES = 32 * 1024 * 1024
"""... and at most this many bytes of them in all: a search costs bounded time whatever the store holds (what
it did not read is said in its answer). It reads them one at a time and keeps only the chunks that match, so
its memory is one artifact (`_search.SEARCH_WORKING_BYTES`, 64 MiB at most) plus the best passages; searches
on one event loop run one at a time, and parallel ones of the same scope share one scan."""


def is_text(media_type: str) -> bool:
    """Whether a stored artifact of `media_type` is read back (and searched) as text."""
    return media_type.startswith('text/') or media_type in _TEXT_TYPES


_TEXT_TYPES = frozenset(
    {'application/json', 'application/xml', 'application/x-ndjson', 'application/yaml', 'image/svg+xml'}
)

"""An in-process LRU cache: the default everywhere."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..messages._utf8 import utf8
from ._base import SummaryCache


@dataclass(frozen=True)
class _Entry:
    value: str
    expires_at: float | None
    size: int


class MemoryCache(SummaryCache):
    """A least-recently-used cache bounded by entry count and by total UTF-8 size of keys and values.

    TTLs use a monotonic clock, so wall-clock jumps never expire entries. No method awaits between reading and
    writing its dict, so concurrent tasks on one loop need no lock (it is not thread-safe).
    """

    def __init__(
        self,
        max_entries: int = 1024,
        max_bytes: int = 64 * 1024 * 1024,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError('max_entries and max_bytes must be positive')
        super().__init__()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """Total UTF-8 size of the stored keys and values (expired entries count until touched)."""
        return self._bytes

    async def _get(self, key: str) -> str | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires_at is not None and self._clock() >= entry.expires_at:
            self._remove(key)
            return None
        self._entries.move_to_end(key)
        return entry.value

    async def _set(self, key: str, value: str, ttl: float | None) -> None:
        self._remove(key)
        # UTF-8 size is what the process actually holds to within a small constant; good enough for a bound.
        size = len(utf8(key)) + len(utf8(value))
        if size > self.max_bytes:
            # Storing it would evict everything else and still not fit.
            return
        expires_at = None if ttl is None else self._clock() + ttl
        self._entries[key] = _Entry(value, expires_at, size)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._remove(oldest)

    async def _delete(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.size
